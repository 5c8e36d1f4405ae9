/* The operations of the collectives peers (hvd_collectives.c, mpi_collectives.c) and the value each
 * checks at element i of its result, so that both programs test the same thing. Inputs: allgather,
 * rank r contributes r + 1; broadcast, rank 0 holds 7; alltoall, the block for rank p holds
 * r * size + p + 1; reducescatter, rank r contributes r + 1 everywhere. */
#ifndef HVD_BENCH_COLLECTIVE_OPS_H
#define HVD_BENCH_COLLECTIVE_OPS_H

enum { kAllgather, kBroadcast, kAlltoall, kReducescatter, kOps };
static const char* const kOpNames[kOps] = {"allgather", "broadcast", "alltoall", "reducescatter"};

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
