// Launch-latency peer: two (or N) processes started from a shell meet through a FileStore,
// connect Gloo's full mesh, run one barrier and exit. No orderly teardown is attempted: this is
// what plain Gloo code does, and its exit race (peer_baselines.md) shows up as failed runs.
#include <gloo/barrier.h>

#include "gloo_common.h"

int main(int argc, char** argv) {
  auto args = hvd_bench::parseGlooArgs(argc, argv, 1, "RANK SIZE STORE_DIR");
  auto context = hvd_bench::connectLoopback(args);
  gloo::BarrierOptions opts(context);
  gloo::barrier(opts);
  return 0;
}
