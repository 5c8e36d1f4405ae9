/* The operations of the collectives peers (hvd_collectives.c, mpi_collectives.c) and the value each
 * checks at element i of its result, so that both programs test the same thing. Inputs: allgather,
 * rank r contributes r + 1; broadcast, rank 0 holds 7; alltoall, the block for rank p holds
 * r * size + p + 1; reducescatter, rank r contributes r + 1 everywhere. */
#ifndef HVD_BENCH_COLLECTIVE_OPS_H
#define HVD_BENCH_COLLECTIVE_OPS_H

#include <stdio.h>
#include <string.h>

enum { kAllgather, kBroadcast, kAlltoall, kReducescatter, kOps };
static const char* const kOpNames[kOps] = {"allgather", "broadcast", "alltoall", "reducescatter"};

/* The operation named `name`, or kOps when there is none. */
static int collective_op(const char* name) {
  int op = 0;
  while (op < kOps && strcmp(name, kOpNames[op]) != 0) ++op;
  return op;
}

/* One BYTES:ITERS item of the size list into *bytes and *iters; 0 when it is malformed or BYTES is not a
 * positive multiple of 4 x size (every rank's share a whole number of floats). */
static int parse_size_spec(const char* tok, int size, long* bytes, int* iters) {
  *bytes = 0;
  *iters = 0;
  return sscanf(tok, "%ld:%d", bytes, iters) == 2 && *bytes >= 4 && *iters >= 1 && *bytes % (4L * size) == 0;
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
