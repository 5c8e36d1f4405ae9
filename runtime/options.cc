#include "runtime/options.h"

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <strings.h>
#include <tuple>

#include "base/error.h"
#include "rendezvous/token.h"

namespace hvd::runtime {
namespace {

std::optional<std::string> read(const Getenv& getenv, const char* name) {
  const char* v = getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

long long readInt(const Getenv& getenv, const char* name, long long fallback, long long min, long long max) {
  auto v = read(getenv, name);
  if (!v || v->empty()) return fallback;
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  HVD_CHECK(errno == 0 && *end == '\0', UsageError, name, "='", *v, "' is not an integer");
  HVD_CHECK(x >= min && x <= max, UsageError, name, "=", x, " is out of range [", min, ", ", max, "]");
  return x;
}

double readDouble(const Getenv& getenv, const char* name, double fallback, double min) {
  auto v = read(getenv, name);
  if (!v || v->empty()) return fallback;
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  HVD_CHECK(errno == 0 && *end == '\0' && std::isfinite(x), UsageError, name, "='", *v, "' is not a number");
  HVD_CHECK(x >= min, UsageError, name, "=", *v, " must be at least ", min);
  return x;
}

// An integer counts as Horovod's SetBoolFromEnv counts it (strtol(v) > 0); true/false, yes/no and on/off
// (any case) are read as meant, where Horovod reads every word as false ("true" -> strtol -> 0). Any other
// text is an error naming it, not a silent false.
bool readBool(const Getenv& getenv, const char* name, bool fallback) {
  auto v = read(getenv, name);
  if (!v) return fallback;
  const size_t first = v->find_first_not_of(" \t\n");
  if (first == std::string::npos) return fallback;  // empty or blank: unset
  const std::string word = v->substr(first, v->find_last_not_of(" \t\n") - first + 1);
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(word.c_str(), &end, 10);  // out of range: clamped, as strtol does
  if (end != word.c_str() && *end == '\0') return x > 0;
  for (const char* yes : {"true", "yes", "on"}) {
    if (strcasecmp(word.c_str(), yes) == 0) return true;
  }
  for (const char* no : {"false", "no", "off"}) {
    if (strcasecmp(word.c_str(), no) == 0) return false;
  }
  throw UsageError(detail::concat(name, "='", *v, "' is not a boolean (1 or 0, true or false, yes or no, on or off)"));
}

// Horovod turns an unknown level into WARNING without a word; a typo here is an error naming it.
LogLevel parseLogLevel(const std::optional<std::string>& v) {
  if (!v || v->empty()) return LogLevel::kWarning;
  static const std::pair<const char*, LogLevel> kLevels[] = {
      {"trace", LogLevel::kTrace}, {"debug", LogLevel::kDebug},     {"info", LogLevel::kInfo},
      {"warning", LogLevel::kWarning}, {"error", LogLevel::kError}, {"fatal", LogLevel::kFatal}};
  for (const auto& [text, level] : kLevels) {
    if (strcasecmp(v->c_str(), text) == 0) return level;
  }
  throw UsageError(detail::concat("HOROVOD_LOG_LEVEL='", *v,
                                  "' is not one of trace, debug, info, warning, error, fatal (any case)"));
}

// HVD_RENDEZVOUS: "HOST:PORT", "[IPV6]:PORT".
std::pair<std::string, int> parseRendezvous(const std::string& v) {
  auto bad = [&](const char* why) {
    return UsageError(detail::concat("HVD_RENDEZVOUS='", v, "' is not HOST:PORT (", why, ")"));
  };
  std::string host, port;
  if (!v.empty() && v.front() == '[') {
    const size_t close = v.find(']');
    if (close == std::string::npos || close + 1 >= v.size() || v[close + 1] != ':') {
      throw bad("an IPv6 address goes in brackets: [::1]:29500");
    }
    host = v.substr(1, close - 1);
    port = v.substr(close + 2);
  } else {
    const size_t colon = v.find(':');
    if (colon == std::string::npos) throw bad("no port");
    if (v.find(':', colon + 1) != std::string::npos) throw bad("an IPv6 address goes in brackets: [::1]:29500");
    host = v.substr(0, colon);
    port = v.substr(colon + 1);
  }
  if (host.empty()) throw bad("no host");
  errno = 0;
  char* end = nullptr;
  const long long p = std::strtoll(port.c_str(), &end, 10);
  if (port.empty() || errno != 0 || *end != '\0' || p < 1 || p > 65535) throw bad("the port must be 1..65535");
  return {host, static_cast<int>(p)};
}

bool isSet(const Getenv& getenv, const char* name) {
  auto v = read(getenv, name);
  return v && !v->empty();
}

}  // namespace

RuntimeOptions RuntimeOptions::fromEnvironment(const Getenv& getenv) {
  RuntimeOptions o;
  constexpr long long kMaxRanks = 1 << 24;
  // hvdrun's and horovodrun's HOROVOD_RANK wins over any launcher's variables: hvdrun may itself run in an
  // srun step or under mpirun, and its workers inherit those variables.
  if (!isSet(getenv, "HOROVOD_RANK")) o.launcher = launcherIdentity(getenv);
  if (o.launcher) {
    for (const char* name : {"HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
                             "HOROVOD_CROSS_SIZE"}) {
      if (isSet(getenv, name)) {
        throw UsageError(detail::concat(name, "=", *read(getenv, name), " is set without HOROVOD_RANK while ",
                                        launcherName(o.launcher->launcher), " started this process (",
                                        o.launcher->described, "): set every HOROVOD_ identity variable or none"));
      }
    }
    o.rank = o.launcher->rank;
    o.size = o.launcher->size;
    o.hostname = launcherHostName(getenv);
  } else {
    o.rank = static_cast<int>(readInt(getenv, "HOROVOD_RANK", 0, 0, kMaxRanks));
    o.size = static_cast<int>(readInt(getenv, "HOROVOD_SIZE", 1, 1, kMaxRanks));
    o.local_rank = static_cast<int>(readInt(getenv, "HOROVOD_LOCAL_RANK", 0, 0, kMaxRanks));
    o.local_size = static_cast<int>(readInt(getenv, "HOROVOD_LOCAL_SIZE", 1, 1, kMaxRanks));
    o.cross_rank = static_cast<int>(readInt(getenv, "HOROVOD_CROSS_RANK", 0, 0, kMaxRanks));
    o.cross_size = static_cast<int>(readInt(getenv, "HOROVOD_CROSS_SIZE", 1, 1, kMaxRanks));
    if (auto h = read(getenv, "HOROVOD_HOSTNAME"); h && !h->empty()) o.hostname = *h;
  }
  o.slot_local_rank = o.local_rank;

  // The pair hvdrun and horovodrun set wins: their workers may inherit a job script's HVD_RENDEZVOUS.
  if (auto a = read(getenv, "HOROVOD_GLOO_RENDEZVOUS_ADDR"); a && !a->empty()) {
    o.rendezvous_addr = *a;
    o.rendezvous_port = static_cast<int>(readInt(getenv, "HOROVOD_GLOO_RENDEZVOUS_PORT", -1, -1, 65535));
  } else if (auto r = read(getenv, "HVD_RENDEZVOUS"); r && !r->empty()) {
    std::tie(o.rendezvous_addr, o.rendezvous_port) = parseRendezvous(*r);
  } else {
    o.rendezvous_port = static_cast<int>(readInt(getenv, "HOROVOD_GLOO_RENDEZVOUS_PORT", -1, -1, 65535));
  }
  if (auto t = read(getenv, rendezvous::kTokenEnv); t && !t->empty()) o.token = *t;

  if (auto i = read(getenv, "HOROVOD_GLOO_IFACE"); i) o.iface = *i;
  o.gloo_timeout = std::chrono::seconds(readInt(getenv, "HOROVOD_GLOO_TIMEOUT_SECONDS", 30, 1, 1 << 24));

  o.fusion_threshold =
      static_cast<size_t>(readInt(getenv, "HOROVOD_FUSION_THRESHOLD", o.fusion_threshold, 0, 1ll << 40));
  o.cycle_time = std::chrono::microseconds(
      static_cast<long long>(readDouble(getenv, "HOROVOD_CYCLE_TIME", 1.0, 0.0) * 1000.0));
  o.cache_capacity = static_cast<size_t>(readInt(getenv, "HOROVOD_CACHE_CAPACITY", 1024, 0, 1 << 24));

  if (auto t = read(getenv, "HOROVOD_TIMELINE"); t && !t->empty()) o.timeline_path = *t;
  o.timeline_mark_cycles = readBool(getenv, "HOROVOD_TIMELINE_MARK_CYCLES", false);

  o.stall_check = !readBool(getenv, "HOROVOD_STALL_CHECK_DISABLE", false);
  o.stall_warning_time = std::chrono::milliseconds(
      static_cast<long long>(readDouble(getenv, "HOROVOD_STALL_CHECK_TIME_SECONDS", 60.0, 0.0) * 1000.0));
  o.stall_shutdown_time = std::chrono::milliseconds(
      static_cast<long long>(readDouble(getenv, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", 0.0, 0.0) * 1000.0));

  o.dynamic_process_sets = readBool(getenv, "HOROVOD_DYNAMIC_PROCESS_SETS", false);
  o.log_level = parseLogLevel(read(getenv, "HOROVOD_LOG_LEVEL"));
  o.gpu_pinning = !readBool(getenv, "HVD_DISABLE_GPU_PINNING", false);
  o.shared_memory = readBool(getenv, "HVD_SHARED_MEMORY", true);
  o.shm_single_copy = readBool(getenv, "HVD_SHM_SINGLE_COPY", true);
  o.shm_eager_broadcast = readBool(getenv, "HVD_SHM_EAGER_BROADCAST", false);
  if (auto h = read(getenv, "HOROVOD_HIERARCHICAL_ALLREDUCE"); h && !h->empty()) {
    o.hierarchical_allreduce = readBool(getenv, "HOROVOD_HIERARCHICAL_ALLREDUCE", false);
  }
  o.hierarchical_allgather = readBool(getenv, "HOROVOD_HIERARCHICAL_ALLGATHER", false);
  o.autotune = readBool(getenv, "HOROVOD_AUTOTUNE", false);
  {
    AutotuneOptions& a = o.autotune_options;
    if (auto l = read(getenv, "HOROVOD_AUTOTUNE_LOG"); l && !l->empty()) a.log_path = *l;
    a.warmup_samples = static_cast<int>(readInt(getenv, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", 3, 0, 1 << 20));
    a.steps_per_sample = static_cast<int>(readInt(getenv, "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", 10, 1, 1 << 20));
    a.max_samples = static_cast<int>(readInt(getenv, "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", 20, 1, 1 << 20));
    // Horovod's Gaussian-process noise: validated as Horovod does, unused by this tuner (no Gaussian process).
    const double noise = readDouble(getenv, "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", 0.8, 0.0);
    HVD_CHECK(noise <= 1.0, UsageError, "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=", noise, " must be in [0, 1]");
    auto set = [&](const char* name) {
      auto v = read(getenv, name);
      return v && !v->empty();
    };
    a.tune_fusion = !set("HOROVOD_FUSION_THRESHOLD");
    a.tune_cycle_time = !set("HOROVOD_CYCLE_TIME");
    a.tune_hierarchical = !set("HOROVOD_HIERARCHICAL_ALLREDUCE");  // and only where possible (Runtime decides)
    a.cache_enabled = o.cache_capacity > 0;
  }
  if (const auto us = readInt(getenv, "HVD_BUSY_POLL_US", -1, 0, 1000000); us >= 0) {
    o.busy_poll = std::chrono::microseconds(us);
  }
  o.wait_drives = readBool(getenv, "HVD_WAIT_DRIVES", true);
  o.move_threads = readBool(getenv, "HVD_MOVE_THREADS", true);
  o.shm_agreement = readBool(getenv, "HVD_FAST_PATH", true);
  {
    // Fractions allowed; a positive value rounds up to whole milliseconds, so it never turns reports off.
    const double seconds = readDouble(getenv, "HVD_REPORT_INTERVAL_SECONDS", 1.0, 0.0);
    HVD_CHECK(seconds <= 86400, UsageError, "HVD_REPORT_INTERVAL_SECONDS=", *read(getenv, "HVD_REPORT_INTERVAL_SECONDS"),
              " is more than a day (0 turns reports off)");
    o.report_interval = std::chrono::milliseconds(static_cast<long long>(std::ceil(seconds * 1000.0)));
  }
  if (isSet(getenv, "HVD_WORKER_ID")) {
    o.worker_id = static_cast<int>(readInt(getenv, "HVD_WORKER_ID", 0, 0, kMaxRanks));
  }
  o.elastic = readBool(getenv, "HOROVOD_ELASTIC", false);
  o.elastic_round = static_cast<uint64_t>(readInt(getenv, "HVD_ELASTIC_ROUND", 0, 0, 1ll << 40));
  o.elastic_standby = o.elastic && readBool(getenv, "HVD_ELASTIC_STANDBY", false);
  o.elastic_timeout = std::chrono::seconds(readInt(getenv, "HOROVOD_ELASTIC_TIMEOUT", 600, 1, 1 << 24));
  o.validate();
  if (o.launcher) {
    if (o.size > 1 && !o.rendezvous_addr) {
      throw UsageError(detail::concat(launcherName(o.launcher->launcher), " started ", o.size, " ranks (",
                                      o.launcher->described, ") but no rendezvous server is set: start "
                                      "hvd-rendezvous and give the workers HVD_RENDEZVOUS=HOST:PORT (and "
                                      "HVD_RENDEZVOUS_TOKEN)"));
    }
    if (o.elastic) {
      throw UsageError(detail::concat("HOROVOD_ELASTIC=1 needs hvdrun's elastic driver, but ",
                                      launcherName(o.launcher->launcher), " started this process (",
                                      o.launcher->described, ")"));
    }
  }
  HVD_CHECK(o.size == 1 || o.rendezvous_addr.has_value(), UsageError, "HOROVOD_SIZE=", o.size,
            " but HOROVOD_GLOO_RENDEZVOUS_ADDR is not set: a multi-process job needs the rendezvous "
            "server (start workers with hvdrun, or set HOROVOD_GLOO_RENDEZVOUS_ADDR and "
            "HOROVOD_GLOO_RENDEZVOUS_PORT, or HVD_RENDEZVOUS=HOST:PORT)");
  return o;
}

void RuntimeOptions::numberByHost(rendezvous::Store& store) {
  if (!launcher) return;
  // Each init of the process is a new exchange (every rank initializes as often as the others); the
  // launcher's job id keeps two jobs on one rendezvous server apart.
  static std::atomic<uint64_t> inits{0};
  std::string scope = launcher->job.empty() ? detail::concat("hvd_hosts.", inits++)
                                             : detail::concat("hvd_hosts.", launcher->job, ".", inits++);
  for (char& c : scope) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  HostEntry mine;
  static_cast<HostClaim&>(mine) = *launcher;
  mine.host = hostname;
  const HostNumbers n = exchangeHosts(store, scope, rank, size, mine, rendezvousTimeout());
  local_rank = slot_local_rank = n.local_rank;
  local_size = n.local_size;
  cross_rank = n.cross_rank;
  cross_size = n.cross_size;
  validate();
}

RuntimeOptions RuntimeOptions::fromEnvironment() {
  return fromEnvironment([](const char* name) { return std::getenv(name); });
}

void RuntimeOptions::validate() const {
  HVD_CHECK(rank < size, UsageError, "HOROVOD_RANK=", rank, " is not below HOROVOD_SIZE=", size);
  HVD_CHECK(local_rank < local_size, UsageError, "HOROVOD_LOCAL_RANK=", local_rank,
            " is not below HOROVOD_LOCAL_SIZE=", local_size);
  HVD_CHECK(cross_rank < cross_size, UsageError, "HOROVOD_CROSS_RANK=", cross_rank,
            " is not below HOROVOD_CROSS_SIZE=", cross_size);
  HVD_CHECK(local_size <= size && cross_size <= size, UsageError, "HOROVOD_LOCAL_SIZE=", local_size,
            " and HOROVOD_CROSS_SIZE=", cross_size, " cannot exceed HOROVOD_SIZE=", size);
  if (rendezvous_addr) {
    HVD_CHECK(rendezvous_port > 0, UsageError, "HOROVOD_GLOO_RENDEZVOUS_ADDR=", *rendezvous_addr,
              " needs HOROVOD_GLOO_RENDEZVOUS_PORT (got ", rendezvous_port, ")");
  }
}

}  // namespace hvd::runtime
