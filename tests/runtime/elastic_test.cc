// Elastic parts of libhvd with real worker processes: the distinct "peer lost" failure, host updates between
// steps, the state API and the run loop. The test plays hvdrun's elastic driver through the rendezvous
// server (JobOptions::on_server, Server::beginRound / markStarted).
#include <catch2/catch.hpp>

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <hvd/hvd.h>
#include <hvd/hvd.hpp>

#include "rendezvous/server.h"
#include "tests/common/files.h"
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
  // (transport, ranks): TCP at 3, 4 and 8 ranks (rings of every parity, survivors on both sides of the
  // victim and beyond), shared memory at 3. "stopped": rank 1 first stops reading (SIGSTOP), so the
  // survivors' sends to it fill its sockets and wait in Gloo's transmit queue when it dies -- the state in
  // which Gloo never wakes the sender (gloo_backend/abort_signal.h); "kill" reaches it only by chance.
  const auto [shm, np, how] = GENERATE(std::make_tuple(false, 3, "kill"), std::make_tuple(false, 4, "kill"),
                                       std::make_tuple(false, 8, "kill"), std::make_tuple(true, 3, "kill"),
                                       std::make_tuple(false, 3, "stopped"), std::make_tuple(false, 4, "stopped"));
  JobOptions o;
  o.np = np;
  o.argv = {buildPath("tests/runtime/scenario_worker"), "peer_lost", how};
  // The Gloo timeout is long: the failure must come from the lost peer, not from a timeout.
  o.env = {{"HOROVOD_GLOO_TIMEOUT_SECONDS", "30"}, {"HVD_SHARED_MEMORY", shm ? "1" : "0"}};
  o.timeout = std::chrono::seconds(45);
  const auto results = runJob(o);
  INFO((shm ? "shared memory, " : "TCP, ") << np << " ranks, " << how << "\n" << describe(results));
  REQUIRE(results[1].signal == SIGKILL);
  const auto killed_at = numberAfter(results[0].output, "killed rank 1 at");
  if (std::string(how) == "stopped") REQUIRE(killed_at);
  for (int r = 0; r < np; ++r) {
    if (r == 1) continue;
    INFO("rank " << r);
    REQUIRE(results[r].exit_code == 0);
    const auto& out = results[r].output;
    // Rank 1 dies in step 3 once its step 2 completed, which only means its last block was written to its
    // socket: a survivor may still be reading the last blocks of step 2 then (a reset discards what it
    // had not read), and that survivor fails in step 2 instead.
    const auto step = numberAfter(out, "peer_lost step");
    REQUIRE(step);
    CHECK((*step == 3.0 || *step == 2.0));
    CHECK(numberAfter(out, "big") == -9.0);
    if (*step == 3.0) CHECK(numberAfter(out, "queued") == -9.0);
    CHECK(numberAfter(out, "resubmit") == -9.0);
    const auto shutdown = numberAfter(out, "shutdown");
    REQUIRE(shutdown);
    CHECK(*shutdown < 2.0);
    if (killed_at) {
      // Every survivor learns of the loss within 2 s of it, not after the Gloo timeout.
      const auto failed_at = numberAfter(out, "failed at");
      REQUIRE(failed_at);
      CHECK(*failed_at - *killed_at < 2.0);
    }
  }
}

TEST_CASE("a peer that stops (SIGSTOP) mid-collective and never continues is a timeout: every survivor fails "
          "within HOROVOD_GLOO_TIMEOUT_SECONDS and 2 s, and the rank that timed out says so",
          "[multiprocess][elastic][failure]") {
  JobOptions o;
  o.np = 3;
  o.argv = {buildPath("tests/runtime/scenario_worker"), "peer_lost", "hung"};
  o.env = {{"HOROVOD_GLOO_TIMEOUT_SECONDS", "3"}, {"HVD_SHARED_MEMORY", "0"}};
  o.timeout = std::chrono::seconds(45);
  const auto results = runJob(o);
  INFO(describe(results));
  REQUIRE(results[1].signal == SIGKILL);  // by rank 0, once it gave up
  // A stopped process keeps its connections open: nothing tells it from a slow one but the timeout. The
  // first survivor whose wait expires fails with Gloo's timeout (HVD_ERR_BACKEND) and Gloo closes its
  // pairs; the other survivor may see those close first (HVD_ERR_PEER_LOST).
  int timed_out = 0;
  std::optional<double> first, last;
  for (int r : {0, 2}) {
    INFO("rank " << r);
    REQUIRE(results[r].exit_code == 0);
    const auto& out = results[r].output;
    REQUIRE(out.find("peer_lost step 3") != std::string::npos);
    const auto big = numberAfter(out, "big");
    REQUIRE(big);
    CHECK((*big == -5.0 || *big == -9.0));
    if (*big == -5.0) {
      CHECK_THAT(out, Catch::Contains("Timed out waiting 3000ms"));
      ++timed_out;
    }
    const auto failed_at = numberAfter(out, "failed at");
    REQUIRE(failed_at);
    first = first ? std::min(*first, *failed_at) : *failed_at;
    last = last ? std::max(*last, *failed_at) : *failed_at;
  }
  CHECK(timed_out >= 1);
  CHECK(*last - *first < 2.0);
}

TEST_CASE("the threads libhvd starts block SIGPIPE, so a write to a lost peer fails rather than ending the "
          "process; the caller's thread and the disposition are left as they were",
          "[multiprocess][elastic][failure]") {
  const bool shm = GENERATE(false, true);
  JobOptions o;
  o.np = 2;
  o.argv = {buildPath("tests/runtime/scenario_worker"), "sigpipe"};
  o.env = {{"HVD_SHARED_MEMORY", shm ? "1" : "0"}};
  const auto results = runJob(o);
  INFO((shm ? "shared memory" : "TCP") << "\n" << describe(results));
  for (int r : {0, 1}) {
    REQUIRE(results[r].exit_code == 0);
    const auto& out = results[r].output;
    REQUIRE(out.find("disposition default") != std::string::npos);
    CHECK(numberAfter(out, "main") == 0.0);
    const auto threads = numberAfter(out, "threads");
    REQUIRE(threads);
    CHECK(*threads >= 2.0);  // Gloo's device loop and the background thread at least
    CHECK(numberAfter(out, "blocked") == *threads);
  }
}

namespace {

using hvd::rendezvous::ElasticRound;
using hvd::rendezvous::Server;

// An elastic round over slots "localhost:<s>" of this host: members[i] is the slot that gets rank i.
ElasticRound localRound(uint64_t number, const std::vector<int>& members, unsigned changes) {
  ElasticRound r;
  r.number = number;
  r.changes = changes;
  const int size = static_cast<int>(members.size());
  for (int rank = 0; rank < size; ++rank) {
    r.slots["localhost:" + std::to_string(members[rank])] = {rank, size, rank, size, 0, 1};
    r.scope_sizes[hvd::rendezvous::roundScope(number, "cross_" + std::to_string(rank))] = 1;
  }
  r.scope_sizes[hvd::rendezvous::roundScope(number, "global")] = size;
  r.scope_sizes[hvd::rendezvous::roundScope(number, "local_localhost")] = size;
  return r;
}

// Round 1 as the np workers are started (slot s is rank s), as hvdrun's driver begins it.
void beginFirstRound(Server& server, int np) {
  std::vector<int> members;
  for (int s = 0; s < np; ++s) members.push_back(s);
  server.beginRound(localRound(1, members, 0));
  for (int s = 0; s < np; ++s) server.markStarted("localhost:" + std::to_string(s), 1);
}

std::map<std::string, std::string> elasticEnv() {
  return {{"HOROVOD_ELASTIC", "1"}, {"HVD_ELASTIC_ROUND", "1"}, {"HOROVOD_ELASTIC_TIMEOUT", "60"},
          {"HOROVOD_GLOO_TIMEOUT_SECONDS", "30"}};
}

// Waits up to `limit` for cond(); true when it held.
template <typename F>
bool waitFor(F cond, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace

TEST_CASE("elastic init whose round is over joins the next round: refused keys (410) or peers that never come",
          "[multiprocess][elastic]") {
  const bool while_waiting = GENERATE(false, true);
  JobOptions o;
  o.np = 2;
  o.argv = {buildPath("tests/runtime/scenario_worker"), "init_round"};
  o.env = elasticEnv();
  // Round 1 has three ranks, but the worker of its third slot never comes: init in it cannot finish.
  o.env["HOROVOD_SIZE"] = "3";
  o.env["HOROVOD_LOCAL_SIZE"] = "3";
  o.timeout = std::chrono::seconds(60);
  std::thread driver;
  bool began = false;
  o.on_server = [&](Server& server) {
    beginFirstRound(server, 3);
    if (!while_waiting) {
      // Over before the workers start: their first PUT into round 1 is refused. Round 2 leaves slot 1 out.
      server.beginRound(localRound(2, {0}, hvd::rendezvous::kRoundRemoved));
      began = true;
      return;
    }
    // Over while both wait in round 1's global rendezvous for the missing rank.
    driver = std::thread([&, srv = &server] {
      began = waitFor([&] { return srv->scopes()["r1.global"].keys.size() == 2; }, std::chrono::seconds(30));
      if (began) srv->beginRound(localRound(2, {0, 1}, hvd::rendezvous::kRoundRemoved));
    });
  };
  const auto start = std::chrono::steady_clock::now();
  const auto results = runJob(o);
  const auto took = std::chrono::steady_clock::now() - start;
  if (driver.joinable()) driver.join();
  INFO((while_waiting ? "round over while waiting" : "round over before init") << "\n" << describe(results));
  REQUIRE(began);
  REQUIRE(results[0].exit_code == 0);
  CHECK(took < std::chrono::seconds(30));  // not the elastic timeout (60 s)
  if (while_waiting) {
    REQUIRE(results[1].exit_code == 0);
    CHECK_THAT(results[0].output, Catch::Contains("init round 2 rank 0 size 2 sum 3 status 0"));
    CHECK_THAT(results[1].output, Catch::Contains("init round 2 rank 1 size 2 sum 3 status 0"));
  } else {
    CHECK_THAT(results[0].output, Catch::Contains("init round 2 rank 0 size 1 sum 1 status 0"));
    // Left out of the round it joined: the error it has always been, naming the slot.
    CHECK(results[1].exit_code == 2);
    CHECK_THAT(results[1].output, Catch::Contains("slot localhost:1 is not in elastic round 2"));
  }
}

TEST_CASE("hvd_elastic_check_host_updates is 0 until the driver begins a newer round, then 1 with its changes",
          "[multiprocess][elastic]") {
  const hvd::test::TempDir dir("/tmp/hvd_host_updates_");
  const std::string signal = dir.file("checked");
  JobOptions o;
  o.np = 2;
  o.argv = {buildPath("tests/runtime/scenario_worker"), "host_updates"};
  o.env = elasticEnv();
  o.env["HVD_TEST_SIGNAL_FILE"] = signal;
  o.timeout = std::chrono::seconds(60);
  std::thread driver;
  bool began = false;
  o.on_server = [&](Server& server) {
    beginFirstRound(server, 2);
    // Round 2 once both ranks have checked once (rank 0 writes the file after the collective check).
    driver = std::thread([&, srv = &server] {
      began = waitFor([&] { return ::access(signal.c_str(), F_OK) == 0; }, std::chrono::seconds(40));
      if (began) srv->beginRound(localRound(2, {0, 1}, hvd::rendezvous::kRoundAdded));
    });
  };
  const auto results = runJob(o);
  driver.join();
  INFO(describe(results));
  REQUIRE(began);
  for (const auto& r : results) {
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("check 0 changes 0"));
    CHECK_THAT(r.output, Catch::Contains("check 1 changes 2 round 1 enabled 1"));
  }
}

TEST_CASE("the state API across ranks: sync gives rank 0's buffers, restore the last commit (C and C++)",
          "[multiprocess][elastic]") {
  JobOptions o;
  o.np = 3;
  o.argv = {buildPath("tests/runtime/scenario_worker"), "state"};
  const auto results = runJob(o);
  INFO(describe(results));
  for (const auto& r : results) {
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("state ok"));
  }
}

namespace {

// The scenario's linear training (scenario_worker elastic_run) recomputed here: sizes[s] ranks ran step s.
std::array<double, 4> linearReference(const std::vector<int>& sizes) {
  std::array<double, 4> w{1, 2, 3, 4};  // rank 0's starting values, which the first sync gives every rank
  for (size_t step = 0; step < sizes.size(); ++step) {
    for (int i = 0; i < 4; ++i) {
      double g = 0;
      for (int r = 0; r < sizes[step]; ++r) g += w[i] - static_cast<double>(r + i + static_cast<int>(step) % 5);
      w[i] -= 0.25 * g / sizes[step];
    }
  }
  return w;
}

void checkFinal(const std::string& output, const std::array<double, 4>& want) {
  const auto at = output.find("final step 12 w ");
  REQUIRE(at != std::string::npos);
  std::istringstream in(output.substr(at + 16));
  for (int i = 0; i < 4; ++i) {
    double got = 0;
    REQUIRE(static_cast<bool>(in >> got));
    INFO("w[" << i << "]");
    CHECK(got == Approx(want[i]).epsilon(1e-12));
  }
}

}  // namespace

TEST_CASE("elastic run loop: a rank SIGKILLed mid-training, the survivors resume from the last commit in round 2",
          "[multiprocess][elastic]") {
  const std::string api = GENERATE("c", "cpp");
  std::mutex mutex;
  std::set<std::string> waiting;
  JobOptions o;
  o.np = 3;
  o.argv = {buildPath("tests/runtime/scenario_worker"), "elastic_run", api};
  o.env = elasticEnv();
  o.timeout = std::chrono::seconds(90);
  o.on_server = [&](Server& server) {
    beginFirstRound(server, 3);
    // The driver's answer to the lost worker: round 2 of the two survivors, once both ask for it.
    server.onRoundRequest([&, srv = &server](const std::string& slot, uint64_t after) {
      std::lock_guard lock(mutex);
      if (after == 1 && waiting.insert(slot).second && waiting.count("localhost:0") && waiting.count("localhost:1")) {
        srv->beginRound(localRound(2, {0, 1}, hvd::rendezvous::kRoundRemoved));
      }
    });
  };
  const auto results = runJob(o);
  INFO(api << " API\n" << describe(results));
  REQUIRE(results[2].signal == SIGKILL);
  for (int r : {0, 1}) {
    REQUIRE(results[r].exit_code == 0);
    CHECK_THAT(results[r].output, Catch::Contains("rank " + std::to_string(r) + " round 2 size 2 resets 1 done"));
  }
  // Steps 0-5 by 3 ranks (committed after step 5), step 6 by 3 ranks but lost with the commit's restore,
  // then steps 6-11 by the 2 survivors.
  std::vector<int> sizes(12, 2);
  for (int s = 0; s < 6; ++s) sizes[s] = 3;
  checkFinal(results[0].output, linearReference(sizes));
}

TEST_CASE("elastic run loop in a static job: no resets, the same training", "[multiprocess][elastic]") {
  JobOptions o;
  o.np = 3;
  o.argv = {buildPath("tests/runtime/scenario_worker"), "elastic_run", "c"};
  const auto results = runJob(o);
  INFO(describe(results));
  for (int r = 0; r < 3; ++r) {
    REQUIRE(results[r].exit_code == 0);
    CHECK_THAT(results[r].output, Catch::Contains("rank " + std::to_string(r) + " round -1 size 3 resets 0 done"));
  }
  checkFinal(results[0].output, linearReference(std::vector<int>(12, 3)));
}

// In this process, as a job of one rank (no HOROVOD_* environment: size 1 over a MemoryStore).
TEST_CASE("the state API at size 1: bad arguments named, commit/restore/sync, the run loop's returns",
          "[elastic][state]") {
  ::unsetenv("HOROVOD_ELASTIC");
  CHECK(hvd_elastic_enabled() == 0);
  CHECK(hvd_elastic_round() == -1);
  int changes = -1;
  CHECK(hvd_elastic_check_host_updates(&changes) == HVD_ERR_NOT_INITIALIZED);
  REQUIRE(hvd_init() == HVD_SUCCESS);
  CHECK(hvd_elastic_check_host_updates(&changes) == 0);  // not elastic: at once
  CHECK(changes == 0);
  CHECK(hvd_elastic_check_host_updates(nullptr) == 0);
  CHECK(hvd_elastic_round() == -1);

  SECTION("bad arguments: HVD_ERR_INVALID_ARGUMENT with a message naming the value") {
    double x = 1;
    CHECK(hvd_state_add(nullptr, "x", &x, sizeof x) == HVD_ERR_INVALID_ARGUMENT);
    CHECK_THAT(hvd_error_text(), Catch::Contains("state is NULL"));
    hvd_state* st = hvd_state_create();
    REQUIRE(st != nullptr);
    CHECK(hvd_state_add(st, nullptr, &x, sizeof x) == HVD_ERR_INVALID_ARGUMENT);
    CHECK_THAT(hvd_error_text(), Catch::Contains("non-empty name (got NULL)"));
    CHECK(hvd_state_add(st, "", &x, sizeof x) == HVD_ERR_INVALID_ARGUMENT);
    CHECK_THAT(hvd_error_text(), Catch::Contains("non-empty name (got \"\")"));
    CHECK(hvd_state_add(st, "weights", nullptr, 64) == HVD_ERR_INVALID_ARGUMENT);
    CHECK_THAT(hvd_error_text(), Catch::Contains("buffer 'weights' of 64 bytes has a NULL data pointer"));
    CHECK(hvd_state_add(st, "x", &x, sizeof x) == HVD_SUCCESS);
    CHECK(hvd_state_add(st, "x", &changes, sizeof changes) == HVD_ERR_INVALID_ARGUMENT);
    CHECK_THAT(hvd_error_text(), Catch::Contains("already has a buffer named 'x' (8 bytes)"));
    CHECK(hvd_state_on_reset(st, nullptr, nullptr) == HVD_ERR_INVALID_ARGUMENT);
    CHECK(hvd_elastic_run(st, nullptr, nullptr) == HVD_ERR_INVALID_ARGUMENT);
    CHECK_THAT(hvd_error_text(), Catch::Contains("training function is NULL"));
    for (auto f : {hvd_state_commit, hvd_state_restore, hvd_state_sync}) CHECK(f(nullptr) == HVD_ERR_INVALID_ARGUMENT);
    hvd_state_free(st);
    hvd_state_free(nullptr);
  }

  SECTION("commit, restore, sync") {
    float w[3] = {1, 2, 3};
    int64_t step = 5;
    hvd_state* st = hvd_state_create();
    REQUIRE(hvd_state_add(st, "w", w, sizeof w) == HVD_SUCCESS);
    REQUIRE(hvd_state_add(st, "step", &step, sizeof step) == HVD_SUCCESS);
    w[0] = 10;
    step = 6;
    REQUIRE(hvd_state_restore(st) == HVD_SUCCESS);  // the values at registration
    CHECK((w[0] == 1 && step == 5));
    w[1] = 20;
    step = 7;
    REQUIRE(hvd_state_commit(st) == HVD_SUCCESS);
    w[1] = 0;
    step = 0;
    REQUIRE(hvd_state_restore(st) == HVD_SUCCESS);
    CHECK((w[1] == 20 && step == 7));
    w[2] = 30;
    REQUIRE(hvd_state_sync(st) == HVD_SUCCESS);  // size 1: keeps the values, and commits them
    w[2] = 0;
    REQUIRE(hvd_state_restore(st) == HVD_SUCCESS);
    CHECK(w[2] == 30);
    hvd_state_free(st);
  }

  SECTION("the run loop returns train's status; a static job never resets") {
    int64_t step = 0;
    int resets = 0;
    hvd_state* st = hvd_state_create();
    REQUIRE(hvd_state_add(st, "step", &step, sizeof step) == HVD_SUCCESS);
    REQUIRE(hvd_state_on_reset(st, [](void* p) { ++*static_cast<int*>(p); }, &resets) == HVD_SUCCESS);
    struct Call {
      int status;
      int calls = 0;
    };
    for (int status : {HVD_SUCCESS, HVD_ERR_MISMATCH, HVD_ERR_PEER_LOST, HVD_ERR_HOSTS_UPDATED}) {
      Call call{status};
      const int got = hvd_elastic_run(
          st,
          [](hvd_state*, void* p) -> int {
            auto* c = static_cast<Call*>(p);
            ++c->calls;
            return c->status;
          },
          &call);
      INFO("train returned " << status);
      CHECK(got == status);
      CHECK(call.calls == 1);
    }
    CHECK(resets == 0);
    CHECK(hvd_is_initialized() == 1);
    hvd_state_free(st);
  }

  SECTION("C++: State, run() rethrowing train's exception as it is, hvd errors by status") {
    std::vector<double> w{1, 2};
    int32_t epoch = 3;
    hvd::elastic::State state;
    state.add("w", w);
    state.add("epoch", epoch);
    CHECK_THROWS_AS(state.add("w", epoch), hvd::InvalidArgumentError);
    std::vector<float> empty;
    state.add("empty", empty);  // no storage: registered as zero bytes
    w[0] = 5;
    state.commit();
    w[0] = 0;
    state.restore();
    CHECK(w[0] == 5);
    struct Custom : std::runtime_error {
      using std::runtime_error::runtime_error;
    };
    CHECK_THROWS_AS(hvd::elastic::run(state, [] { throw Custom("not libhvd's"); }), Custom);
    CHECK_THROWS_AS(hvd::elastic::run(state, [] { hvd::check(HVD_ERR_PEER_LOST); }), hvd::PeerLostError);
    CHECK_THROWS_AS(hvd::elastic::run(state, [] { hvd::check(HVD_ERR_HOSTS_UPDATED); }), hvd::HostsUpdatedError);
    int runs = 0;
    hvd::elastic::run(state, [&] { ++runs; });
    CHECK(runs == 1);
    CHECK_FALSE(hvd::elastic::checkHostUpdates());
  }
  hvd_shutdown();
}

TEST_CASE("examples/elastic_train trains as a static job and as an elastic one, to the same parameters",
          "[multiprocess][elastic]") {
  std::string lines[2];
  for (int elastic = 0; elastic < 2; ++elastic) {
    JobOptions o;
    o.np = 2;
    o.argv = {buildPath("examples/elastic_train"), "200"};
    if (elastic) {
      o.env = elasticEnv();
      o.on_server = [](Server& server) { beginFirstRound(server, 2); };
    }
    const auto results = runJob(o);
    INFO((elastic ? "elastic" : "static") << "\n" << describe(results));
    for (const auto& r : results) REQUIRE(r.exit_code == 0);
    const auto at = results[0].output.find("elastic_train final: step=200 size=2 loss=");
    REQUIRE(at != std::string::npos);
    lines[elastic] = results[0].output.substr(at, results[0].output.find('\n', at) - at);
    CHECK(results[1].output.find("elastic_train final") == std::string::npos);  // rank 0 only
  }
  CHECK(lines[0] == lines[1]);
}
