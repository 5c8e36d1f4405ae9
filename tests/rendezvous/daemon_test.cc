// hvd-rendezvous as a black box: start it, parse the address it prints, use it, stop it with SIGTERM;
// bad flags exit 2 with one line naming the value; a port in use exits 1 naming the address.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "base/error.h"
#include "rendezvous/http_store.h"
#include "tests/rendezvous/test_server.h"

using namespace hvd::rendezvous;
using namespace std::chrono_literals;

namespace {

std::string daemonPath() {
  const char* path = std::getenv("HVD_RENDEZVOUS_BIN");
  REQUIRE(path != nullptr);
  return path;
}

// A child process with its stdout and stderr on pipes; killed and reaped if the test ends early.
class Child {
 public:
  explicit Child(std::vector<std::string> args) {
    int out[2], err[2];
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
    args.insert(args.begin(), daemonPath());
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    out_ = out[0];
    err_ = err[0];
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(out_);
    ::close(err_);
  }

  // One line of stdout, waiting up to 10 s.
  std::string readLine() {
    std::string line;
    char c;
    while (true) {
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, 10000) <= 0) return line;
      if (::read(out_, &c, 1) != 1 || c == '\n') return line;
      line += c;
    }
  }

  // Everything left on fd (the child has exited, so this ends).
  static std::string readAll(int fd) {
    std::string text;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
    return text;
  }
  std::string readAllStderr() { return readAll(err_); }
  int stdoutFd() const { return out_; }

  void signal(int sig) { ::kill(pid_, sig); }

  // Exit code (or 128+signal), waiting up to 10 s.
  int wait() {
    for (int i = 0; i < 1000; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  int err_ = -1;
  bool reaped_ = false;
};

uint16_t parsePort(const std::string& line) {
  std::smatch m;
  REQUIRE(std::regex_match(line, m, std::regex(R"(hvd-rendezvous listening on 127\.0\.0\.1:(\d+))")));
  return static_cast<uint16_t>(std::stoi(m[1]));
}

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

}  // namespace

TEST_CASE("daemon: serves workers until SIGTERM, then exits 0", "[daemon]") {
  for (int sig : {SIGTERM, SIGINT}) {
    Child daemon({"--no-token", "--scope-size", "global=2"});
    const std::string line = daemon.readLine();
    INFO("first line: " << line);
    const uint16_t port = parsePort(line);
    StoreOptions options;
    options.host = "127.0.0.1";
    options.port = port;
    HttpStore store(options);
    store.set("global/0", bytes("a"));
    store.set("global/1", bytes("b"));
    store.wait({"global/0", "global/1"}, 5s);
    store.deleteKey("global/0");
    CHECK(store.tryGet("global/1") == bytes("b"));
    store.deleteKey("global/1");  // both finished: the sized scope is cleared
    CHECK_FALSE(store.tryGet("global/1").has_value());
    daemon.signal(sig);
    CHECK(daemon.wait() == 0);
  }
}

TEST_CASE("daemon: requires the token from --token-file", "[daemon]") {
  const auto file = std::filesystem::temp_directory_path() / ("hvd_token_test." + std::to_string(::getpid()));
  std::ofstream(file) << "tok-123\n";
  Child daemon({"--bind", "127.0.0.1", "--port", "0", "--token-file", file.string(), "--threads", "3"});
  const uint16_t port = parsePort(daemon.readLine());
  StoreOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  CHECK_THROWS_WITH(HttpStore(options).set("s/k", bytes("v")), Catch::Contains("401"));
  options.token = "tok-123";
  HttpStore store(options);
  store.set("s/k", bytes("v"));
  CHECK(store.get("s/k", 1s) == bytes("v"));
  daemon.signal(SIGTERM);
  CHECK(daemon.wait() == 0);
  std::filesystem::remove(file);
}

TEST_CASE("daemon: --trust-local-peers serves this user's local processes without the token", "[daemon]") {
  const auto file =
      std::filesystem::temp_directory_path() / ("hvd_token_trust_test." + std::to_string(::getpid()));
  std::ofstream(file) << "tok-456\n";
  for (const bool with_file : {false, true}) {
    std::vector<std::string> args = {"--trust-local-peers"};
    if (with_file) args.insert(args.end(), {"--token-file", file.string()});
    Child daemon(args);
    const uint16_t port = parsePort(daemon.readLine());
    StoreOptions options;
    options.host = "127.0.0.1";
    options.port = port;
    HttpStore tokenless(options);  // this process: same user, loopback
    tokenless.set("s/k", bytes("v"));
    CHECK(tokenless.get("s/k", 1s) == bytes("v"));
    options.token = "wrong";
    CHECK_THROWS_WITH(HttpStore(options).set("s/k", bytes("x")), Catch::Contains("403"));
    if (with_file) {
      options.token = "tok-456";
      CHECK(HttpStore(options).get("s/k", 1s) == bytes("v"));
    }
    daemon.signal(SIGTERM);
    CHECK(daemon.wait() == 0);
  }
  std::filesystem::remove(file);
}

TEST_CASE("daemon: bad command lines exit 2 with one line naming the value", "[daemon]") {
  struct Case {
    std::vector<std::string> args;
    std::string text;
  };
  const std::vector<Case> cases = {
      {{"--no-token", "--port", "abc"}, "'abc'"},
      {{"--no-token", "--port", "70000"}, "'70000'"},
      {{"--no-token", "--port", "-1"}, "'-1'"},
      {{"--no-token", "--frobnicate"}, "frobnicate"},
      {{}, "--token-file"},
      {{"--no-token", "--token-file", "/x"}, "exclude"},
      {{"--no-token", "--trust-local-peers"}, "--trust-local-peers and --no-token exclude each other"},
      {{"--token-file", "/nonexistent/hvd.token"}, "/nonexistent/hvd.token"},
      {{"--no-token", "--scope-size", "global"}, "'global'"},
      {{"--no-token", "--scope-size", "global=zero"}, "'zero'"},
      {{"--no-token", "--threads", "0"}, "'0'"},
      {{"--no-token", "--port"}, "port"},
  };
  for (const auto& c : cases) {
    Child daemon(c.args);
    const int code = daemon.wait();
    const std::string err = daemon.readAllStderr();
    INFO("args: " << Catch::Detail::stringify(c.args) << "\nstderr: " << err);
    CHECK(code == 2);
    CHECK_THAT(err, Catch::Contains(c.text));
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  }
  // The parent-death signal asked for in the environment: checked before the command line.
  ::setenv("HVD_PARENT_DEATH_SIGNAL", "15:none", 1);
  Child daemon({"--no-token"});
  ::unsetenv("HVD_PARENT_DEATH_SIGNAL");
  const int code = daemon.wait();
  const std::string err = daemon.readAllStderr();
  CHECK(code == 2);
  CHECK(err ==
        "hvd-rendezvous: HVD_PARENT_DEATH_SIGNAL=\"15:none\": expected <signal number 1-64>:<parent pid> "
        "(see --help)\n");
}

TEST_CASE("daemon: --help documents the environment and exit codes", "[daemon]") {
  Child daemon({"--help"});
  CHECK(daemon.wait() == 0);
  const std::string help = daemon.readAll(daemon.stdoutFd());
  CHECK_THAT(help, Catch::Contains("HOROVOD_GLOO_RENDEZVOUS_ADDR") && Catch::Contains("HVD_RENDEZVOUS_TOKEN") &&
                       Catch::Contains("Exit codes"));
}

TEST_CASE("daemon: a port in use exits 1 naming the address", "[daemon]") {
  testing::ServerThread taken;
  Child daemon({"--no-token", "--port", std::to_string(taken.port())});
  CHECK(daemon.wait() == 1);
  const std::string err = daemon.readAllStderr();
  CHECK_THAT(err, Catch::Contains("127.0.0.1:" + std::to_string(taken.port())) && Catch::Contains("in use"));
}
