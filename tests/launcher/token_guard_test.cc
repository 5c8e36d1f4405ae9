// What hvdrun does when its rendezvous server refuses a request without a token: the decision (end the
// job or only explain) and the one line it prints, without sockets. The real-socket paths are covered by
// launcher_job_test (a local job), launcher_tokenless_netns_test (several hosts) and the rendezvous tests.
#include <catch2/catch.hpp>

#include "launcher/token_guard.h"

using namespace hvd::launcher;
using hvd::rendezvous::PeerInfo;
using hvd::rendezvous::TokenlessRejection;

namespace {

TokenlessRejection rejection(const std::string& address, uint16_t port, unsigned status) {
  TokenlessRejection r;
  r.peer.address = address;
  r.peer.port = port;
  r.peer.loopback = address == "127.0.0.1" || address == "::1";
  r.status = status;
  r.request_line = "GET /global/0";
  return r;
}

}  // namespace

TEST_CASE("tokenless request from a host of the job: one line naming peer and option, job ends",
          "[token_guard]") {
  const std::set<std::string> job = {"10.0.0.2", "10.0.0.3", "fe80::2"};
  for (const auto& [address, shown] :
       std::vector<std::pair<std::string, std::string>>{{"10.0.0.2", "10.0.0.2:41000"},
                                                        {"::ffff:10.0.0.3", "::ffff:10.0.0.3"},
                                                        {"fe80::2", "[fe80::2]:41000"}}) {
    INFO(address);
    const auto v = judgeTokenlessRequest(rejection(address, 41000, 401), job, false);
    CHECK(v.stop_job);
    CHECK_THAT(v.message, Catch::Contains(shown) && Catch::Contains("--no-rendezvous-token") &&
                              Catch::Contains("a host of this job") && Catch::Contains("Horovod") &&
                              Catch::Contains("GET /global/0") && Catch::Contains("stopping the job"));
    CHECK(v.message.find('\n') == std::string::npos);
  }
}

TEST_CASE("tokenless request from elsewhere: explained, the job goes on", "[token_guard]") {
  const std::set<std::string> job = {"10.0.0.2"};
  const auto v = judgeTokenlessRequest(rejection("192.0.2.9", 5555, 401), job, false);
  CHECK_FALSE(v.stop_job);
  CHECK_THAT(v.message, Catch::Contains("192.0.2.9:5555") && Catch::Contains("not a host of this job") &&
                            Catch::Contains("the job goes on") && Catch::Contains("--no-rendezvous-token"));
  CHECK(v.message.find('\n') == std::string::npos);
  // No addresses known (names that did not resolve): never a reason to end the job.
  CHECK_FALSE(judgeTokenlessRequest(rejection("10.0.0.2", 1, 401), {}, false).stop_job);
}

TEST_CASE("local job (trusted local peers): another user's process is explained, never ends the job",
          "[token_guard]") {
  const std::set<std::string> job = {"127.0.0.1", "::1"};
  auto other = rejection("127.0.0.1", 40000, 403);
  other.peer.uid = 65534;
  const auto v = judgeTokenlessRequest(other, job, true);
  CHECK_FALSE(v.stop_job);
  CHECK_THAT(v.message, Catch::Contains("127.0.0.1:40000") && Catch::Contains("uid 65534") &&
                            Catch::Contains("another user") && Catch::Contains("--no-rendezvous-token"));
  auto unknown = rejection("::1", 40001, 403);
  unknown.peer.owner_error = "socket owner: NETLINK_SOCK_DIAG socket: Protocol not supported (errno 93)";
  const auto u = judgeTokenlessRequest(unknown, job, true);
  CHECK_FALSE(u.stop_job);
  CHECK_THAT(u.message, Catch::Contains("[::1]:40001") && Catch::Contains("could not be determined") &&
                            Catch::Contains("Protocol not supported"));
}

TEST_CASE("job host addresses: remote names resolved, this machine's addresses when ranks run here",
          "[token_guard]") {
  const auto remote_only = jobHostAddresses({"10.1.2.3", "::ffff:10.1.2.4", "no-such-host.invalid"}, false);
  CHECK(remote_only == std::set<std::string>{"10.1.2.3", "10.1.2.4"});
  const auto with_local = jobHostAddresses({"10.1.2.3"}, true);
  CHECK(with_local.count("10.1.2.3"));
  CHECK(with_local.count("127.0.0.1"));
  CHECK(with_local.count("::1"));
  CHECK(jobHostAddresses({"localhost"}, false).count("127.0.0.1"));
}
