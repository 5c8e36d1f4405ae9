// Worker for the failure tests. argv[1] selects the scenario:
//   stall   rank 0 allreduces "lonely", the other ranks "other": neither is ever complete; each prints
//           the error it gets (the stall shutdown)
//   die     every rank allreduces in a loop; rank 1 exits abruptly (_exit) after a few steps; the
//           survivors print the error their pending handle failed with and exit 0
//   timeline  a few named allreduces (for HOROVOD_TIMELINE)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <unistd.h>

#include <hvd/hvd.h>

namespace {

int allreduceOnce(const char* name, float* v, size_t n) {
  const int h = hvd_allreduce_async(name, v, v, n, HVD_FLOAT32, HVD_SUM, 1.0, 1.0);
  return h < 0 ? h : hvd_wait(h);
}

}  // namespace

int main(int argc, char** argv) {
  const char* scenario = argc > 1 ? argv[1] : "";
  if (hvd_init() != HVD_SUCCESS) {
    std::fprintf(stderr, "init: %s\n", hvd_error_text());
    return 2;
  }
  const int rank = hvd_rank();
  float v[16] = {1};
  if (std::strcmp(scenario, "stall") == 0) {
    const char* name = rank == 0 ? "lonely" : "other";
    const int status = allreduceOnce(name, v, 16);
    std::printf("rank %d %s status %d: %s\n", rank, name, status, hvd_error_text());
    hvd_shutdown();
    return 0;
  }
  if (std::strcmp(scenario, "die") == 0) {
    for (int step = 0;; ++step) {
      if (rank == 1 && step == 5) _exit(9);
      const auto start = std::chrono::steady_clock::now();
      const int status = allreduceOnce("step", v, 16);
      if (status != HVD_SUCCESS) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::printf("rank %d survived: step %d failed with status %d after %.1f s: %s\n", rank, step, status, s,
                    hvd_error_text());
        hvd_shutdown();
        return 0;
      }
    }
  }
  if (std::strcmp(scenario, "timeline") == 0) {
    for (int step = 0; step < 3; ++step) {
      allreduceOnce("grad_a", v, 16);
      allreduceOnce("grad_b", v, 4);
    }
    hvd_shutdown();
    return 0;
  }
  std::fprintf(stderr, "unknown scenario '%s'\n", scenario);
  return 2;
}
