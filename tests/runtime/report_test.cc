// Workers' reports to the rendezvous server (runtime/reporter.h): real worker processes against the test's
// rendezvous Server, whose Monitor shows what arrived; rank 0's waits; HVD_REPORT_INTERVAL_SECONDS; a server
// without the report route. And the pieces below the reporter: Coordinator::waits and ReportStats.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "base/job_monitor.h"
#include "rendezvous/server.h"
#include "runtime/coordinator.h"
#include "runtime/reporter.h"
#include "tests/common/child.h"
#include "tests/runtime/job.h"

using namespace hvd::runtime::testing;
using hvd::JobSnapshot;
using hvd::rendezvous::Server;
using hvd::runtime::Coordinator;
using hvd::runtime::CoordinatorOptions;
using hvd::runtime::OpType;
using hvd::runtime::ReportStats;
using hvd::runtime::Request;

namespace {

std::string hostName() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string describe(const JobSnapshot& s) {
  std::ostringstream out;
  for (const auto& w : s.workers) {
    out << "worker " << w.id << " rank " << w.rank << " state " << toString(w.state) << ": "
        << (w.report ? toJson(*w.report).dump() : std::string("no report")) << "\n";
  }
  return out.str();
}

Request request(OpType type, const std::string& name, int process_set = 0) {
  Request r;
  r.type = type;
  r.name = name;
  r.rows = 4;
  r.process_set = process_set;
  return r;
}

}  // namespace

TEST_CASE("reports: every rank's last report has state shutdown and its exact counts and bytes",
          "[multiprocess][report]") {
  JobOptions o;
  o.np = 3;
  o.argv = {buildPath("tests/runtime/scenario_worker"), "report"};
  // As hvdrun numbers the workers of a static job: by rank (the server's view of a joined rank is that worker).
  for (int r = 0; r < o.np; ++r) o.rank_env[r] = {{"HVD_WORKER_ID", std::to_string(r)}};
  JobSnapshot snapshot;
  o.on_finish = [&](Server& server) { snapshot = server.monitor().snapshot(); };
  const auto results = runJob(o);
  INFO(describe(results) << describe(snapshot));
  for (const auto& r : results) {
    REQUIRE(r.exit_code == 0);
    REQUIRE(r.output.find("report ok") != std::string::npos);
  }
  REQUIRE(snapshot.workers.size() == 3);
  for (int r = 0; r < 3; ++r) {
    const auto& w = snapshot.workers[r];
    CHECK(w.id == r);
    REQUIRE(w.report);
    const auto& report = *w.report;
    CHECK(report.state == "shutdown");
    CHECK(report.rank == r);
    CHECK(report.size == 3);
    CHECK(report.local_rank == r);
    CHECK(report.id == r);  // HVD_WORKER_ID came with the report
    CHECK(report.host == hostName());
    CHECK(report.pid > 0);
    CHECK(report.round == 0);
    CHECK(report.uptime_s > 0);
    CHECK(report.uptime_s < 60);
    CHECK(report.rss_bytes > 0);
    CHECK(report.peak_rss_bytes >= report.rss_bytes);
    // 5 allreduces of 1000 float32, 3 broadcasts of 256 int32, 2 allgathers of rank + 1 rows of 4 float32.
    REQUIRE(report.collectives.size() == 3);
    CHECK(report.collectives.at("allreduce").count == 5);
    CHECK(report.collectives.at("allreduce").bytes == 5 * 4000);
    CHECK(report.collectives.at("broadcast").count == 3);
    CHECK(report.collectives.at("broadcast").bytes == 3 * 1024);
    CHECK(report.collectives.at("allgather").count == 2);
    CHECK(report.collectives.at("allgather").bytes == 2 * uint64_t(r + 1) * 16);
    CHECK(report.waits.empty());
    CHECK(report.stall_warnings == 0);
  }
}

TEST_CASE("reports: rank 0's report names the rank a collective waits for, and for how long",
          "[multiprocess][report]") {
  JobOptions o;
  o.np = 3;
  o.argv = {buildPath("tests/runtime/scenario_worker"), "report_wait"};  // rank 2 sleeps 2.5 s first
  o.env = {{"HVD_REPORT_INTERVAL_SECONDS", "0.2"}};
  std::mutex mutex;
  std::vector<hvd::CollectiveWait> longest;  // the "late" wait with the most seconds seen
  std::atomic<bool> done{false};
  std::thread watcher;
  JobSnapshot last;
  o.on_server = [&](Server& server) {
    watcher = std::thread([&] {
      while (!done) {
        for (const auto& w : server.monitor().snapshot().waits) {
          std::lock_guard lock(mutex);
          if (w.name == "late" && (longest.empty() || w.seconds > longest[0].seconds)) longest = {w};
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  };
  o.on_finish = [&](Server& server) {
    done = true;
    watcher.join();
    last = server.monitor().snapshot();
  };
  const auto results = runJob(o);
  INFO(describe(results) << describe(last));
  for (const auto& r : results) {
    REQUIRE(r.exit_code == 0);
    REQUIRE(r.output.find("wait ok") != std::string::npos);
  }
  REQUIRE(longest.size() == 1);
  const auto& w = longest[0];
  CHECK(w.op == "allreduce");
  CHECK(w.process_set == 0);
  CHECK(w.submitted == std::vector<int>{0, 1});
  CHECK(w.missing == std::vector<int>{2});
  CHECK(w.seconds >= 1.0);
  CHECK(w.seconds < 5.0);
  CHECK(last.waits.empty());  // rank 0's last report: nothing waits any more
}

TEST_CASE("reports: HVD_REPORT_INTERVAL_SECONDS=0 sends none", "[multiprocess][report]") {
  JobOptions o;
  o.np = 2;
  o.argv = {buildPath("tests/runtime/scenario_worker"), "report"};
  o.env = {{"HVD_REPORT_INTERVAL_SECONDS", "0"}};
  JobSnapshot snapshot;
  o.on_finish = [&](Server& server) { snapshot = server.monitor().snapshot(); };
  const auto results = runJob(o);
  INFO(describe(results) << describe(snapshot));
  for (const auto& r : results) REQUIRE(r.exit_code == 0);
  CHECK(snapshot.workers.size() == 2);  // joined, as the rendezvous saw them
  bool any_report = false;
  for (const auto& w : snapshot.workers) any_report = any_report || w.report.has_value();
  CHECK_FALSE(any_report);
}

TEST_CASE("reports: a bad HVD_REPORT_INTERVAL_SECONDS fails init naming the variable and the value",
          "[multiprocess][report]") {
  for (const auto& [value, message] :
       {std::pair<std::string, std::string>{"soon", "HVD_REPORT_INTERVAL_SECONDS='soon' is not a number"},
        {"-1", "HVD_REPORT_INTERVAL_SECONDS=-1 must be at least 0"},
        {"1e9", "HVD_REPORT_INTERVAL_SECONDS=1e9 is more than a day"}}) {
    JobOptions o;
    o.np = 2;
    o.argv = {buildPath("tests/runtime/scenario_worker"), "report"};
    o.env = {{"HVD_REPORT_INTERVAL_SECONDS", value}};
    const auto results = runJob(o);
    INFO(value << "\n" << describe(results));
    for (const auto& r : results) {
      CHECK(r.exit_code == 2);
      CHECK(r.output.find("init: hvd_init failed: " + message) != std::string::npos);
    }
  }
}

TEST_CASE("reports: a server without the report route (404, or Horovod's dropped connection) is left alone",
          "[multiprocess][report]") {
  // A key-value-only server (Horovod's protocol) in its own process; its log lists the paths it refused.
  const std::string mode = GENERATE("404", "drop");
  char log_template[] = "/tmp/hvd_kv_only_XXXXXX";
  const int log_fd = ::mkstemp(log_template);
  REQUIRE(log_fd >= 0);
  ::close(log_fd);
  const std::string log = log_template;
  const char* source = std::getenv("HVD_SOURCE_DIR");
  REQUIRE(source != nullptr);
  const std::string script = std::string(source) + "/tests/runtime/kv_only_server.py";
  const auto child = hvd::test::startAndReadFirstLine("/usr/bin/python3", {"python3", script, log, mode});
  REQUIRE(child.pid >= 0);
  const pid_t server = child.pid;
  const std::string port = child.first_line;
  REQUIRE(!port.empty());

  JobOptions o;
  o.np = 3;
  o.argv = {buildPath("tests/runtime/scenario_worker"), "report_wait"};  // about 3 s: 30 intervals
  o.with_server = false;
  o.env = {{"HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1"},
           {"HOROVOD_GLOO_RENDEZVOUS_PORT", port},
           {"HVD_REPORT_INTERVAL_SECONDS", "0.1"},
           {"HOROVOD_LOG_LEVEL", "debug"}};
  const auto started = std::chrono::steady_clock::now();
  const auto results = runJob(o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ::kill(server, SIGTERM);
  ::waitpid(server, nullptr, 0);
  std::ifstream in(log);
  const std::string refused((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::unlink(log.c_str());
  INFO(mode << ", " << seconds << " s\n" << describe(results) << "refused:\n" << refused);
  for (const auto& r : results) {
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find("wait ok") != std::string::npos);
    CHECK(count(r.output, "does not take status reports") == 1);
    CHECK(r.output.find("status report to the rendezvous server") == std::string::npos);  // no failure logged
  }
  for (int r = 0; r < 3; ++r) {
    const size_t sent = count(refused, "PUT /_hvd/report/" + std::to_string(r) + "\n");
    if (mode == "404") {
      CHECK(sent == 1);
    } else {
      // One report, resent while its 500 ms last (HttpStore retries a request that got no answer).
      CHECK(sent >= 1);
      CHECK(sent <= 8);
    }
  }
  CHECK(seconds > 2.5);  // long enough for 25 reports per rank
}

TEST_CASE("Coordinator::waits lists names some ranks submitted, the oldest first, past the minimum age",
          "[report]") {
  CoordinatorOptions options;
  options.size = 3;
  Coordinator c(options);
  const auto t0 = Coordinator::Clock::now();
  using std::chrono::milliseconds;
  c.add(0, request(OpType::kAllreduce, "b"), t0 + milliseconds(100));
  c.add(1, request(OpType::kBroadcast, "a"), t0);
  c.add(2, request(OpType::kBroadcast, "a"), t0 + milliseconds(10));
  c.add(0, request(OpType::kAllgather, "done"), t0);
  c.add(1, request(OpType::kAllgather, "done"), t0);
  c.add(2, request(OpType::kAllgather, "done"), t0);  // complete: not a wait
  CHECK(c.waits(t0 + milliseconds(200), milliseconds(250), 16).empty());
  auto waits = c.waits(t0 + milliseconds(300), milliseconds(250), 16);
  REQUIRE(waits.size() == 1);  // "b" is 200 ms old only
  CHECK(waits[0].name == "a");
  CHECK(waits[0].op == "broadcast");
  CHECK(waits[0].submitted == std::vector<int>{1, 2});
  CHECK(waits[0].missing == std::vector<int>{0});
  CHECK(waits[0].seconds == Approx(0.3));
  waits = c.waits(t0 + milliseconds(1000), milliseconds(250), 16);
  REQUIRE(waits.size() == 2);
  CHECK(waits[0].name == "a");
  CHECK(waits[1].name == "b");
  CHECK(waits[1].op == "allreduce");
  CHECK(waits[1].missing == std::vector<int>{1, 2});
  CHECK(waits[1].seconds == Approx(0.9));
  waits = c.waits(t0 + milliseconds(1000), milliseconds(250), 1);  // capped: the oldest stays
  REQUIRE(waits.size() == 1);
  CHECK(waits[0].name == "a");
  // A joined rank is not waited for.
  Request join;
  join.type = OpType::kJoin;
  c.add(1, join, t0 + milliseconds(500));
  waits = c.waits(t0 + milliseconds(1000), milliseconds(250), 16);
  REQUIRE(waits.size() == 2);
  CHECK(waits[1].name == "b");
  CHECK(waits[1].missing == std::vector<int>{2});
}

TEST_CASE("ReportStats counts by operation name and brings the waits' ages forward", "[report]") {
  ReportStats stats;
  CHECK(stats.collectives().empty());
  stats.completed(OpType::kAllreduce, 400);
  stats.completed(OpType::kAllreduce, 100);
  stats.completed(OpType::kJoin, 0);
  stats.completed(OpType::kProcessSet, 7);  // not an operation reports count
  const auto c = stats.collectives();
  REQUIRE(c.size() == 2);
  CHECK(c.at("allreduce").count == 2);
  CHECK(c.at("allreduce").bytes == 500);
  CHECK(c.at("join").count == 1);
  hvd::CollectiveWait w;
  w.name = "x";
  w.seconds = 1.0;
  const auto at = ReportStats::Clock::now();
  stats.publishWaits({w}, at);
  const auto waits = stats.waits(at + std::chrono::milliseconds(500));
  REQUIRE(waits.size() == 1);
  CHECK(waits[0].seconds == Approx(1.5));
  stats.stallWarning();
  CHECK(stats.stallWarnings() == 1);
}
