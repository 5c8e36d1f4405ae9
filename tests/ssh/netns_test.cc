// Several ssh hosts: network namespaces joined by a bridge, one sshd each, jobs started by the real
// hvdrun binary from its own namespace. Reports SKIPPED (exit 77) where `ip netns` is not permitted.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "tests/ssh/sshd_fixture.h"

extern char** environ;

using namespace std::chrono_literals;
using hvd::test::NetnsLab;
using hvd::test::SshHome;

namespace {

std::string buildDir() {
  const char* d = std::getenv("HVD_BUILD_DIR");
  REQUIRE(d);
  return d;
}

using Hvdrun = hvd::test::LabHvdrun;

// Processes in host i whose command line starts with `mark`.
int countMarked(const NetnsLab& lab, int i, const std::string& mark) {
  int n = 0;
  for (const auto& c : lab.commandLinesIn(i)) n += c.rfind(mark, 0) == 0;
  return n;
}

// Checks, host by host, that no process of `lab` has a command line starting with `mark`.
void checkNoneMarked(const NetnsLab& lab, const std::string& mark) {
  for (int i = 0; i < lab.hosts(); ++i) {
    INFO("host " << lab.hostAddress(i));
    CHECK(countMarked(lab, i, mark) == 0);
  }
}

// Asks `done` every `period` until it holds or `limit` has passed since the call; the caller checks the
// condition itself after.
void pollUntil(const std::function<bool()>& done, std::chrono::milliseconds limit,
               std::chrono::milliseconds period = 50ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(period);
}

std::string hostList(const NetnsLab& lab, int slots) {
  std::string out;
  for (int i = 0; i < lab.hosts(); ++i) {
    out += (out.empty() ? "" : ",") + lab.hostAddress(i) + ":" + std::to_string(slots);
  }
  return out;
}

void requireLab() {
  const std::string why = NetnsLab::unavailable();
  if (!why.empty())
    hvd::test::skipTest("network namespaces unavailable here (" + why + "); multi-host ssh tests not run");
}

// Runs 6 ranks over the lab's 3 hosts, 2 each, checks what every rank saw; returns hvdrun's output.
std::string checkSixRanks(const NetnsLab& lab, const SshHome& home, std::vector<std::string> flags = {}) {
  const std::string log = home.home() + "/hvdrun.out";
  std::vector<std::string> args = {"-np", "6", "-H", hostList(lab, 2), "--ssh-known-hosts", "strict"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"sh", "-c",
                           "echo R=$HOROVOD_RANK L=$HOROVOD_LOCAL_RANK C=$HOROVOD_CROSS_RANK S=$HOROVOD_SIZE "
                           "H=$HOROVOD_HOSTNAME I=$HOROVOD_GLOO_IFACE A=$(ip -4 -o addr show eth0 | awk '{print $4}')"});
  Hvdrun run(lab, home, args, log);
  const int rc = run.wait(60s);
  INFO(run.output());
  REQUIRE(rc == 0);
  std::map<int, std::string> lines;
  std::istringstream in(run.output());
  std::string line;
  // Every line comes through hvdrun's forwarder, tagged with the rank that printed it.
  const std::regex re(R"(^\[(\d+)\]<stdout>:R=(\d+) (L=\d+ C=\d+ S=6 H=\S+ I=\S+ A=\S+)$)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, re) && m[1] == m[2]) lines[std::stoi(m[2])] = m[3];
  }
  REQUIRE(lines.size() == 6);
  for (int r = 0; r < 6; ++r) {
    const int host = r / 2;
    const std::string addr = lab.hostAddress(host);
    INFO("rank " << r);
    // Host-major assignment as horovodrun's; each worker really ran in its host's namespace.
    CHECK(lines[r] == "L=" + std::to_string(r % 2) + " C=" + std::to_string(host) + " S=6 H=" + addr +
                          " I=eth0 A=" + addr + "/24");
  }
  return run.output();
}

// Sets an environment variable for the hvdruns this test starts (they inherit it), restored on exit.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The lines "rank R checksum X" that scenario_worker's checksum scenario prints: how many, and the
// distinct checksums among them.
std::pair<int, std::set<std::string>> printedChecksums(const std::string& out) {
  const std::regex re(R"(\[(\d+)\]<stdout>:rank (\d+) checksum ([0-9a-f]+))");
  std::set<std::string> seen;
  int ranks = 0;
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) {
    seen.insert((*it)[3]);
    ++ranks;
  }
  return {ranks, seen};
}

}  // namespace

TEST_CASE("6 ranks over 3 ssh hosts: rank, local_rank, cross_rank, and an allreduce") {
  requireLab();
  SshHome home;
  NetnsLab lab(3, home);
  const std::string log = home.home() + "/hvdrun.out";
  checkSixRanks(lab, home);
  const std::string hello = buildDir() + "/examples/hello_cpp";
  if (::access(hello.c_str(), X_OK) == 0) {
    Hvdrun run(lab, home, {"-np", "6", "-H", hostList(lab, 2), hello}, log);
    const int rc = run.wait(90s);
    INFO(run.output());
    CHECK(rc == 0);
    for (int r = 0; r < 6; ++r) {
      CHECK(run.output().find("rank " + std::to_string(r) + " of 6: sum of ranks = 15") != std::string::npos);
    }
  } else {
    WARN("no " << hello << ": allreduce over ssh hosts not checked in this build");
  }
}

TEST_CASE("hierarchical allreduce and allgather on 2 and 3 hosts x 2 ranks: the same results as the flat path") {
  requireLab();
  SshHome home;
  NetnsLab lab(3, home);
  const std::string worker = buildDir() + "/tests/runtime/scenario_worker";
  for (int hosts : {2, 3}) {
    std::string list;
    for (int i = 0; i < hosts; ++i) list += (i ? "," : "") + lab.hostAddress(i) + ":2";
    std::map<std::string, std::string> checksums;  // path -> the checksum every rank printed
    for (const std::string path : {"GLOO", "HIERARCHICAL"}) {
      CAPTURE(hosts, path);
      std::vector<std::string> args = {"-np", std::to_string(2 * hosts), "-H", list, "--ssh-known-hosts", "strict",
                                       "-x", "HOROVOD_LOG_LEVEL=info"};
      // The hierarchical allreduce is the default on such a job; the flat one is asked for.
      args.push_back(path == "HIERARCHICAL" ? "--hierarchical-allgather" : "--no-hierarchical-allreduce");
      args.insert(args.end(), {worker, "checksum"});
      Hvdrun run(lab, home, args, home.home() + "/hvdrun.out");
      const int rc = run.wait(90s);
      INFO(run.output());
      REQUIRE(rc == 0);
      CHECK(run.output().find("data path of the job: " + path + " (allreduce " + path + ", allgather " + path) !=
            std::string::npos);
      const auto [ranks, seen] = printedChecksums(run.output());
      REQUIRE(ranks == 2 * hosts);
      REQUIRE(seen.size() == 1);  // bit-identical on every rank
      checksums[path] = *seen.begin();
    }
    CHECK(checksums["GLOO"] == checksums["HIERARCHICAL"]);
  }
}

TEST_CASE("uneven hosts (2 ranks and 1): every rank agrees on the flat path and gets the same result") {
  requireLab();
  SshHome home;
  NetnsLab lab(2, home);
  // Local rank 1 of the first host has a cross size of 1, the others 2: the ranks must still take one
  // path together (a per-rank decision would leave some in the hierarchical check and hang the job).
  const std::string list = lab.hostAddress(0) + ":2," + lab.hostAddress(1) + ":1";
  Hvdrun run(lab, home,
             {"-np", "3", "-H", list, "--ssh-known-hosts", "strict", "--hierarchical-allreduce", "-x",
              "HOROVOD_LOG_LEVEL=debug", buildDir() + "/tests/runtime/scenario_worker", "checksum"},
             home.home() + "/hvdrun.out");
  const int rc = run.wait(90s);
  INFO(run.output());
  REQUIRE(rc == 0);
  CHECK(run.output().find("data path of the job: GLOO (allreduce GLOO, allgather GLOO") != std::string::npos);
  CHECK(run.output().find("HOROVOD_HIERARCHICAL_ALLREDUCE=1 ignored") != std::string::npos);
  const auto [ranks, seen] = printedChecksums(run.output());
  CHECK(ranks == 3);
  CHECK(seen.size() == 1);
  // The namespaces are one machine: the first host's two ranks (two busy threads each) would hold their
  // threads to its CPUs where there are fewer than four, but other hosts' ranks run on those CPUs too. Both
  // leave them unplaced: local rank 1 has no peer on the other host (a cross size of 1) and learns it from
  // local rank 0.
  const std::string off = "thread placement: off, this host's CPUs are shared with another host of the job";
  const std::regex line(R"(\[(\d+)\]<stderr>:.*thread placement: (off|a thread waiting).*)");
  const std::string out = run.output();
  std::vector<std::pair<std::string, std::string>> placements;  // (the rank, its line)
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it)
    placements.emplace_back((*it)[1], (*it)[0]);
  cpu_set_t cpus;  // the workers' too: the hosts' sshd was started by this process
  REQUIRE(::sched_getaffinity(0, sizeof cpus, &cpus) == 0);
  if (CPU_COUNT(&cpus) < 4) {
    REQUIRE(placements.size() == 2);
    std::sort(placements.begin(), placements.end());
    for (int r : {0, 1}) {
      CHECK(placements[r].first == std::to_string(r));
      CHECK(placements[r].second.find(off) != std::string::npos);
    }
  } else {
    WARN(
        "4 or more CPUs here: the first host has a CPU for each of its threads, no thread placement to "
        "check");
    CHECK(placements.empty());
  }
}

TEST_CASE("without hvd-proxy (HVD_SSH_PROXY=never): one channel per rank, same result") {
  requireLab();
  SshHome home;
  NetnsLab lab(3, home);
  {
    ScopedEnv never("HVD_SSH_PROXY", "never");
    checkSixRanks(lab, home);
  }
  // --ssh-proxy never beats HVD_SSH_PROXY=auto: with the proxy path pointing nowhere, auto would print
  // the fallback note for every host; never does not even look for hvd-proxy.
  ScopedEnv env_auto("HVD_SSH_PROXY", "auto");
  ScopedEnv missing("HVD_SSH_PROXY_PATH", "/nonexistent/hvd-proxy");
  const std::string out = checkSixRanks(lab, home, {"--ssh-proxy", "never"});
  CHECK(out.find("no hvd-proxy at") == std::string::npos);
}

TEST_CASE("hvd-proxy missing on the hosts: each host falls back to per-rank channels, with a note") {
  requireLab();
  SshHome home;
  NetnsLab lab(3, home);
  ScopedEnv missing("HVD_SSH_PROXY_PATH", "/nonexistent/hvd-proxy");
  const std::string out = checkSixRanks(lab, home);
  for (int i = 0; i < lab.hosts(); ++i) {
    INFO("host " << lab.hostAddress(i));
    CHECK(out.find("hvdrun: ssh root@" + lab.hostAddress(i) +
                   ":22: no hvd-proxy at /nonexistent/hvd-proxy there (exit code 127); starting its workers "
                   "with one ssh channel each\n") != std::string::npos);
  }
}

TEST_CASE("hvdrun SIGKILLed: no worker survives on any host after 5 s") {
  requireLab();
  SshHome home;
  NetnsLab lab(3, home);
  const std::string mark = "hvdnsmark" + std::to_string(::getpid());
  Hvdrun run(lab, home,
             {"-np", "6", "-H", hostList(lab, 2), "bash", "-c",
              // one of each pair ignores SIGTERM: the watchdog's SIGKILL has to follow
              "[ $HOROVOD_LOCAL_RANK = 1 ] && trap '' TERM; (exec -a " + mark +
                  "child sleep 120) & exec -a " + mark + " sleep 120"},
             home.home() + "/hvdrun.out");
  auto all = [&](int expected) {
    for (int i = 0; i < lab.hosts(); ++i) {
      if (countMarked(lab, i, mark) != expected) return false;
    }
    return true;
  };
  pollUntil([&] { return all(4); }, 60s);
  INFO(run.output());
  REQUIRE(all(4));  // 2 workers + 2 children per host
  // ONE remote process per host started them: its hvd-proxy (one exec channel, one login shell), and no
  // per-rank bootstrap shell.
  for (int i = 0; i < lab.hosts(); ++i) {
    INFO("host " << lab.hostAddress(i));
    CHECK(countMarked(lab, i, buildDir() + "/hvd-proxy") == 1);
    int bootstraps = 0;
    for (const auto& c : lab.commandLinesIn(i)) bootstraps += c.find("hvdrun-worker") != std::string::npos;
    CHECK(bootstraps == 0);
  }
  run.kill9();
  REQUIRE(run.wait(5s) == 128 + SIGKILL);
  pollUntil([&] { return all(0); }, 5s);
  checkNoneMarked(lab, mark);
}

TEST_CASE("a host whose network drops ends its workers within 5 s") {
  requireLab();
  SshHome home;
  NetnsLab lab(2, home);
  const std::string mark = "hvdcutmark" + std::to_string(::getpid());
  Hvdrun run(lab, home, {"-np", "2", "-H", hostList(lab, 1), "bash", "-c", "exec -a " + mark + " sleep 120"},
             home.home() + "/hvdrun.out");
  pollUntil([&] { return countMarked(lab, 0, mark) == 1 && countMarked(lab, 1, mark) == 1; }, 60s);
  REQUIRE(countMarked(lab, 1, mark) == 1);
  lab.cutHost(1);  // no FIN, no RST: the connection just goes silent
  pollUntil([&] { return countMarked(lab, 1, mark) == 0; }, 5s);
  CHECK(countMarked(lab, 1, mark) == 0);
  // hvdrun's side: the connection is aborted (TCP_USER_TIMEOUT 10 s), rank 1 is lost, the job stops.
  const int rc = run.wait(40s);
  INFO(run.output());
  CHECK(rc == 255);
  CHECK(run.output().find("lost") != std::string::npos);
  CHECK(countMarked(lab, 0, mark) == 0);  // stopped with the job
}

TEST_CASE("a failing remote rank stops the job: hvdrun exits with its code, no worker is left") {
  requireLab();
  SshHome home;
  NetnsLab lab(3, home);
  const std::string mark = "hvdfailmark" + std::to_string(::getpid());
  Hvdrun run(lab, home,
             {"-np", "6", "-H", hostList(lab, 2), "bash", "-c",
              "if [ $HOROVOD_RANK = 3 ]; then sleep 2; exit 3; fi; exec -a " + mark + " sleep 120"},
             home.home() + "/hvdrun.out");
  const int rc = run.wait(60s);
  INFO(run.output());
  CHECK(rc == 3);
  CHECK(run.output().find("RANK 3 ON HOST " + lab.hostAddress(1)) != std::string::npos);
  checkNoneMarked(lab, mark);
}

TEST_CASE("elastic: a host that drops off the network is blacklisted, and the job goes on without it") {
  requireLab();
  SshHome home;
  NetnsLab lab(3, home);
  const std::string mark = "hvdelasticmark" + std::to_string(::getpid());
  // Each worker runs until its file says stop; the host cut leaves its workers unreachable.
  const std::string stop = home.home() + "/stop";
  Hvdrun run(lab, home,
             {"-np", "3", "--min-np", "1", "-H", hostList(lab, 1), "bash", "-c",
              "echo \"$HOROVOD_HOSTNAME rank $HOROVOD_RANK of $HOROVOD_SIZE round $HVD_ELASTIC_ROUND\"; "
              "until [ -e " + stop + " ]; do (exec -a " + mark + " sleep 0.2); done"},
             home.home() + "/hvdrun.out");
  pollUntil([&] { return run.output().find("rank 2 of 3 round 1") != std::string::npos; }, 60s);
  INFO(run.output());
  REQUIRE(run.output().find("rank 2 of 3 round 1") != std::string::npos);
  lab.cutHost(1);  // no FIN, no RST: the connection just goes silent
  const std::string cut = lab.hostAddress(1);
  // hvdrun's side: the connection is aborted (TCP_USER_TIMEOUT 10 s), the host is blacklisted, round 2 has
  // the two others.
  const std::string round2 = "hvdrun: elastic round 2: 2 ranks on " + lab.hostAddress(0) + ":1, " + lab.hostAddress(2) + ":1";
  pollUntil([&] { return run.output().find(round2) != std::string::npos; }, 40s, 100ms);
  INFO(run.output());
  CHECK_THAT(run.output(), Catch::Contains("hvdrun: blacklisting host " + cut + " for the rest of the job: unreachable"));
  CHECK_THAT(run.output(), Catch::Contains(round2));
  std::ofstream(stop) << "";
  CHECK(run.wait(30s) == 0);
  checkNoneMarked(lab, mark);
}

TEST_CASE("elastic training across hosts: a host cut off mid-training, the others finish from the last commit") {
  requireLab();
  SshHome home;
  NetnsLab lab(3, home);
  // Collectives waiting for the silent host give up after 3 s; the driver learns of it when its ssh
  // connection times out, blacklists the host and re-forms the job with the two others.
  ScopedEnv gloo_timeout("HOROVOD_GLOO_TIMEOUT_SECONDS", "3");
  const std::string train = buildDir() + "/examples/elastic_train";
  Hvdrun run(lab, home, {"-np", "3", "--min-np", "1", "-H", hostList(lab, 1), train, "400", "20"},
             home.home() + "/hvdrun.out");
  const auto until = std::chrono::steady_clock::now() + 60s;
  // The job has started training on every host: wait a little, then cut host 1.
  while (run.output().find("elastic round") == std::string::npos && countMarked(lab, 1, train) == 0 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(50ms);
  }
  std::this_thread::sleep_for(2s);
  lab.cutHost(1);
  const int rc = run.wait(120s);
  INFO(run.output());
  CHECK(rc == 0);
  CHECK_THAT(run.output(), Catch::Contains("hvdrun: blacklisting host " + lab.hostAddress(1) +
                                           " for the rest of the job: unreachable"));
  CHECK(std::regex_search(run.output(), std::regex(R"(elastic_train final: step=400 size=2 )")));
}
