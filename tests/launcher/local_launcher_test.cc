// LocalLauncher driven directly: signals that arrive before a worker has made its process group.
#include <signal.h>

#include <chrono>
#include <map>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include "launcher/local/launcher.h"

using namespace hvd::launcher;
using namespace std::chrono_literals;

namespace {

struct Recorder : WorkerEvents {
  std::map<int, ExitStatus> exits;
  void onOutput(int, Stream, std::string_view) override {}
  void onStreamClosed(int, Stream) override {}
  void onExit(int rank, const ExitStatus& status) override { exits[rank] = status; }
};

bool runUntil(boost::asio::io_context& io, const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    io.restart();
    io.run_for(20ms);
  }
}

}  // namespace

TEST_CASE("signal() at once after start() reaches a worker whose group does not exist yet", "[local]") {
  boost::asio::io_context io;
  local::LocalLauncher launcher(io);
  // kill(-pid) right after fork() usually finds no group yet: the child has not called setsid().
  for (int round = 0; round < 20; ++round) {
    INFO("round " << round);
    Recorder rec;
    LaunchSpec spec;
    spec.rank = round;
    spec.host.name = "localhost";
    spec.argv = {"sleep", "60"};
    spec.env = {{"PATH", "/usr/bin:/bin"}};
    spec.cwd = "/";
    auto worker = launcher.start(spec, rec);
    worker->signal(SIGTERM);
    REQUIRE(runUntil(
        io, [&] { return rec.exits.count(round) > 0; }, 5s));
    CHECK(rec.exits[round].kind == ExitStatus::Kind::kSignaled);
    CHECK(rec.exits[round].signal == SIGTERM);
    CHECK(worker->state() == WorkerState::kStopped);
  }
}
