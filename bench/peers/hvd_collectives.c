/* hvd allgather, broadcast, alltoall and reducescatter, measured by exactly the method of the peer
 * programs (mpi_collectives.c; hvd_allreduce.c for allreduce), through the public C API only. Started by
 * bench/compare as `hvdrun -np N -H localhost:N hvd_collectives OP[,OP...] BYTES:ITERS[,...]`; compiled
 * at bench time against the libhvd of the build being measured.
 *
 * BYTES is the size of every rank's input buffer, float32, the same for every operation and for the MPI
 * peer (it must be a multiple of 4 x the number of ranks):
 *   allgather      each rank contributes BYTES (rows = BYTES / 4, one element each); each receives
 *                  ranks x BYTES
 *   broadcast      BYTES from rank 0 to every rank, in place
 *   alltoall       each rank sends BYTES in all, BYTES / ranks to each rank (itself included, even
 *                  splits), and receives BYTES
 *   reducescatter  each rank contributes BYTES (sum); each receives its block of BYTES / ranks
 * One timed iteration is the submission, hvd_wait and, for the operations whose result libhvd keeps
 * (allgather, alltoall, reducescatter), hvd_result and hvd_release: what a caller of the C API does to
 * get the result (it reads it in place; MPI writes it into the caller's buffer).
 * Per-iteration times, maximum over ranks, statistics on rank 0 as JSON lines (op = the operation's name,
 * bytes = BYTES), warm-up 10 % (>= 3). Every operation's result is checked once before timing. */
#include <hvd/hvd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collective_ops.h"
#include "hvd_peer.h"
#include "peer_stats.h"


static void report(const char* op, long bytes, double* t, int n) {
  int h = hvd_allreduce_async("bench.times", t, t, (size_t)n, HVD_FLOAT64, HVD_MAX, 1.0, 1.0);
  if (h < 0) check(h, "bench.times");
  check(hvd_wait(h), "bench.times");
  if (hvd_rank() == 0) peer_print_stats(op, bytes, t, n);
}

/* Runs one operation on count floats of buf and waits for it. Returns the handle of an operation whose
 * result libhvd keeps (the caller reads it with hvd_result, then releases it), or -1. */
static int run_op(int op, float* buf, size_t count) {
  const char* name = kOpNames[op];
  int h = -1;
  switch (op) {
    case kAllgather: h = hvd_allgather_async(name, buf, count, 1, HVD_FLOAT32); break;
    case kBroadcast: h = hvd_broadcast_async(name, buf, count, HVD_FLOAT32, 0); break;
    case kAlltoall: h = hvd_alltoall_async(name, buf, count, 1, HVD_FLOAT32, NULL); break;
    case kReducescatter: h = hvd_reducescatter_async(name, buf, count, 1, HVD_FLOAT32, HVD_SUM, 1.0, 1.0); break;
  }
  if (h < 0) check(h, name);
  check(hvd_wait(h), name);
  return op == kBroadcast ? -1 : h;
}

/* One iteration as timed: the operation and, where libhvd keeps the result, reading and releasing it. */
static void timed_op(int op, float* buf, size_t count) {
  int h = run_op(op, buf, count);
  if (h >= 0) {
    const void* data;
    size_t rows;
    check(hvd_result(h, &data, &rows), kOpNames[op]);
    check(hvd_release(h), kOpNames[op]);
  }
}

/* Fills buf for a checked run, runs op once and compares the result with what it must be. */
static void check_op(int op, float* buf, size_t count, int rank, int size) {
  const size_t block = count / size;
  for (size_t i = 0; i < count; ++i) buf[i] = collective_input(op, (long)i, (long)block, rank, size);
  int h = run_op(op, buf, count);
  const float* out = buf;
  size_t rows = count, want_rows = count;
  if (h >= 0) {
    const void* data;
    check(hvd_result(h, &data, &rows), kOpNames[op]);
    out = data;
    want_rows = op == kAllgather ? count * size : op == kReducescatter ? block : count;
  }
  if (rows != want_rows) {
    fprintf(stderr, "rank %d: %s gave %zu elements, want %zu\n", rank, kOpNames[op], rows, want_rows);
    exit(3);
  }
  for (size_t i = 0; i < rows; i += 1 + rows / 97) {
    const float want = collective_expected(op, (long)i, count, block, rank, size);
    if (out[i] != want) {
      fprintf(stderr, "rank %d: %s result %g at %zu, want %g\n", rank, kOpNames[op], out[i], i, want);
      exit(3);
    }
  }
  if (h >= 0) check(hvd_release(h), kOpNames[op]);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s OP[,OP...] BYTES:ITERS[,...]  (OP: allgather broadcast alltoall reducescatter)\n",
            argv[0]);
    return 2;
  }
  check(hvd_init(), "hvd_init");
  const int rank = hvd_rank(), size = hvd_size();
  struct collective_args args;
  char why[256];
  if (!parse_collective_args(argv[1], argv[2], size, &args, why, sizeof why)) {
    fprintf(stderr, "%s\n", why);
    return 2;
  }
  for (int o = 0; o < args.nops; ++o) {
    const int op = args.ops[o];
    for (int s = 0; s < args.nsizes; ++s) {
      const long bytes = args.bytes[s];
      const int iters = args.iters[s];
      size_t count = (size_t)bytes / 4;
      float* buf = malloc(count * sizeof(float));
      double* t = malloc(iters * sizeof(double));
      check_op(op, buf, count, rank, size);
      int warm = iters / 10 < 3 ? 3 : iters / 10;
      for (int i = 0; i < warm; ++i) timed_op(op, buf, count);
      for (int i = 0; i < iters; ++i) {
        double t0 = now();
        timed_op(op, buf, count);
        t[i] = now() - t0;
      }
      report(kOpNames[op], bytes, t, iters);
      free(buf);
      free(t);
    }
  }
  hvd_shutdown();
  return 0;
}
