// Shared setup for the raw Gloo peers: a full-mesh TCP context on loopback through a FileStore,
// exactly as a program using Gloo directly (no hvdrun, no runtime) would build it.
#pragma once

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

namespace hvd_bench {

struct GlooArgs {
  int rank = 0;
  int size = 0;
  std::string storeDir;  // must be fresh per job: Gloo's FileStore never deletes keys
};

inline GlooArgs parseGlooArgs(int argc, char** argv, int first, const char* usage) {
  if (argc < first + 3) {
    std::fprintf(stderr, "usage: %s %s\n", argv[0], usage);
    std::exit(2);
  }
  GlooArgs a;
  a.rank = std::atoi(argv[first]);
  a.size = std::atoi(argv[first + 1]);
  a.storeDir = argv[first + 2];
  if (a.size < 1 || a.rank < 0 || a.rank >= a.size) {
    std::fprintf(stderr, "bad rank %s / size %s\n", argv[first], argv[first + 1]);
    std::exit(2);
  }
  return a;
}

inline std::shared_ptr<gloo::rendezvous::Context> connectLoopback(const GlooArgs& a) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(a.storeDir);
  auto context = std::make_shared<gloo::rendezvous::Context>(a.rank, a.size);
  context->connectFullMesh(store, device);
  return context;
}

}  // namespace hvd_bench
