// Requests without the token on a job with other hosts, for real: network namespaces joined by a bridge,
// one sshd each (tests/ssh's NetnsLab), the real hvdrun binary. Horovod's own workers send no token; on a
// multi-host job hvdrun cannot serve them without --no-rendezvous-token, and must say so in one line
// instead of letting them retry into an abort. Reports SKIPPED (exit 77) where `ip netns` is not permitted.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "tests/ssh/sshd_fixture.h"

using namespace std::chrono_literals;
using hvd::test::NetnsLab;
using hvd::test::SshHome;

namespace {

std::string rawRequest() {
  const char* path = std::getenv("HVD_TEST_RAW_REQUEST");  // set by tests/launcher/CMakeLists.txt
  REQUIRE(path);
  return path;
}

using Hvdrun = hvd::test::LabHvdrun;

void requireLab() {
  const std::string why = NetnsLab::unavailable();
  if (!why.empty()) {
    hvd::test::skipTest("network namespaces unavailable here (" + why + "); multi-host token tests not run");
  }
}

// Horovod's exact GET (HTTP/1.1, Host, Content-Length, no token), as a printf format for sh.
const char* const kHorovodGet = R"(GET /global/0 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n)";

std::vector<std::string> linesWith(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(needle) != std::string::npos) out.push_back(line);
  }
  return out;
}

}  // namespace

TEST_CASE(
    "a tokenless request from a host of the job: one line naming host and option, the job ends at once") {
  requireLab();
  SshHome home;
  NetnsLab lab(2, home);
  const std::string log = home.home() + "/hvdrun.out";
  // Rank 0 on host 0 asks as a Horovod worker would, then would sleep long past the test's patience.
  const std::string worker = std::string("printf '") + kHorovodGet + "' | \"" + rawRequest() +
                             "\" \"$HOROVOD_GLOO_RENDEZVOUS_ADDR\" \"$HOROVOD_GLOO_RENDEZVOUS_PORT\" "
                             "--status-only | sed 's/^/answer /'; sleep 60";
  const auto started = std::chrono::steady_clock::now();
  Hvdrun run(lab, home,
             {"-np", "2", "-H", lab.hostAddress(0) + ":1," + lab.hostAddress(1) + ":1", "--ssh-known-hosts",
              "strict", "--termination-grace-seconds", "1", "sh", "-c", worker},
             log);
  const int rc = run.wait(60s);
  const auto elapsed = std::chrono::steady_clock::now() - started;
  const std::string out = run.output();
  INFO(out);
  CHECK(rc == 1);
  CHECK(elapsed < 30s);  // not the workers' 60 s
  const auto errors = linesWith(out, "hvdrun: error:");
  REQUIRE(errors.size() == 1);
  CHECK(std::regex_search(
      errors[0],
      std::regex(
          "^hvdrun: error: the rendezvous server refused a request without a token \\(GET /global/0\\) "
          "from 10\\.99\\.0\\.[23]:[0-9]+, a host of this job: Horovod's own workers cannot send "
          "hvdrun's per-job token")));
  CHECK_THAT(errors[0], Catch::Contains("--no-rendezvous-token") && Catch::Contains("stopping the job"));
  CHECK_THAT(out, !Catch::Contains("BAD TERMINATION"));  // stopped by hvdrun, not failed
}

TEST_CASE("--no-rendezvous-token: tokenless workers on two hosts rendezvous") {
  requireLab();
  SshHome home;
  NetnsLab lab(2, home);
  const std::string log = home.home() + "/hvdrun.out";
  // Each rank PUTs its key, waits for the other's, and finalizes: Horovod's protocol, no token.
  const std::string worker =
      std::string(R"SH(
req() {
  printf '%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %s\r\n\r\n%s' "$1" "$2" "${#3}" "$3" |
    ")SH") +
      rawRequest() + R"SH(" "$HOROVOD_GLOO_RENDEZVOUS_ADDR" "$HOROVOD_GLOO_RENDEZVOUS_PORT" --status-only
}
[ "$(req PUT /global/$HOROVOD_RANK a)" = 200 ] || exit 10
other=$((1 - HOROVOD_RANK)); n=0
until [ "$(req GET /global/$other '')" = 200 ]; do n=$((n + 1)); [ $n -lt 1000 ] || exit 11; sleep 0.01; done
[ "$(req DELETE /global/$HOROVOD_RANK '')" = 200 ] || exit 12
echo "met rank $other; token: ${HVD_RENDEZVOUS_TOKEN:-none}"
)SH";
  Hvdrun run(
      lab, home,
      {"--no-rendezvous-token", "--summary", "none", "-np", "2", "-H", lab.hostAddress(0) + ":1," + lab.hostAddress(1) + ":1",
       "--ssh-known-hosts", "strict", "sh", "-c", worker},
      log);
  const int rc = run.wait(60s);
  const std::string out = run.output();
  INFO(out);
  CHECK(rc == 0);
  CHECK_THAT(out, Catch::Contains("[0]<stdout>:met rank 1; token: none") &&
                      Catch::Contains("[1]<stdout>:met rank 0; token: none"));
  CHECK(linesWith(out, "hvdrun: ").empty());
}

TEST_CASE("a tokenless request from a host outside the job: explained once, the job goes on") {
  requireLab();
  SshHome home;
  NetnsLab lab(2, home);  // the job runs on host 0; host 1 plays a stranger on the network
  const std::string log = home.home() + "/hvdrun.out";
  const std::string go = home.home() + "/go";
  const std::string worker =
      "echo port=$HOROVOD_GLOO_RENDEZVOUS_PORT; n=0; until [ -e " + go +
      " ]; do n=$((n + 1)); [ $n -lt 3000 ] || exit 9; sleep 0.01; done; echo carried on";
  Hvdrun run(lab, home,
             {"-np", "1", "-H", lab.hostAddress(0) + ":1", "--ssh-known-hosts", "strict", "sh", "-c", worker},
             log);
  std::smatch port;
  const std::regex port_re("\\[0\\]<stdout>:port=([0-9]+)");
  for (int i = 0; i < 1500; ++i) {
    const std::string out = run.output();
    if (std::regex_search(out, port, port_re)) break;
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE(port.size() == 2);
  const std::string stranger = "ip netns exec " + lab.hostNamespace(1) + " sh -c \"printf '" + kHorovodGet +
                               "' | " + rawRequest() + " " + NetnsLab::launcherAddress() + " " +
                               port[1].str() + " --status-only\"";
  for (int i = 0; i < 3; ++i) CHECK(hvd::test::sh(stranger) == "401\n");
  std::ofstream(go) << "";
  const int rc = run.wait(60s);
  const std::string out = run.output();
  INFO(out);
  CHECK(rc == 0);
  CHECK_THAT(out, Catch::Contains("[0]<stdout>:carried on"));
  const auto warnings = linesWith(out, "hvdrun: warning:");
  REQUIRE(warnings.size() == 1);  // three requests, one line
  CHECK_THAT(warnings[0], Catch::Contains("from " + lab.hostAddress(1) + ":") &&
                              Catch::Contains("not a host of this job, so the job goes on") &&
                              Catch::Contains("--no-rendezvous-token"));
}
