/* Shared by the C peer programs (hvd_allreduce.c, mpi_allreduce.c): statistics of per-iteration times
 * (already reduced to their maximum over ranks) printed as one JSON line, the format bench/compare reads.
 * Header-only because each peer is compiled alone at bench time with its own toolchain (mpicc.*, gcc). */
#ifndef HVD_BENCH_PEER_STATS_H
#define HVD_BENCH_PEER_STATS_H

#include <stdio.h>
#include <stdlib.h>

static int peer_cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Sorts t[0..n) in place and prints median, min, p90 and mean in microseconds. */
static void peer_print_stats(const char* op, long bytes, double* t, int n) {
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += t[i];
  qsort(t, n, sizeof(double), peer_cmp_double);
  printf("{\"op\":\"%s\",\"bytes\":%ld,\"iters\":%d,\"median_us\":%.3f,\"min_us\":%.3f,"
         "\"p90_us\":%.3f,\"mean_us\":%.3f}\n",
         op, bytes, n, t[n / 2] * 1e6, t[0] * 1e6, t[(n * 9) / 10] * 1e6, sum / n * 1e6);
  fflush(stdout);
}

#endif
