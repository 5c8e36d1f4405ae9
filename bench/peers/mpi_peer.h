/* What the MPI peers (mpi_allreduce.c, mpi_collectives.c) share: MPI_Init with this rank and the size of
 * MPI_COMM_WORLD, and the report of an operation's timed iterations. */
#ifndef HVD_BENCH_MPI_PEER_H
#define HVD_BENCH_MPI_PEER_H

#include <mpi.h>

#include "peer_stats.h"

/* MPI_Init, then this rank and the number of ranks in MPI_COMM_WORLD. */
static void mpi_peer_init(int* argc, char*** argv, int* rank, int* size) {
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
}

/* Reduces per-iteration times to their max over ranks and prints one JSON line on rank 0. */
static void report(const char* op, long bytes, double* t, int n, int rank) {
  MPI_Allreduce(MPI_IN_PLACE, t, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) peer_print_stats(op, bytes, t, n);
}

#endif
