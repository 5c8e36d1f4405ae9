// The autotuner's search, by a synthetic job whose speed depends on the parameters it is given.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <unistd.h>

#include "runtime/autotune.h"
#include "tests/common/files.h"

using namespace hvd::runtime;
using namespace std::chrono_literals;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

// The tuner's options with `warmup` warm-up samples and `steps` steps per sample; the rest as
// AutotuneOptions has them.
AutotuneOptions sampling(int warmup, int steps) {
  AutotuneOptions o;
  o.warmup_samples = warmup;
  o.steps_per_sample = steps;
  return o;
}

// Runs steps of two allreduces (16 MiB of bytes per step) whose duration speed(params) gives, feeding
// the tuner as the coordinator would, until it is done or max_steps ran. Returns the steps run.
int runJob(Autotuner& tuner, const std::function<std::chrono::microseconds(const TunableParams&)>& step_time,
           int max_steps = 1000) {
  auto now = Autotuner::Clock::time_point{} + 1s;
  TunableParams params = tuner.current();
  int steps = 0;
  while (!tuner.done() && steps < max_steps) {
    ++steps;
    now += step_time(params) / 2;
    if (auto p = tuner.record({"grad.a"}, 8 * kMiB, now)) params = *p;
    now += step_time(params) / 2;
    if (auto p = tuner.record({"grad.b"}, 8 * kMiB, now)) params = *p;
    REQUIRE(params == tuner.current());
  }
  return steps;
}

}  // namespace

TEST_CASE("autotune finds the fastest fusion threshold and cycle time, and logs Horovod's CSV", "[autotune]") {
  const std::string log = "/tmp/hvd_autotune_test_" + std::to_string(::getpid()) + ".csv";
  AutotuneOptions o = sampling(2, 3);
  o.max_samples = 20;
  o.log_path = log;
  const TunableParams start{kMiB, 1000us, false};
  Autotuner tuner(o, start);
  REQUIRE(tuner.logOpen());
  // 4 MiB and no window are fastest; everything else costs more.
  runJob(tuner, [](const TunableParams& p) {
    auto t = 1000us;
    if (p.fusion_threshold != 4 * kMiB) t += 300us;
    if (p.cycle_time != 0us) t += 200us;
    return t;
  });
  REQUIRE(tuner.done());
  CHECK(tuner.current() == TunableParams{4 * kMiB, 0us, false});
  // After the warm-up: 1 start + 4 fusion + 3 cycle-time candidates + 4 confirmation samples.
  CHECK(tuner.samples() == 1 + 4 + 3 + 4);
  const std::string csv = hvd::test::readFile(log);
  std::remove(log.c_str());
  CHECK(csv.rfind("hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,"
                  "tensor_fusion_threshold,score\n",
                  0) == 0);
  CHECK(csv.find("\n0,0,0,1,1,1,") != std::string::npos);  // the start: 1 ms, 1 MB
  // The last row holds the parameters kept.
  const auto last = csv.rfind("\n", csv.size() - 2);
  CHECK(csv.substr(last + 1, 12) == "0,0,0,1,0,4,");
  CHECK(tuner.summary().find("kept the tuned parameters") != std::string::npos);
}

TEST_CASE("autotune never keeps parameters that lose to the starting ones", "[autotune]") {
  AutotuneOptions o = sampling(0, 2);
  o.tune_cycle_time = false;
  Autotuner tuner(o, TunableParams{kMiB, 1000us, false});
  // A job where 16 MiB looks fast exactly once (a lucky sample), then is slow: the confirmation sees it.
  int calls16 = 0;
  runJob(tuner, [&](const TunableParams& p) {
    if (p.fusion_threshold == 16 * kMiB) return ++calls16 <= 2 ? 500us : 3000us;
    return 1000us;
  });
  REQUIRE(tuner.done());
  CHECK(tuner.current() == TunableParams{kMiB, 1000us, false});
  CHECK(tuner.summary().find("kept the starting parameters") != std::string::npos);
}

TEST_CASE("autotune: the path is searched only when allowed, and the budget is respected", "[autotune]") {
  AutotuneOptions o = sampling(1, 1);
  o.tune_fusion = false;
  o.tune_cycle_time = false;
  o.tune_hierarchical = true;
  {
    Autotuner tuner(o, TunableParams{kMiB, 1000us, false});
    runJob(tuner, [](const TunableParams& p) { return p.hierarchical ? 500us : 1000us; });
    CHECK(tuner.current().hierarchical);
  }
  o.tune_hierarchical = false;
  {
    Autotuner tuner(o, TunableParams{kMiB, 1000us, false});
    runJob(tuner, [](const TunableParams& p) { return p.hierarchical ? 500us : 1000us; });
    CHECK(!tuner.current().hierarchical);
    CHECK(tuner.samples() == 1);  // the start's score: nothing to search
  }
  o.tune_fusion = true;
  o.tune_cycle_time = true;
  o.max_samples = 6;  // room for 1 start + 1 candidate + 4 confirmation samples
  {
    Autotuner tuner(o, TunableParams{kMiB, 1000us, false});
    runJob(tuner, [](const TunableParams& p) { return p.fusion_threshold == 256 * 1024 ? 500us : 1000us; });
    CHECK(tuner.samples() <= 6);
    CHECK(tuner.current().fusion_threshold == 256 * 1024);
  }
}
