/* The operations of the collectives peers (hvd_collectives.c, mpi_collectives.c) and the value each
 * checks at element i of its result, so that both programs test the same thing. Inputs: allgather,
 * rank r contributes r + 1; broadcast, rank 0 holds 7; alltoall, the block for rank p holds
 * r * size + p + 1; reducescatter, rank r contributes r + 1 everywhere. */
#ifndef HVD_BENCH_COLLECTIVE_OPS_H
#define HVD_BENCH_COLLECTIVE_OPS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kAllgather, kBroadcast, kAlltoall, kReducescatter, kOps };
static const char* const kOpNames[kOps] = {"allgather", "broadcast", "alltoall", "reducescatter"};

/* The command line of both peers, OP[,OP...] BYTES:ITERS[,...], read before anything is measured. */
enum { kMaxItems = 64 };
struct collective_args {
  int nops, nsizes;
  int ops[kMaxItems];
  long bytes[kMaxItems];
  int iters[kMaxItems];
};

/* Reads `ops` and `sizes` for `size` ranks into *args. BYTES must be a positive multiple of 4 x size (every
 * rank's share a whole number of floats). Returns 0, with the reason in `why`, for an unknown operation, a
 * bad size item or more than kMaxItems of either. */
static int parse_collective_args(const char* ops, const char* sizes, int size, struct collective_args* args,
                                 char* why, size_t why_len) {
  int ok = 1;
  char* list = strdup(ops);
  char* save = NULL;
  args->nops = 0;
  for (char* o = strtok_r(list, ",", &save); o && ok; o = strtok_r(NULL, ",", &save)) {
    int op = 0;
    while (op < kOps && strcmp(o, kOpNames[op]) != 0) ++op;
    if (op == kOps || args->nops == kMaxItems) {
      snprintf(why, why_len, op == kOps ? "unknown operation '%s'" : "too many operations at '%s'", o);
      ok = 0;
    } else {
      args->ops[args->nops++] = op;
    }
  }
  free(list);
  list = strdup(sizes);
  save = NULL;
  args->nsizes = 0;
  for (char* tok = strtok_r(list, ",", &save); tok && ok; tok = strtok_r(NULL, ",", &save)) {
    long bytes = 0;
    int iters = 0;
    if (sscanf(tok, "%ld:%d", &bytes, &iters) != 2 || bytes < 4 || iters < 1 || bytes % (4L * size) != 0) {
      snprintf(why, why_len, "bad size spec '%s' (want BYTES:ITERS, BYTES a multiple of 4 x %d ranks)", tok,
               size);
      ok = 0;
    } else if (args->nsizes == kMaxItems) {
      snprintf(why, why_len, "too many sizes at '%s'", tok);
      ok = 0;
    } else {
      args->bytes[args->nsizes] = bytes;
      args->iters[args->nsizes++] = iters;
    }
  }
  free(list);
  return ok;
}

/* The input at element i of rank `rank`. block: elements per destination (alltoall). */
static float collective_input(int op, long i, long block, int rank, int size) {
  switch (op) {
    case kAllgather:
    case kReducescatter: return (float)(rank + 1);
    case kBroadcast: return rank == 0 ? 7.0f : 0.0f;
    case kAlltoall: return (float)(rank * size + (int)(i / block) + 1); /* block p goes to rank p */
  }
  return 0.0f;
}

/* count: elements each rank contributes; block: elements per destination (alltoall, reducescatter). */
static float collective_expected(int op, long i, long count, long block, int rank, int size) {
  switch (op) {
    case kAllgather: return (float)(i / count + 1);
    case kBroadcast: return 7.0f;
    case kAlltoall: return (float)((int)(i / block) * size + rank + 1); /* from rank i / block */
    case kReducescatter: return (float)(size * (size + 1) / 2);
  }
  return 0.0f;
}

#endif
