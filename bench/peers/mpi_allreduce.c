/* Allreduce peer for bench/compare: float32 sum, in place, on MPI_COMM_WORLD.
 *
 * Usage: mpi_allreduce BYTES:ITERS[,BYTES:ITERS...] [FUSION_REPS]
 * Every iteration is timed on every rank; the per-iteration maximum over ranks is what a
 * synchronous caller waits for, so rank 0 reports statistics of those maxima as JSON lines
 * (same method as the Gloo and torch peers). Warm-up: 10 % of ITERS, at least 3.
 * FUSION_REPS > 0 adds 100 x 4 KiB done one by one and as MPI_Iallreduce + MPI_Waitall. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_peer.h"


static void check_sum(float* buf, long count, int size, int rank) {
  for (long i = 0; i < count; ++i) buf[i] = (float)(rank + 1);
  MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  float want = (float)(size * (size + 1) / 2);
  for (long i = 0; i < count; i += 1 + count / 97) {
    if (buf[i] != want) {
      fprintf(stderr, "rank %d: allreduce result %g at %ld, want %g\n", rank, buf[i], i, want);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
  }
  memset(buf, 0, count * sizeof(float)); /* zeros stay zero: no overflow while timing */
}

int main(int argc, char** argv) {
  int rank, size;
  mpi_peer_init(&argc, &argv, &rank, &size);
  if (argc < 2) {
    if (rank == 0) fprintf(stderr, "usage: %s BYTES:ITERS[,...] [FUSION_REPS]\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  char* spec = strdup(argv[1]);
  for (char* tok = strtok(spec, ","); tok; tok = strtok(NULL, ",")) {
    long bytes = 0;
    int iters = 0;
    if (sscanf(tok, "%ld:%d", &bytes, &iters) != 2 || bytes < 4 || iters < 1) {
      if (rank == 0) fprintf(stderr, "bad size spec '%s' (want BYTES:ITERS)\n", tok);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long count = bytes / 4;
    float* buf = malloc(count * sizeof(float));
    double* t = malloc(iters * sizeof(double));
    check_sum(buf, count, size, rank);
    int warm = iters / 10 < 3 ? 3 : iters / 10;
    for (int i = 0; i < warm; ++i)
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < iters; ++i) {
      double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      t[i] = MPI_Wtime() - t0;
    }
    report("allreduce", bytes, t, iters, rank);
    free(buf);
    free(t);
  }
  int reps = argc > 2 ? atoi(argv[2]) : 0;
  if (reps > 0) {
    enum { kTensors = 100, kCount = 1024 };
    float* bufs = calloc((size_t)kTensors * kCount, sizeof(float));
    MPI_Request req[kTensors];
    double* t = malloc(reps * sizeof(double));
    for (int mode = 0; mode < 2; ++mode) {
      for (int r = -3; r < reps; ++r) { /* 3 warm-up batches */
        double t0 = MPI_Wtime();
        for (int k = 0; k < kTensors; ++k) {
          float* b = bufs + (size_t)k * kCount;
          if (mode == 0)
            MPI_Allreduce(MPI_IN_PLACE, b, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          else
            MPI_Iallreduce(MPI_IN_PLACE, b, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req[k]);
        }
        if (mode == 1) MPI_Waitall(kTensors, req, MPI_STATUSES_IGNORE);
        if (r >= 0) t[r] = MPI_Wtime() - t0;
      }
      report(mode == 0 ? "fusion_one_by_one" : "fusion_async", 100 * 4096, t, reps, rank);
    }
    free(bufs);
    free(t);
  }
  free(spec);
  MPI_Finalize();
  return 0;
}
