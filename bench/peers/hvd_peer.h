/* What the libhvd peers (hvd_allreduce.c, hvd_collectives.c) share: a monotonic clock in seconds, and
 * exiting with code 3 and libhvd's error text when a call fails. */
#ifndef HVD_BENCH_HVD_PEER_H
#define HVD_BENCH_HVD_PEER_H

#include <hvd/hvd.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void check(int status, const char* what) {
  if (status != HVD_SUCCESS) {
    fprintf(stderr, "rank %d: %s failed (%d): %s\n", hvd_rank(), what, status, hvd_error_text());
    exit(3);
  }
}

#endif
