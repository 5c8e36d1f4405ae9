/* Allgather, broadcast, alltoall and reducescatter peer for bench/compare: float32, on MPI_COMM_WORLD,
 * measured like mpi_allreduce.c (and hvd_collectives.c, its counterpart under hvdrun).
 *
 * Usage: mpi_collectives OP[,OP...] BYTES:ITERS[,BYTES:ITERS...]
 * OP: allgather (MPI_Allgather), broadcast (MPI_Bcast), alltoall (MPI_Alltoall), reducescatter
 * (MPI_Reduce_scatter_block, sum). BYTES is the size of every rank's input buffer (a multiple of
 * 4 x the number of ranks):
 *   allgather      each rank contributes BYTES; each receives ranks x BYTES
 *   broadcast      BYTES from rank 0 to every rank, in place
 *   alltoall       each rank sends BYTES in all, BYTES / ranks to each rank (itself included), and
 *                  receives BYTES
 *   reducescatter  each rank contributes BYTES; each receives its block of BYTES / ranks
 * Every iteration is timed on every rank; the per-iteration maximum over ranks is what a synchronous
 * caller waits for, so rank 0 reports statistics of those maxima as JSON lines. Warm-up: 10 % of ITERS,
 * at least 3. Every operation's result is checked once before timing. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective_ops.h"
#include "mpi_peer.h"


/* One operation on count floats of in (out: ranks x count floats, unused by broadcast). */
static void run_op(int op, float* in, float* out, long count, int size) {
  const int block = (int)(count / size);
  switch (op) {
    case kAllgather:
      MPI_Allgather(in, (int)count, MPI_FLOAT, out, (int)count, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case kBroadcast: MPI_Bcast(in, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case kAlltoall: MPI_Alltoall(in, block, MPI_FLOAT, out, block, MPI_FLOAT, MPI_COMM_WORLD); break;
    case kReducescatter: MPI_Reduce_scatter_block(in, out, block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
  }
}

static void check_op(int op, float* in, float* out, long count, int rank, int size) {
  const long block = count / size;
  for (long i = 0; i < count; ++i) in[i] = collective_input(op, (long)i, (long)block, rank, size);
  run_op(op, in, out, count, size);
  const float* res = op == kBroadcast ? in : out;
  const long n = op == kAllgather ? count * size : op == kReducescatter ? block : count;
  for (long i = 0; i < n; i += 1 + n / 97) {
    const float want = collective_expected(op, (long)i, count, block, rank, size);
    if (res[i] != want) {
      fprintf(stderr, "rank %d: %s result %g at %ld, want %g\n", rank, kOpNames[op], res[i], i, want);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
  }
}

int main(int argc, char** argv) {
  int rank, size;
  mpi_peer_init(&argc, &argv, &rank, &size);
  if (argc < 3) {
    if (rank == 0)
      fprintf(stderr, "usage: %s OP[,OP...] BYTES:ITERS[,...]  (OP: allgather broadcast alltoall reducescatter)\n",
              argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  struct collective_args args;
  char why[256];
  if (!parse_collective_args(argv[1], argv[2], size, &args, why, sizeof why)) {
    if (rank == 0) fprintf(stderr, "%s\n", why);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  for (int o = 0; o < args.nops; ++o) {
    const int op = args.ops[o];
    for (int s = 0; s < args.nsizes; ++s) {
      const long bytes = args.bytes[s];
      const int iters = args.iters[s];
      long count = bytes / 4;
      float* in = malloc(count * sizeof(float));
      float* out = malloc(count * size * sizeof(float));
      double* t = malloc(iters * sizeof(double));
      check_op(op, in, out, count, rank, size);
      int warm = iters / 10 < 3 ? 3 : iters / 10;
      for (int i = 0; i < warm; ++i) run_op(op, in, out, count, size);
      for (int i = 0; i < iters; ++i) {
        double t0 = MPI_Wtime();
        run_op(op, in, out, count, size);
        t[i] = MPI_Wtime() - t0;
      }
      report(kOpNames[op], bytes, t, iters, rank);
      free(in);
      free(out);
      free(t);
    }
  }
  MPI_Finalize();
  return 0;
}
