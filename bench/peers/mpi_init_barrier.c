/* Launch-latency peer: the smallest MPI job a launcher can start (init, barrier, finalize).
 * Compiled at bench time with mpicc.openmpi and mpicc.mpich by bench/compare. */
#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
