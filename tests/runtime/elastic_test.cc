// Elastic parts of libhvd with real worker processes: the distinct "peer lost" failure, host updates between
// steps, the state API and the run loop. The test plays hvdrun's elastic driver through the rendezvous
// server (JobOptions::on_server, Server::beginRound / markStarted).
#include <catch2/catch.hpp>

#include <signal.h>

#include <string>
#include <vector>

#include "rendezvous/server.h"
#include "tests/runtime/job.h"

using namespace hvd::runtime::testing;

namespace {

// The number after `label ` in text (at its first occurrence), or nothing when absent.
std::optional<double> numberAfter(const std::string& text, const std::string& label) {
  const auto at = text.find(label + " ");
  if (at == std::string::npos) return std::nullopt;
  return std::stod(text.substr(at + label.size() + 1));
}

}  // namespace

TEST_CASE("a peer SIGKILLed mid-collective fails every survivor's in-flight and queued operations with "
          "HVD_ERR_PEER_LOST, and hvd_shutdown returns within 2 s",
          "[multiprocess][elastic][failure]") {
  const bool shm = GENERATE(false, true);
  JobOptions o;
  o.np = 3;
  o.argv = {buildPath("tests/runtime/scenario_worker"), "peer_lost"};
  // The Gloo timeout is long: the failure must come from the lost peer, not from a timeout.
  o.env = {{"HOROVOD_GLOO_TIMEOUT_SECONDS", "30"}, {"HVD_SHARED_MEMORY", shm ? "1" : "0"}};
  o.timeout = std::chrono::seconds(45);
  const auto results = runJob(o);
  INFO((shm ? "shared memory" : "TCP") << "\n" << describe(results));
  REQUIRE(results[1].signal == SIGKILL);
  for (int r : {0, 2}) {
    REQUIRE(results[r].exit_code == 0);
    const auto& out = results[r].output;
    REQUIRE(out.find("peer_lost step 3") != std::string::npos);
    CHECK(numberAfter(out, "big") == -9.0);
    CHECK(numberAfter(out, "queued") == -9.0);
    CHECK(numberAfter(out, "resubmit") == -9.0);
    const auto shutdown = numberAfter(out, "shutdown");
    REQUIRE(shutdown);
    CHECK(*shutdown < 2.0);
  }
}
