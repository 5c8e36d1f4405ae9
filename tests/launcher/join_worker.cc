// Test worker: joins the rendezvous the way a Gloo worker does (PUT global/rank_<rank>), with the
// address, port and token hvdrun put in its environment, then sleeps for argv[1] seconds (default 0).
// Ranks listed in HVD_TEST_NO_JOIN (comma-separated) skip the join and just sleep.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "rendezvous/http_store.h"
#include "rendezvous/token.h"

int main(int argc, char** argv) {
  const char* addr = std::getenv("HOROVOD_GLOO_RENDEZVOUS_ADDR");
  const char* port = std::getenv("HOROVOD_GLOO_RENDEZVOUS_PORT");
  const char* rank = std::getenv("HOROVOD_RANK");
  if (!addr || !port || !rank) {
    std::fprintf(stderr, "join_worker: HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT or HOROVOD_RANK missing\n");
    return 2;
  }
  const std::string skip =
      std::string(",") + (std::getenv("HVD_TEST_NO_JOIN") ? std::getenv("HVD_TEST_NO_JOIN") : "") + ",";
  if (skip.find("," + std::string(rank) + ",") == std::string::npos) {
    hvd::rendezvous::StoreOptions options;
    options.host = addr;
    options.port = static_cast<uint16_t>(std::atoi(port));
    options.token = hvd::rendezvous::tokenFromEnvironment();
    hvd::rendezvous::HttpStore store(options);
    store.set(std::string("global/rank_") + rank, hvd::rendezvous::Bytes{'x'});
    std::printf("joined %s\n", rank);
    std::fflush(stdout);
  }
  std::this_thread::sleep_for(std::chrono::seconds(argc > 1 ? std::atoi(argv[1]) : 0));
  return 0;
}
