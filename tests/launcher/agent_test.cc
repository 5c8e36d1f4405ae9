// Black-box runs of hvdrun's agent launcher (--launcher-agent) with shell agents that start hvd-proxy on this
// machine: the agent's command line and environment, ranks on two "hosts", the interface left to the ranks,
// an agent that fails or never brings its proxy (each a clear, prompt error, nothing left running), a proxy
// stopped by SIGTERM (its rank's end still reported), and the command line's refusals.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <fstream>
#include <thread>

#include <catch2/catch.hpp>

#include "launcher/cpu_binding.h"
#include "tests/launcher/process.h"

using namespace hvd::launcher::test;
using Cmd = std::vector<std::string>;
using namespace std::chrono_literals;

namespace {

Completed hvdrun(Cmd args, const std::vector<std::string>& env = {}) {
  args.insert(args.begin(), hvdrunPath());
  return runProcess(args, env, "", 60000ms);
}

// An executable shell script `name` in `dir`.
std::string script(const std::string& dir, const std::string& name, const std::string& body) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << "#!/bin/sh\n" << body;
  ::chmod(path.c_str(), 0755);
  return path;
}

// Runs the proxy on this machine, as an agent for a real cluster would run it on HOST; records its
// arguments and whether it got the token.
const char* const kLocalAgent = R"SH(
printf '%s\n' "$*" > "$AGENT_DIR/args.$HVD_PROXY_NAME"
[ -n "$HVD_PROXY_TOKEN" ] || { echo "no HVD_PROXY_TOKEN"; exit 9; }
shift
exec "$@"
)SH";

std::string comm(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

}  // namespace

TEST_CASE("agent: each rank's proxy starts through the agent, which alone gets the token", "[agent]") {
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  const std::string agent = script(dir, "agent.sh", kLocalAgent);
  const auto r = hvdrun({"--launcher-agent", agent, "-np", "3", "-H", "localhost:2,127.0.0.2:1", "/bin/sh", "-c",
                         "echo \"r=$HOROVOD_RANK h=$HOROVOD_HOSTNAME secret=${HVD_PROXY_TOKEN:-}${HVD_PROXY_NAME:-} "
                         "iface=${HOROVOD_GLOO_IFACE:-none}\""},
                        {"AGENT_DIR=" + dir});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("r=0 h=localhost secret= iface=none") != std::string::npos);
  CHECK(r.out.find("r=1 h=localhost secret= iface=none") != std::string::npos);
  CHECK(r.out.find("r=2 h=127.0.0.2 secret= iface=none") != std::string::npos);
  int agents = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("args.", 0) != 0) continue;
    ++agents;
    const std::string args = readFile(entry.path());
    INFO(args);
    // HOST PROXY --connect ADDRESS:PORT, the listener on the rendezvous server's address.
    CHECK(std::regex_search(args, std::regex(R"(^(localhost|127\.0\.0\.2) /\S+/hvd-proxy --connect 127\.0\.0\.1:\d+\n$)")));
  }
  CHECK(agents == 3);

  // An interface the user names is every rank's.
  const auto named = hvdrun({"--launcher-agent", agent, "--network-interface", "lo", "-np", "1", "-H", "127.0.0.2:1",
                             "/bin/sh", "-c", "echo iface=$HOROVOD_GLOO_IFACE"},
                            {"AGENT_DIR=" + dir});
  INFO(named.out << named.err);
  CHECK(named.exit_code == 0);
  CHECK(named.out.find("iface=lo") != std::string::npos);
}

TEST_CASE("agent: an agent that ends before its proxy connected fails the rank at once, with its last line",
          "[agent]") {
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  const std::string agent = script(dir, "fail.sh", "echo \"no slot for a rank on $1\" >&2\nexit 3\n");
  const auto r = hvdrun({"--launcher-agent", agent, "-np", "2", "-H", "localhost:2", "/bin/true"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 255);
  CHECK(r.err.find("hvdrun: agent for rank 0 on localhost: no slot for a rank on localhost") != std::string::npos);
  CHECK(r.err.find("the launcher agent for rank 0 on localhost ended with exit code 3 before hvd-proxy connected back: "
                   "no slot for a rank on localhost") != std::string::npos);
  CHECK(r.elapsed < 10s);
}

TEST_CASE("agent: a proxy that never connects back fails its rank after HVD_AGENT_JOIN_TIMEOUT; the agent is stopped",
          "[agent]") {
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  const std::string agent = script(dir, "hang.sh", "echo still placing\nexec sleep 600\n");
  const std::string marker = uniqueMarker();
  const auto r = hvdrun({"--launcher-agent", agent, "-np", "1", "-H", "localhost:1", "/bin/true"},
                        {"HVD_AGENT_JOIN_TIMEOUT=1", marker});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 255);
  CHECK(r.err.find("hvd-proxy for rank 0 on localhost did not connect back within 1 s of starting the launcher agent; "
                   "it said: still placing") != std::string::npos);
  CHECK(r.elapsed < 15s);
  CHECK(waitUntilGone(marker, 5000ms).empty());
}

TEST_CASE("agent: a proxy stopped by SIGTERM still reports its rank's end", "[agent]") {
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  const std::string agent = script(dir, "agent.sh", kLocalAgent);
  const std::string marker = uniqueMarker();
  const auto started = startProcess({hvdrunPath(), "--launcher-agent", agent, "-np", "1", "-H", "localhost:1",
                                     "/bin/sleep", "600"},
                                    dir, {"AGENT_DIR=" + dir, marker});
  pid_t proxy = -1;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (proxy < 0 && std::chrono::steady_clock::now() < deadline) {
    for (pid_t pid : processesWithEnv(marker)) {
      if (comm(pid) == "hvd-proxy") proxy = pid;
    }
    // The rank runs once the proxy started it.
    bool sleeping = false;
    for (pid_t pid : processesWithEnv(marker)) sleeping = sleeping || comm(pid) == "sleep";
    if (!sleeping) proxy = -1;
    if (proxy < 0) std::this_thread::sleep_for(20ms);
  }
  REQUIRE(proxy > 0);
  ::kill(proxy, SIGTERM);
  const int code = waitProcess(started.pid, 20000ms);
  const std::string err = readFile(dir + "/err.txt");
  INFO(err);
  CHECK(code == 128 + SIGTERM);
  CHECK(err.find("KILLED BY signal 15") != std::string::npos);
  CHECK(err.find("lost") == std::string::npos);
  CHECK(waitUntilGone(marker, 5000ms).empty());
}

TEST_CASE("agent: the command line's refusals", "[agent][cli]") {
  auto r = hvdrun({"--launcher", "agent", "-np", "1", "/bin/true"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("argument --launcher agent: needs --launcher-agent") != std::string::npos);
  r = hvdrun({"--launcher-agent", "  ", "-np", "1", "/bin/true"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("argument --launcher-agent: '  ' names no program") != std::string::npos);
  r = hvdrun({"--launcher", "ssh", "--launcher-agent", "/bin/sh", "-np", "1", "/bin/true"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("argument --launcher-agent: not allowed with --launcher ssh") != std::string::npos);
  r = hvdrun({"--launcher-agent", "/nonexistent/agent", "-np", "1", "/bin/true"});
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("--launcher-agent '/nonexistent/agent' not found in PATH") != std::string::npos);
  r = hvdrun({"--launcher-agent", "/bin/sh", "-np", "1", "/bin/true"}, {"HVD_AGENT_JOIN_TIMEOUT=soon"});
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("HVD_AGENT_JOIN_TIMEOUT='soon' is not a number of seconds") != std::string::npos);
}

TEST_CASE("agent: --bind-to core binds each rank in its hvd-proxy, by its index on its host",
          "[agent][bind]") {
  const auto tmp = tempDir();
  const std::string& dir = tmp.path();
  const std::string agent = script(dir, "agent.sh", kLocalAgent);
  // The proxies run on this machine, so their cores are this process's.
  const auto cores = hvd::launcher::coresOf(hvd::launcher::allowedCpus());
  REQUIRE(!cores.empty());
  const std::string report = "grep Cpus_allowed_list: /proc/self/status | cut -f2";
  // Two "hosts" of one rank each: each is its host's first rank, so both get the first core.
  const auto r = hvdrun({"--bind-to", "core", "--launcher-agent", agent, "-np", "2", "-H",
                         "localhost:1,127.0.0.2:1", "sh", "-c", report},
                        {"AGENT_DIR=" + dir});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const std::string first = hvd::launcher::cpuList(cores[0]);
  CHECK_THAT(r.out, Catch::Contains("[0]<stdout>:" + first + "\n") &&
                        Catch::Contains("[1]<stdout>:" + first + "\n"));
  // More ranks on one host than its cores: the first rank beyond them fails to start, naming the cores.
  const int over = static_cast<int>(cores.size());
  const auto beyond = hvdrun({"--bind-to", "core", "--launcher-agent", agent, "-np", std::to_string(over + 1),
                              "-H", "127.0.0.2:" + std::to_string(over + 1), "true"},
                             {"AGENT_DIR=" + dir});
  CHECK(beyond.exit_code == 127);
  CHECK_THAT(beyond.err, Catch::Contains("hvdrun: rank " + std::to_string(over) +
                                         ": --bind-to core: 127.0.0.2 has " + std::to_string(cores.size())));
}
