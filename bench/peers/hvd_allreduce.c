/* hvd allreduce, measured by exactly the method of the peer programs (mpi_allreduce.c,
 * gloo_allreduce.cc, torch_allreduce.py), through the public C API only. Started by bench/compare
 * as `hvdrun -np 2 -H localhost:2 hvd_allreduce BYTES:ITERS[,...] [FUSION_REPS]`; compiled at bench
 * time against the libhvd of the build being measured.
 * Per-iteration times, maximum over ranks, statistics on rank 0 as JSON lines, warm-up 10 % (>= 3).
 * FUSION_REPS > 0 adds 100 x 4 KiB submitted asynchronously then waited (fused by the runtime) and
 * the same one by one ("fused-only" leaves the latter out, for a timeline of fusion alone). */
#include <hvd/hvd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hvd_peer.h"
#include "peer_stats.h"

static void allreduce(const char* name, void* buf, size_t count, hvd_dtype dtype, hvd_reduce_op op) {
  int h = hvd_allreduce_async(name, buf, buf, count, dtype, op, 1.0, 1.0);
  if (h < 0) check(h, name);
  check(hvd_wait(h), name);
}

static void report(const char* op, long bytes, double* t, int n) {
  allreduce("bench.times", t, (size_t)n, HVD_FLOAT64, HVD_MAX);
  if (hvd_rank() == 0) peer_print_stats(op, bytes, t, n);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s BYTES:ITERS[,...] [FUSION_REPS]\n", argv[0]);
    return 2;
  }
  check(hvd_init(), "hvd_init");
  const int rank = hvd_rank(), size = hvd_size();
  char* spec = strdup(argv[1]);
  for (char* tok = strtok(spec, ","); tok; tok = strtok(NULL, ",")) {
    long bytes = 0;
    int iters = 0;
    if (sscanf(tok, "%ld:%d", &bytes, &iters) != 2 || bytes < 4 || iters < 1) {
      fprintf(stderr, "bad size spec '%s' (want BYTES:ITERS)\n", tok);
      return 2;
    }
    size_t count = (size_t)bytes / 4;
    float* buf = malloc(count * sizeof(float));
    double* t = malloc(iters * sizeof(double));
    for (size_t i = 0; i < count; ++i) buf[i] = (float)(rank + 1);
    allreduce("bench.check", buf, count, HVD_FLOAT32, HVD_SUM);
    const float want = (float)(size * (size + 1) / 2);
    for (size_t i = 0; i < count; i += 1 + count / 97) {
      if (buf[i] != want) {
        fprintf(stderr, "rank %d: allreduce result %g at %zu, want %g\n", rank, buf[i], i, want);
        return 3;
      }
    }
    memset(buf, 0, count * sizeof(float)); /* zeros stay zero: no overflow while timing */
    int warm = iters / 10 < 3 ? 3 : iters / 10;
    for (int i = 0; i < warm; ++i) allreduce("bench.ar", buf, count, HVD_FLOAT32, HVD_SUM);
    for (int i = 0; i < iters; ++i) {
      double t0 = now();
      allreduce("bench.ar", buf, count, HVD_FLOAT32, HVD_SUM);
      t[i] = now() - t0;
    }
    report("allreduce", bytes, t, iters);
    free(buf);
    free(t);
  }
  int reps = argc > 2 ? atoi(argv[2]) : 0;
  int modes = argc > 3 && strcmp(argv[3], "fused-only") == 0 ? 1 : 2;
  if (reps > 0) {
    enum { kTensors = 100, kCount = 1024 };
    float* bufs = calloc((size_t)kTensors * kCount, sizeof(float));
    int handles[kTensors];
    char names[kTensors][24];
    for (int k = 0; k < kTensors; ++k) snprintf(names[k], sizeof names[k], "bench.f%d", k);
    double* t = malloc(reps * sizeof(double));
    for (int mode = 0; mode < modes; ++mode) {
      for (int r = -3; r < reps; ++r) { /* 3 warm-up batches */
        double t0 = now();
        for (int k = 0; k < kTensors; ++k) {
          float* b = bufs + (size_t)k * kCount;
          if (mode == 0) {
            handles[k] = hvd_allreduce_async(names[k], b, b, kCount, HVD_FLOAT32, HVD_SUM, 1.0, 1.0);
            if (handles[k] < 0) check(handles[k], names[k]);
          } else {
            allreduce(names[k], b, kCount, HVD_FLOAT32, HVD_SUM);
          }
        }
        if (mode == 0)
          for (int k = 0; k < kTensors; ++k) check(hvd_wait(handles[k]), names[k]);
        if (r >= 0) t[r] = now() - t0;
      }
      report(mode == 0 ? "fusion_fused" : "fusion_one_by_one", 100 * 4096, t, reps);
    }
    free(bufs);
    free(t);
  }
  free(spec);
  hvd_shutdown();
  return 0;
}
