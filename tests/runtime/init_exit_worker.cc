// Worker for the exit-race test: init (three Gloo rendezvous + control plane), one barrier, exit.
// Argument "noshutdown": leave without hvd_shutdown() (the library's static destructor shuts down).
#include <cstdio>
#include <cstring>

#include <hvd/hvd.h>

int main(int argc, char** argv) {
  if (hvd_init() != HVD_SUCCESS) {
    std::fprintf(stderr, "init: %s\n", hvd_error_text());
    return 2;
  }
  const int h = hvd_barrier_async();
  if (h < 0 || hvd_wait(h) != HVD_SUCCESS) {
    std::fprintf(stderr, "barrier: %s\n", hvd_error_text());
    return 3;
  }
  if (argc > 1 && std::strcmp(argv[1], "noshutdown") == 0) return 0;
  hvd_shutdown();
  return 0;
}
