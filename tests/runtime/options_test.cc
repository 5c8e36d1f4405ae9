// RuntimeOptions::fromEnvironment: defaults, parsing, and one clear error per bad value.
#include <catch2/catch.hpp>

#include <string>

#include "base/error.h"
#include "runtime/options.h"
#include "tests/runtime/options_env.h"

using hvd::runtime::LogLevel;
using namespace hvd::test;  // Env, parse

TEST_CASE("no variables: Horovod's defaults, a single process", "[options]") {
  const auto o = parse({});
  CHECK(o.rank == 0);
  CHECK(o.size == 1);
  CHECK(o.hostname == "localhost");
  CHECK(!o.rendezvous_addr);
  CHECK(o.gloo_timeout == std::chrono::seconds(30));
  CHECK(o.fusion_threshold == 1u << 20);  // Horovod: 128 MiB (docs/runtime.md says why not)
  CHECK(o.cycle_time == std::chrono::microseconds(1000));
  CHECK(o.cache_capacity == 1024);
  CHECK(o.stall_check);
  CHECK(o.stall_warning_time == std::chrono::seconds(60));
  CHECK(o.log_level == LogLevel::kWarning);
  CHECK(o.gpu_pinning);
}

TEST_CASE("every variable is read", "[options]") {
  const auto o = parse({{"HOROVOD_RANK", "3"},
                        {"HOROVOD_SIZE", "8"},
                        {"HOROVOD_LOCAL_RANK", "1"},
                        {"HOROVOD_LOCAL_SIZE", "2"},
                        {"HOROVOD_CROSS_RANK", "1"},
                        {"HOROVOD_CROSS_SIZE", "4"},
                        {"HOROVOD_HOSTNAME", "node7"},
                        {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.0.0.1"},
                        {"HOROVOD_GLOO_RENDEZVOUS_PORT", "4321"},
                        {"HVD_RENDEZVOUS_TOKEN", "secret"},
                        {"HOROVOD_GLOO_IFACE", "eth1"},
                        {"HOROVOD_GLOO_TIMEOUT_SECONDS", "90"},
                        {"HOROVOD_FUSION_THRESHOLD", "0"},
                        {"HOROVOD_CYCLE_TIME", "2.5"},
                        {"HOROVOD_CACHE_CAPACITY", "0"},
                        {"HOROVOD_TIMELINE", "/tmp/t.json"},
                        {"HOROVOD_TIMELINE_MARK_CYCLES", "1"},
                        {"HOROVOD_STALL_CHECK_DISABLE", "1"},
                        {"HOROVOD_STALL_CHECK_TIME_SECONDS", "5"},
                        {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "7.5"},
                        {"HOROVOD_LOG_LEVEL", "DEBUG"},
                        {"HVD_DISABLE_GPU_PINNING", "1"},
                        {"HVD_BUSY_POLL_US", "0"},
                        {"HVD_WAIT_DRIVES", "0"},
                        {"HVD_MOVE_THREADS", "off"},
                        {"HVD_FAST_PATH", "0"},
                        {"HVD_SHM_SINGLE_COPY", "no"},
                        {"HVD_SHM_EAGER_BROADCAST", "1"},
                        {"HOROVOD_AUTOTUNE", "1"},
                        {"HOROVOD_AUTOTUNE_LOG", "/tmp/at.csv"},
                        {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "0"},
                        {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "7"},
                        {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "9"},
                        {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.5"}});
  CHECK(o.rank == 3);
  CHECK(o.size == 8);
  CHECK(o.local_rank == 1);
  CHECK(o.cross_size == 4);
  CHECK(o.hostname == "node7");
  CHECK(*o.rendezvous_addr == "10.0.0.1");
  CHECK(o.rendezvous_port == 4321);
  CHECK(*o.token == "secret");
  CHECK(o.iface == "eth1");
  CHECK(o.gloo_timeout == std::chrono::seconds(90));
  CHECK(o.fusion_threshold == 0);
  CHECK(o.cycle_time == std::chrono::microseconds(2500));
  CHECK(o.cache_capacity == 0);
  CHECK(*o.timeline_path == "/tmp/t.json");
  CHECK(o.timeline_mark_cycles);
  CHECK(!o.stall_check);
  CHECK(o.stall_warning_time == std::chrono::seconds(5));
  CHECK(o.stall_shutdown_time == std::chrono::milliseconds(7500));
  CHECK(o.log_level == LogLevel::kDebug);
  CHECK(!o.gpu_pinning);
  CHECK(o.busy_poll == std::chrono::microseconds(0));
  CHECK_FALSE(o.wait_drives);
  CHECK_FALSE(o.move_threads);
  CHECK_FALSE(o.shm_agreement);
  CHECK_FALSE(o.shm_single_copy);
  CHECK(o.shm_eager_broadcast);
  CHECK_FALSE(parse({}).shm_eager_broadcast);
  CHECK(parse({}).wait_drives);
  CHECK(parse({}).move_threads);
  CHECK(parse({}).shm_agreement);
  CHECK(parse({}).shm_single_copy);
  CHECK(!parse({}).busy_poll.has_value());  // unset: decided by the ranks per host against the cores
  // Unset: hierarchical where the job can run it; set: as set.
  CHECK(!parse({}).hierarchical_allreduce.has_value());
  CHECK(parse({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "0"}}).hierarchical_allreduce == false);
  CHECK(parse({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}}).hierarchical_allreduce == true);
  CHECK(parse({{"HOROVOD_HIERARCHICAL_ALLGATHER", "1"}}).hierarchical_allgather);
  CHECK(o.autotune);
  CHECK(*o.autotune_options.log_path == "/tmp/at.csv");
  CHECK(o.autotune_options.warmup_samples == 0);
  CHECK(o.autotune_options.steps_per_sample == 7);
  CHECK(o.autotune_options.max_samples == 9);
  // Set explicitly: fusion and cycle time stay as set; the path may be tuned; the cache is off.
  CHECK(!o.autotune_options.tune_fusion);
  CHECK(!o.autotune_options.tune_cycle_time);
  CHECK(o.autotune_options.tune_hierarchical);
  CHECK(!o.autotune_options.cache_enabled);
  const auto d = parse({{"HOROVOD_AUTOTUNE", "1"}, {"HOROVOD_HIERARCHICAL_ALLREDUCE", "0"}});
  CHECK((d.autotune_options.tune_fusion && d.autotune_options.tune_cycle_time && !d.autotune_options.tune_hierarchical));
  CHECK(d.autotune_options.warmup_samples == 3);
  CHECK(d.autotune_options.steps_per_sample == 10);
  CHECK(d.autotune_options.max_samples == 20);
}

TEST_CASE("HVD_REPORT_INTERVAL_SECONDS: 1 s by default, fractions, 0 for none; HVD_WORKER_ID", "[options]") {
  CHECK(parse({}).report_interval == std::chrono::milliseconds(1000));
  CHECK(!parse({}).worker_id);
  CHECK(parse({{"HVD_REPORT_INTERVAL_SECONDS", "0.25"}}).report_interval == std::chrono::milliseconds(250));
  CHECK(parse({{"HVD_REPORT_INTERVAL_SECONDS", "0"}}).report_interval == std::chrono::milliseconds(0));
  // A tiny positive interval rounds up: it never turns reports off.
  CHECK(parse({{"HVD_REPORT_INTERVAL_SECONDS", "0.0001"}}).report_interval == std::chrono::milliseconds(1));
  CHECK(parse({{"HVD_REPORT_INTERVAL_SECONDS", "30"}}).report_interval == std::chrono::seconds(30));
  CHECK(parse({{"HVD_WORKER_ID", "7"}}).worker_id == 7);
}

TEST_CASE("bad values: one error naming the variable and the value", "[options]") {
  const std::vector<std::pair<Env, std::string>> cases = {
      {{{"HOROVOD_RANK", "abc"}}, "HOROVOD_RANK='abc' is not an integer"},
      {{{"HOROVOD_SIZE", "0"}}, "HOROVOD_SIZE=0 is out of range"},
      {{{"HOROVOD_RANK", "2"},
        {"HOROVOD_SIZE", "2"},
        {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "h"},
        {"HOROVOD_GLOO_RENDEZVOUS_PORT", "1"}},
       "HOROVOD_RANK=2 is not below HOROVOD_SIZE=2"},
      {{{"HOROVOD_LOCAL_RANK", "1"}}, "HOROVOD_LOCAL_RANK=1 is not below HOROVOD_LOCAL_SIZE=1"},
      {{{"HOROVOD_SIZE", "2"}}, "HOROVOD_SIZE=2 but HOROVOD_GLOO_RENDEZVOUS_ADDR is not set"},
      {{{"HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.0.0.1"}},
       "HOROVOD_GLOO_RENDEZVOUS_ADDR=10.0.0.1 needs HOROVOD_GLOO_RENDEZVOUS_PORT (got -1)"},
      {{{"HOROVOD_GLOO_RENDEZVOUS_PORT", "70000"}}, "HOROVOD_GLOO_RENDEZVOUS_PORT=70000 is out of range"},
      {{{"HOROVOD_GLOO_TIMEOUT_SECONDS", "0"}}, "HOROVOD_GLOO_TIMEOUT_SECONDS=0 is out of range"},
      {{{"HOROVOD_CYCLE_TIME", "-1"}}, "HOROVOD_CYCLE_TIME=-1 must be at least 0"},
      {{{"HOROVOD_CYCLE_TIME", "fast"}}, "HOROVOD_CYCLE_TIME='fast' is not a number"},
      {{{"HOROVOD_FUSION_THRESHOLD", "64MB"}}, "HOROVOD_FUSION_THRESHOLD='64MB' is not an integer"},
      {{{"HOROVOD_STALL_CHECK_TIME_SECONDS", "nan"}},
       "HOROVOD_STALL_CHECK_TIME_SECONDS='nan' is not a number"},
      // Horovod reads both as a silent default (WARNING; false).
      {{{"HOROVOD_LOG_LEVEL", "verbose"}},
       "HOROVOD_LOG_LEVEL='verbose' is not one of trace, debug, info, warning, error, fatal (any case)"},
      {{{"HOROVOD_TIMELINE_MARK_CYCLES", "enabled"}},
       "HOROVOD_TIMELINE_MARK_CYCLES='enabled' is not a boolean (1 or 0, true or false, yes or no, on or "
       "off)"},
      {{{"HOROVOD_STALL_CHECK_DISABLE", "1x"}}, "HOROVOD_STALL_CHECK_DISABLE='1x' is not a boolean"},
      {{{"HVD_DISABLE_GPU_PINNING", "y"}}, "HVD_DISABLE_GPU_PINNING='y' is not a boolean"},
      {{{"HVD_BUSY_POLL_US", "-5"}}, "HVD_BUSY_POLL_US=-5 is out of range [0, 1000000]"},
      {{{"HVD_WAIT_DRIVES", "sometimes"}}, "HVD_WAIT_DRIVES='sometimes' is not a boolean"},
      {{{"HVD_MOVE_THREADS", "apart"}}, "HVD_MOVE_THREADS='apart' is not a boolean"},
      {{{"HVD_SHM_SINGLE_COPY", "off!"}}, "HVD_SHM_SINGLE_COPY='off!' is not a boolean"},
      {{{"HVD_SHM_EAGER_BROADCAST", "eager"}}, "HVD_SHM_EAGER_BROADCAST='eager' is not a boolean"},
      {{{"HOROVOD_AUTOTUNE", "maybe"}}, "HOROVOD_AUTOTUNE='maybe' is not a boolean"},
      {{{"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "0"}}, "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE=0 is out of range"},
      {{{"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "x"}}, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES='x' is not an integer"},
      {{{"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "1.5"}},
       "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=1.5 must be in [0, 1]"},
      {{{"HVD_REPORT_INTERVAL_SECONDS", "1s"}}, "HVD_REPORT_INTERVAL_SECONDS='1s' is not a number"},
      {{{"HVD_REPORT_INTERVAL_SECONDS", "-0.5"}}, "HVD_REPORT_INTERVAL_SECONDS=-0.5 must be at least 0"},
      {{{"HVD_REPORT_INTERVAL_SECONDS", "1e6"}}, "HVD_REPORT_INTERVAL_SECONDS=1e6 is more than a day"},
      {{{"HVD_WORKER_ID", "w3"}}, "HVD_WORKER_ID='w3' is not an integer"},
  };
  for (const auto& [env, message] : cases) {
    INFO(message);
    hvd::test::requireUsageError(env, message);
  }
}

TEST_CASE("booleans: integers as Horovod reads them, words as meant", "[options]") {
  for (const auto& [text, want] : std::vector<std::pair<std::string, bool>>{
           {"1", true}, {"2", true}, {"0", false}, {"-1", false}, {"true", true}, {"TRUE", true}, {"yes", true},
           {"On", true}, {"false", false}, {"No", false}, {"off", false}, {"", false}, {" ", false},
           {"1 ", true}, {" true\n", true}, {"99999999999999999999", true}}) {
    INFO(text);
    CHECK(parse(Env{{"HOROVOD_TIMELINE_MARK_CYCLES", text}}).timeline_mark_cycles == want);
  }
  CHECK(parse(Env{{"HOROVOD_LOG_LEVEL", ""}}).log_level == hvd::runtime::LogLevel::kWarning);
  CHECK(parse(Env{{"HOROVOD_LOG_LEVEL", "Info"}}).log_level == hvd::runtime::LogLevel::kInfo);
}
