// The ssh launcher against one real sshd on 127.0.0.1, in-process through the Launcher interface.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "base/error.h"
#include "launcher/cpu_binding.h"
#include "launcher/launcher.h"
#include "launcher/local/launcher.h"
#include "launcher/ssh/launcher.h"
#include "tests/ssh/sshd_fixture.h"

using namespace hvd::launcher;
using namespace std::chrono_literals;
using hvd::test::Sshd;
using hvd::test::SshHome;
using hvd::test::readCommandLine;

namespace {

HostSpec hostNamed(const std::string& name) {
  HostSpec h;
  h.name = name;
  return h;
}

struct Recorder : WorkerEvents {
  std::map<int, std::string> out, err;
  std::map<int, ExitStatus> exits;
  std::map<int, int> closed;
  void onOutput(int rank, Stream s, std::string_view bytes) override {
    (s == Stream::kStdout ? out : err)[rank] += bytes;
  }
  void onStreamClosed(int rank, Stream) override { closed[rank]++; }
  void onExit(int rank, const ExitStatus& status) override {
    CHECK(closed[rank] == 2);  // contract: both streams closed before the exit
    exits[rank] = status;
  }
};

// Runs the loop until `done` or `limit`; returns whether `done` held. `done` is not asked again after it
// held once: a scan of /proc can miss a process that is in the middle of an exec.
bool runUntil(boost::asio::io_context& io, const std::function<bool()>& done,
              std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    io.restart();
    io.run_for(20ms);
  }
}

std::string uniqueTag(const char* what) {
  std::random_device rd;
  return std::string(what) + std::to_string(::getpid()) + "x" + std::to_string(rd() % 1000000);
}

// Command lines of every process on this machine (the "remote" side of a loopback sshd). Processes may
// exit while we read: those are skipped.
std::vector<std::string> allCommandLines() {
  std::vector<std::string> out;
  DIR* d = ::opendir("/proc");
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    if (auto cmdline = readCommandLine(static_cast<pid_t>(std::atoi(e->d_name)))) out.push_back(std::move(*cmdline));
  }
  ::closedir(d);
  return out;
}

bool anyProcessWith(const std::string& needle) {
  for (const auto& c : allCommandLines()) {
    if (c.find(needle) != std::string::npos) return true;
  }
  return false;
}

// A process whose argv[0] starts with `name` (set with `exec -a`).
bool anyProcessNamed(const std::string& name) {
  for (const auto& c : allCommandLines()) {
    if (c.rfind(name, 0) == 0) return true;
  }
  return false;
}

bool waitGone(const std::string& needle, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (anyProcessWith(needle)) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

std::string buildDir() {
  const char* d = std::getenv("HVD_BUILD_DIR");
  REQUIRE(d);
  return d;
}

// One sshd on 127.0.0.1 and a private HOME; the test process never uses the user's ~/.ssh or agent.
// Workers start through $HVD_BUILD_DIR/hvd-proxy unless setMode() says otherwise.
struct Loopback {
  SshHome home;
  Sshd sshd{home.sshDir() + "/server", home.authorizedKeys(), "127.0.0.1", hvd::test::freeLoopbackPort()};
  Loopback() {
    ::setenv("HOME", home.home().c_str(), 1);
    ::unsetenv("SSH_AUTH_SOCK");
    std::ofstream(home.knownHosts(), std::ios::app) << sshd.knownHostsLine();
  }
  SshOptions options() const {
    SshOptions o;
    o.port = sshd.port();
    o.identity_file = home.userKey();
    o.known_hosts = KnownHostsPolicy::kStrict;
    o.known_hosts_file = home.knownHosts();
    o.config_file = home.config();
    o.force_ssh = true;
    return o;
  }
  // "proxy": one hvd-proxy channel per host; "per-rank": HVD_SSH_PROXY=never; "fallback": the proxy
  // path does not exist on the "remote" host, so the launcher falls back to per-rank channels.
  void setMode(const std::string& mode) {
    proxy = ssh::ProxyOptions{};
    proxy.path = buildDir() + "/hvd-proxy";
    if (mode == "per-rank") proxy.enabled = false;
    if (mode == "fallback") proxy.path = "/nonexistent/hvd-proxy";
  }
  std::unique_ptr<Launcher> launcher(boost::asio::io_context& io) const {
    return ssh::makeLauncher(io, options(), proxy);
  }
  ssh::ProxyOptions proxy = [] {
    ssh::ProxyOptions p;
    p.path = buildDir() + "/hvd-proxy";
    return p;
  }();
  std::string cwd() const { return home.home(); }
  LaunchSpec spec(int rank, std::vector<std::string> argv,
                  std::vector<std::pair<std::string, std::string>> env = {}) const {
    LaunchSpec s;
    s.rank = rank;
    s.host.name = "127.0.0.1";
    s.argv = std::move(argv);
    s.env = std::move(env);
    s.env.emplace_back("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin");
    s.cwd = cwd();
    return s;
  }
};

// A Loopback in `mode`, its launcher on one io_context (preflighted to 127.0.0.1 when asked), and a
// Recorder for the workers it starts.
struct Session {
  Loopback lb;
  boost::asio::io_context io;
  std::unique_ptr<Launcher> launcher;
  Recorder rec;
  explicit Session(const std::string& mode, bool preflight = true) {
    lb.setMode(mode);
    launcher = lb.launcher(io);
    if (preflight) launcher->preflight({hostNamed("127.0.0.1")});
  }
  // Runs the loop until `rank` has exited or `limit` passes; returns whether it exited.
  bool waitExit(int rank, std::chrono::milliseconds limit) {
    return runUntil(
        io, [&] { return rec.exits.count(rank) > 0; }, limit);
  }
};

std::string preflightError(Loopback& lb, const SshOptions& options, std::vector<HostSpec> hosts) {
  boost::asio::io_context io;
  auto launcher = ssh::makeLauncher(io, options);
  try {
    launcher->preflight(hosts);
  } catch (const hvd::LaunchError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a remote worker runs over ssh: output, exit code, and an environment that survives intact") {
  const std::string mode = GENERATE(as<std::string>{}, "proxy", "per-rank", "fallback");
  INFO("mode " << mode);
  Session s(mode);
  const std::vector<std::pair<std::string, std::string>> env = {
      {"V1", "with  two spaces"},
      {"V2", "it's \"quoted\" and 'single'"},
      {"V3", "line one\nline two\n"},
      {"V4", "ünïcödé ✓ 日本"},
      {"V5", "$HOME `echo injected` $(echo injected) \\ back"},
      {"V6", ""},
      {"my.dotted", "dot value"},
  };
  auto worker = s.launcher->start(
      s.lb.spec(
          0,
          {"bash", "-c",
           "for v in V1 V2 V3 V4 V5 V6; do printf '%s=<%s>\\n' \"$v\" \"${!v}\"; done; printenv my.dotted; "
           "pwd; echo to-stderr >&2; exit 3"},
          env),
      s.rec);
  REQUIRE(s.waitExit(0, 20s));
  CHECK(s.rec.out[0] ==
        "V1=<with  two spaces>\n"
        "V2=<it's \"quoted\" and 'single'>\n"
        "V3=<line one\nline two\n>\n"
        "V4=<ünïcödé ✓ 日本>\n"
        "V5=<$HOME `echo injected` $(echo injected) \\ back>\n"
        "V6=<>\n"
        "dot value\n" +
            s.lb.cwd() + "\n");
  CHECK(s.rec.err[0] == "to-stderr\n");
  CHECK(s.rec.exits[0].kind == ExitStatus::Kind::kExited);
  CHECK(s.rec.exits[0].code == 3);
  CHECK(worker->state() == WorkerState::kFailed);
}

TEST_CASE("--bind-to core over ssh: hvd-proxy binds the rank; without a proxy the rank is lost, saying why") {
  const std::string mode = GENERATE(as<std::string>{}, "proxy", "fallback");
  INFO("mode " << mode);
  Session s(mode);
  LaunchSpec spec = s.lb.spec(0, {"sh", "-c", "grep Cpus_allowed_list: /proc/self/status | cut -f2"});
  spec.bind_index = 0;
  auto worker = s.launcher->start(spec, s.rec);
  REQUIRE(s.waitExit(0, 20s));
  if (mode == "proxy") {
    // The "remote" proxy runs on this machine, so its first core is this process's.
    CHECK(s.rec.out[0] ==
          hvd::launcher::cpuList(hvd::launcher::coresOf(hvd::launcher::allowedCpus()).at(0)) + "\n");
    CHECK(s.rec.exits[0].kind == ExitStatus::Kind::kExited);
    CHECK(s.rec.exits[0].code == 0);
  } else {
    CHECK(s.rec.out[0].empty());
    CHECK(s.rec.exits[0].kind == ExitStatus::Kind::kLost);
    CHECK(s.rec.exits[0].detail ==
          "--bind-to core: rank 0 on 127.0.0.1 needs hvd-proxy there to bind it to a core");
  }
}

TEST_CASE("the rendezvous token never appears on a command line on the remote host") {
  const std::string mode = GENERATE(as<std::string>{}, "proxy", "per-rank");
  INFO("mode " << mode);
  Session s(mode);
  const std::string token = uniqueTag("secret-token-");
  auto worker = s.launcher->start(
      s.lb.spec(0, {"bash", "-c", "[ \"$HVD_RENDEZVOUS_TOKEN\" = \"$EXPECTED\" ] && echo token-ok; sleep 1"},
                {{"HVD_RENDEZVOUS_TOKEN", token}, {"EXPECTED", token}}),
      s.rec);
  // Scan every process's command line while the bootstrap and the worker run.
  int scans = 0;
  bool leaked = false;
  boost::asio::steady_timer scan(s.io);
  std::function<void()> arm = [&] {
    scan.expires_after(5ms);
    scan.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      ++scans;
      leaked = leaked || anyProcessWith(token);
      if (!s.rec.exits.count(0)) arm();
    });
  };
  arm();
  REQUIRE(s.waitExit(0, 20s));
  scan.cancel();
  CHECK(s.rec.out[0] == "token-ok\n");
  CHECK(s.rec.exits[0].success());
  CHECK(scans > 20);
  CHECK_FALSE(leaked);
}

TEST_CASE("a missing remote directory is a clear error with exit code 126") {
  const std::string mode = GENERATE(as<std::string>{}, "proxy", "per-rank", "fallback");
  INFO("mode " << mode);
  Session s(mode, /*preflight=*/false);
  auto spec = s.lb.spec(4, {"true"});
  spec.cwd = "/nonexistent/hvd dir";
  auto worker = s.launcher->start(spec, s.rec);
  REQUIRE(s.waitExit(4, 20s));
  CHECK(s.rec.err[4] == "hvdrun: remote directory /nonexistent/hvd dir missing on 127.0.0.1\n");
  CHECK(s.rec.exits[4].code == 126);
}

TEST_CASE("a remote worker killed by a signal is reported as that signal") {
  const std::string mode = GENERATE(as<std::string>{}, "proxy", "per-rank", "fallback");
  INFO("mode " << mode);
  Session s(mode, /*preflight=*/false);
  auto worker = s.launcher->start(s.lb.spec(1, {"bash", "-c", "kill -SEGV $$"}), s.rec);
  REQUIRE(s.waitExit(1, 20s));
  CHECK(s.rec.exits[1].kind == ExitStatus::Kind::kSignaled);
  CHECK(s.rec.exits[1].signal == SIGSEGV);
  CHECK(s.rec.exits[1].shellCode() == 128 + SIGSEGV);
}

TEST_CASE("signal() ends a remote worker and everything it started") {
  const std::string mode = GENERATE(as<std::string>{}, "proxy", "per-rank", "fallback");
  INFO("mode " << mode);
  Session s(mode);
  const std::string mark = uniqueTag("hvdmark");
  // A worker with a child: both must go (the process group is signalled, not just the worker).
  auto worker = s.launcher->start(
      s.lb.spec(2, {"bash", "-c", "(exec -a " + mark + "child sleep 60) & exec -a " + mark + " sleep 60"}),
      s.rec);
  // The child itself (its argv[0]), not a command line that merely mentions it: the worker's group is
  // complete once the child runs.
  REQUIRE(runUntil(
      s.io, [&] { return anyProcessNamed(mark + "child"); }, 20s));
  REQUIRE(worker->state() == WorkerState::kRunning);
  worker->signal(SIGTERM);
  REQUIRE(s.waitExit(2, 10s));
  CHECK(s.rec.exits[2].kind == ExitStatus::Kind::kSignaled);
  CHECK(s.rec.exits[2].signal == SIGTERM);
  CHECK(worker->state() == WorkerState::kStopped);
  CHECK(waitGone(mark, 5s));
}

TEST_CASE("signal() at once after start() reaches a worker whose group does not exist yet, on every transport") {
  Loopback lb;
  const std::string mode = GENERATE(as<std::string>{}, "local", "proxy", "per-rank", "fallback");
  INFO("mode " << mode);
  lb.setMode(mode);
  boost::asio::io_context io;
  std::unique_ptr<Launcher> launcher;
  if (mode == "local") {
    launcher = std::make_unique<local::LocalLauncher>(io);
  } else {
    launcher = lb.launcher(io);
    launcher->preflight({hostNamed("127.0.0.1")});
  }
  // kill(-pid) right after fork() usually finds no group yet (the child has not called setsid()), and
  // over ssh the signal line follows the script at once, so the watchdog reads it while `setsid` may
  // still be starting: a few rounds make that window likely.
  for (int round = 0; round < 8; ++round) {
    INFO("round " << round);
    Recorder rec;
    const std::string mark = uniqueTag("hvdearly");
    auto worker = launcher->start(lb.spec(3, {"bash", "-c", "exec -a " + mark + " sleep 60"}), rec);
    worker->signal(SIGTERM);
    REQUIRE(runUntil(
        io, [&] { return rec.exits.count(3) > 0; }, 10s));
    CHECK(rec.exits[3].kind == ExitStatus::Kind::kSignaled);
    CHECK(rec.exits[3].signal == SIGTERM);
    CHECK(worker->state() == WorkerState::kStopped);
    CHECK(waitGone(mark, 5s));
  }
}

TEST_CASE("remote workers end within 5 s when the launcher process is SIGKILLed") {
  Loopback lb;
  const std::string mode = GENERATE(as<std::string>{}, "proxy", "per-rank", "fallback");
  INFO("mode " << mode);
  lb.setMode(mode);
  const std::string mark = uniqueTag("hvdorphan");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The "hvdrun" that will be killed: starts two workers and runs its loop forever.
    boost::asio::io_context io;
    auto launcher = lb.launcher(io);
    Recorder rec;
    auto w1 = launcher->start(lb.spec(0, {"bash", "-c", "exec -a " + mark + " sleep 60"}), rec);
    auto w2 = launcher->start(lb.spec(1, {"bash", "-c", "trap '' TERM; exec -a " + mark + " sleep 60"}), rec);
    auto guard = boost::asio::make_work_guard(io);
    io.run();
    std::_Exit(0);
  }
  const auto until = std::chrono::steady_clock::now() + 20s;
  auto count = [&] {
    int n = 0;
    for (const auto& c : allCommandLines()) n += c.rfind(mark, 0) == 0;
    return n;
  };
  while (count() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(20ms);
  REQUIRE(count() == 2);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  const auto killed = std::chrono::steady_clock::now();
  // One worker ignores SIGTERM: the watchdog's SIGKILL must follow.
  CHECK(waitGone(mark, 5s));
  INFO("gone after " << std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count()
                     << " s");
}

TEST_CASE("more workers on one host than one connection carries") {
  const std::string mode = GENERATE(as<std::string>{}, "proxy", "per-rank", "fallback");
  INFO("mode " << mode);
  Session s(mode);
  std::vector<std::unique_ptr<Worker>> workers;
  const int n = static_cast<int>(ssh::kMaxChannelsPerConnection) + 4;  // sshd's MaxSessions is 10
  for (int r = 0; r < n; ++r)
    workers.push_back(
        s.launcher->start(s.lb.spec(r, {"sh", "-c", "echo rank $0", std::to_string(r)}), s.rec));
  REQUIRE(runUntil(
      s.io, [&] { return static_cast<int>(s.rec.exits.size()) == n; }, 60s));
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(s.rec.exits[r].success());
    CHECK(s.rec.out[r] == "rank " + std::to_string(r) + "\n");
  }
}

TEST_CASE("ssh-agent: a key only the agent holds authenticates") {
  Loopback lb;
  // A key at no default path, known to sshd, held by a real ssh-agent; the default key moved away, so
  // only the agent can succeed.
  const std::string agent_key = lb.home.makeOtherKey("agent_only_key");
  std::ofstream(lb.home.authorizedKeys(), std::ios::app) << hvd::test::sh("cat " + agent_key + ".pub");
  std::filesystem::rename(lb.home.userKey(), lb.home.userKey() + ".moved");
  auto o = lb.options();
  o.identity_file.reset();
  const std::string without = preflightError(lb, o, {hostNamed("127.0.0.1")});
  CHECK_THAT(without, Catch::Contains("authentication failed for user root (tried: ssh-agent (not running)"));

  const std::string sock = lb.home.home() + "/agent.sock";
  const std::string started = hvd::test::sh("ssh-agent -a " + sock);
  const auto at = started.find("SSH_AGENT_PID=");
  REQUIRE(at != std::string::npos);
  const pid_t agent = static_cast<pid_t>(std::stol(started.substr(at + 14)));
  struct StopAgent {
    pid_t pid;
    ~StopAgent() {
      ::kill(pid, SIGTERM);
      ::unsetenv("SSH_AUTH_SOCK");
    }
  } stop{agent};
  hvd::test::sh("SSH_AUTH_SOCK=" + sock + " ssh-add -q " + agent_key);
  ::setenv("SSH_AUTH_SOCK", sock.c_str(), 1);
  CHECK(preflightError(lb, o, {hostNamed("127.0.0.1")}).empty());

  // And a worker really runs through the agent-authenticated connection.
  boost::asio::io_context io;
  auto launcher = ssh::makeLauncher(io, o, lb.proxy);
  launcher->preflight({hostNamed("127.0.0.1")});
  Recorder rec;
  auto worker = launcher->start(lb.spec(0, {"echo", "via agent"}), rec);
  REQUIRE(runUntil(
      io, [&] { return rec.exits.count(0) > 0; }, 20s));
  CHECK(rec.exits[0].success());
  CHECK(rec.out[0] == "via agent\n");
}

TEST_CASE("connection failures: one line each, naming the host and the cause") {
  Loopback lb;
  const std::string tried_prefix = "ssh root@127.0.0.1:" + std::to_string(lb.sshd.port()) + ": ";

  SECTION("wrong key") {
    auto o = lb.options();
    o.identity_file = lb.home.makeOtherKey("wrong_key");
    const auto e = preflightError(lb, o, {hostNamed("127.0.0.1")});
    CHECK(e == tried_prefix + "authentication failed for user root (tried: ssh-agent (not running), " +
                   *o.identity_file + " (rejected))");
  }
  SECTION("unknown host key with strict checking") {
    std::ofstream(lb.home.knownHosts(), std::ios::trunc) << "";
    const auto e = preflightError(lb, lb.options(), {hostNamed("127.0.0.1")});
    CHECK(e.rfind(tried_prefix + "unknown host key ssh-ed25519 " + lb.sshd.fingerprint() + ": [127.0.0.1]:",
                  0) == 0);
    CHECK(e.find("host key checking is strict") != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
  }
  SECTION("accept-new adds an unknown key; strict then accepts it") {
    std::ofstream(lb.home.knownHosts(), std::ios::trunc) << "# keep this comment\n";
    auto o = lb.options();
    o.known_hosts = KnownHostsPolicy::kAcceptNew;
    CHECK(preflightError(lb, o, {hostNamed("127.0.0.1")}).empty());
    std::ifstream in(lb.home.knownHosts());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text.rfind("# keep this comment\n", 0) == 0);
    CHECK(text.find(lb.sshd.knownHostsLine().substr(0, lb.sshd.knownHostsLine().size() - 1)) !=
          std::string::npos);
    CHECK(preflightError(lb, lb.options(), {hostNamed("127.0.0.1")}).empty());
  }
  SECTION("changed host key is refused with the new fingerprint, also under accept-new") {
    lb.sshd.regenerateHostKey();
    auto o = lb.options();
    o.known_hosts = KnownHostsPolicy::kAcceptNew;
    const auto e = preflightError(lb, o, {hostNamed("127.0.0.1")});
    CHECK(
        e.rfind(tried_prefix + "host key mismatch: the server presents ssh-ed25519 " + lb.sshd.fingerprint(),
                0) == 0);
    CHECK(e.find("ssh-keygen -R '[127.0.0.1]:" + std::to_string(lb.sshd.port()) + "'") != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
  }
  SECTION("refused port, silent server and good host together: every failure reported, one line each") {
    // A listener that accepts and never speaks: the handshake times out.
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor silent(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    const uint16_t closed = hvd::test::freeLoopbackPort();
    std::ofstream(lb.home.config()) << "Host good\n  HostName 127.0.0.1\n  Port " << lb.sshd.port()
                                    << "\nHost refused\n  HostName 127.0.0.1\n  Port " << closed
                                    << "\nHost silent\n  HostName 127.0.0.1\n  Port "
                                    << silent.local_endpoint().port() << "\n";
    auto o = lb.options();
    o.port.reset();  // ports from the config
    o.connect_timeout = 1500ms;
    const auto e = preflightError(lb, o, {hostNamed("good"), hostNamed("refused"), hostNamed("silent")});
    const auto nl = e.find('\n');
    REQUIRE(nl != std::string::npos);
    CHECK(e.substr(0, nl) == "ssh root@127.0.0.1:" + std::to_string(closed) +
                                 " (refused): connection refused (is sshd running on port " +
                                 std::to_string(closed) + "?)");
    CHECK(e.substr(nl + 1) == "ssh root@127.0.0.1:" + std::to_string(silent.local_endpoint().port()) +
                                  " (silent): timed out after 1.5s (ssh handshake)");
  }
}

TEST_CASE("every host must reach the rendezvous address") {
  const std::string mode = GENERATE(as<std::string>{}, "proxy", "per-rank", "fallback");
  INFO("mode " << mode);
  Session s(mode);
  boost::asio::ip::tcp::acceptor listening(s.io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  CHECK_NOTHROW(s.launcher->checkRendezvousReachable({hostNamed("127.0.0.1")}, "127.0.0.1",
                                                     listening.local_endpoint().port()));
  const uint16_t closed = hvd::test::freeLoopbackPort();
  CHECK_THROWS_WITH(s.launcher->checkRendezvousReachable({hostNamed("127.0.0.1")}, "127.0.0.1", closed),
                    "host root@127.0.0.1:" + std::to_string(s.lb.sshd.port()) +
                        " cannot reach the rendezvous server at 127.0.0.1:" + std::to_string(closed) +
                        " (Connection refused); choose a reachable address "
                        "with --network-interface");
  // Workers still start after the checks.
  auto w = s.launcher->start(s.lb.spec(0, {"true"}), s.rec);
  REQUIRE(s.waitExit(0, 20s));
  CHECK(s.rec.exits[0].success());
}

TEST_CASE("one hvd-proxy per host starts every rank; output and exit codes stay per rank") {
  const std::string mode = GENERATE(as<std::string>{}, "proxy", "per-rank", "fallback");
  INFO("mode " << mode);
  Session s(mode);
  const std::string go = s.lb.home.home() + "/go";
  std::vector<std::unique_ptr<Worker>> workers;
  const int n = 5;
  // Each rank reports its parent, then waits for the test to look at that parent before it ends.
  for (int r = 0; r < n; ++r) {
    workers.push_back(
        s.launcher->start(s.lb.spec(r, {"bash", "-c",
                                        "echo ppid=$PPID; while [ ! -e \"$1\" ]; do sleep 0.05; done; "
                                        "printf 'out %s\\nsecond line %s\\n' $0 $0; echo err $0 >&2; exit $0",
                                        std::to_string(r), go}),
                          s.rec));
  }
  REQUIRE(runUntil(
      s.io,
      [&] {
        for (int r = 0; r < n; ++r) {
          if (s.rec.out[r].find('\n') == std::string::npos) return false;
        }
        return true;
      },
      30s));
  std::set<std::string> parents;
  for (int r = 0; r < n; ++r) {
    REQUIRE(s.rec.out[r].rfind("ppid=", 0) == 0);
    parents.insert(s.rec.out[r].substr(5, s.rec.out[r].find('\n') - 5));
  }
  if (mode == "proxy") {
    // One remote process (one channel, one login shell) for all five ranks: the proxy.
    REQUIRE(parents.size() == 1);
    const auto cmdline = readCommandLine(std::stoi(*parents.begin()));
    REQUIRE(cmdline);
    CHECK(cmdline->rfind(s.lb.proxy.path, 0) == 0);
  } else {
    CHECK(parents.size() == static_cast<size_t>(n));  // a bootstrap shell, and a channel, per rank
  }
  std::ofstream(go).put('\n');
  REQUIRE(runUntil(
      s.io, [&] { return static_cast<int>(s.rec.exits.size()) == n; }, 30s));
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    const std::string rs = std::to_string(r);
    CHECK(s.rec.out[r].substr(s.rec.out[r].find('\n') + 1) == "out " + rs + "\nsecond line " + rs + "\n");
    CHECK(s.rec.err[r] == "err " + rs + "\n");
    CHECK(s.rec.exits[r].kind == ExitStatus::Kind::kExited);
    CHECK(s.rec.exits[r].code == r);
    CHECK(workers[r]->state() == (r == 0 ? WorkerState::kSucceeded : WorkerState::kFailed));
  }
}

TEST_CASE("stdin reaches a remote rank 0 through hvd-proxy; other ranks read /dev/null") {
  Loopback lb;
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  lb.proxy.stdin_fd = fds[0];
  boost::asio::io_context io;
  auto launcher = lb.launcher(io);
  Recorder rec;
  auto zero = lb.spec(0, {"bash", "-c", "cat; echo done"});
  zero.forward_stdin = true;
  auto w0 = launcher->start(zero, rec);
  auto w1 = launcher->start(lb.spec(1, {"bash", "-c", "cat; echo done1"}), rec);
  // Bytes of every value, a line without a newline at the end, then EOF.
  using namespace std::string_literals;
  const std::string input = "line one\n\x01\xff\0 ünï\nlast"s;
  REQUIRE(::write(fds[1], input.data(), input.size()) == static_cast<ssize_t>(input.size()));
  ::close(fds[1]);
  REQUIRE(runUntil(
      io, [&] { return rec.exits.size() == 2; }, 30s));
  ::close(fds[0]);
  CHECK(rec.out[0] == input + "done\n");
  CHECK(rec.exits[0].success());
  CHECK(rec.out[1] == "done1\n");
  CHECK(rec.exits[1].success());
}

TEST_CASE("a command that cannot be executed ends with exit code 127 and says why") {
  const std::string mode = GENERATE(as<std::string>{}, "proxy", "per-rank");
  INFO("mode " << mode);
  Session s(mode, /*preflight=*/false);
  auto w = s.launcher->start(s.lb.spec(3, {"no-such-command-hvd"}), s.rec);
  REQUIRE(s.waitExit(3, 20s));
  CHECK(s.rec.exits[3].code == 127);
  CHECK(s.rec.err[3].find("no-such-command-hvd") != std::string::npos);
}

TEST_CASE("HVD_SSH_PROXY and HVD_SSH_PROXY_PATH choose the mode; bad values are usage errors") {
  ::unsetenv("HVD_SSH_PROXY");
  ::unsetenv("HVD_SSH_PROXY_PATH");
  CHECK(ssh::ProxyOptions::fromEnvironment().enabled);
  CHECK(ssh::proxyPath(ssh::ProxyOptions::fromEnvironment()) ==
        std::filesystem::read_symlink("/proc/self/exe").parent_path() / "hvd-proxy");
  ::setenv("HVD_SSH_PROXY", "never", 1);
  CHECK_FALSE(ssh::ProxyOptions::fromEnvironment().enabled);
  ::setenv("HVD_SSH_PROXY", "sometimes", 1);
  CHECK_THROWS_WITH(ssh::ProxyOptions::fromEnvironment(),
                    "HVD_SSH_PROXY='sometimes' is not one of auto, never");
  ::setenv("HVD_SSH_PROXY", "auto", 1);
  ::setenv("HVD_SSH_PROXY_PATH", "relative/hvd-proxy", 1);
  CHECK_THROWS_WITH(ssh::ProxyOptions::fromEnvironment(),
                    "HVD_SSH_PROXY_PATH='relative/hvd-proxy' is not an absolute path");
  ::setenv("HVD_SSH_PROXY_PATH", "/opt/hvd/bin/hvd-proxy", 1);
  CHECK(ssh::proxyPath(ssh::ProxyOptions::fromEnvironment()) == "/opt/hvd/bin/hvd-proxy");
  ::unsetenv("HVD_SSH_PROXY");
  ::unsetenv("HVD_SSH_PROXY_PATH");
}
