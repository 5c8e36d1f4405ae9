// Launch benchmark worker W: hvd init, one barrier, shutdown (the smallest real hvd job).
// `hvdrun -np 2 -H localhost:2 init_barrier` is timed against an MPI_Init/Barrier/Finalize program under
// mpiexec.hydra and mpirun.openmpi by bench/launch/run.sh.
#include <cstdio>
#include <exception>

#include <hvd/hvd.hpp>

int main() {
  try {
    hvd::Session session;
    hvd::barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "init_barrier: %s\n", e.what());
    return 1;
  }
  return 0;
}
