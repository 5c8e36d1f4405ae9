#include "launcher/cli.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>
#include <boost/program_options.hpp>

#include "hvd/config.h"
#include "launcher/usage.h"
#include "rendezvous/token.h"

extern char** environ;

namespace hvd::launcher {

namespace po = boost::program_options;

Environment currentEnvironment() {
  Environment env;
  for (char** it = environ; it && *it; ++it) {
    const std::string entry = *it;
    const auto eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

const std::string* findEnv(const Environment& env, const std::string& name) {
  for (const auto& [key, value] : env) {
    if (key == name) return &value;
  }
  return nullptr;
}

bool isReservedVariable(const std::string& name) {
  static const std::set<std::string> kReserved = {"HOROVOD_HOSTNAME",
                                                  "HOROVOD_RANK",
                                                  "HOROVOD_SIZE",
                                                  "HOROVOD_LOCAL_RANK",
                                                  "HOROVOD_LOCAL_SIZE",
                                                  "HOROVOD_CROSS_RANK",
                                                  "HOROVOD_CROSS_SIZE",
                                                  "HOROVOD_CONTROLLER",
                                                  "HOROVOD_CPU_OPERATIONS",
                                                  "HOROVOD_GLOO_IFACE",
                                                  "NCCL_SOCKET_IFNAME",
                                                  "HOROVOD_GLOO_RENDEZVOUS_ADDR",
                                                  "HOROVOD_GLOO_RENDEZVOUS_PORT",
                                                  rendezvous::kTokenEnv};
  return kReserved.count(name) > 0;
}

std::string usageHint() { return "Try 'hvdrun --help' for the flags and examples."; }

namespace {

// ---------------------------------------------------------------------------------------------------------
// The flag table. Boost.Program_options holds names, arity and help text; the canonical key of an option
// is its first long name. horovodrun's single-dash long spellings map onto those keys.

const std::map<std::string, std::string> kSingleDashLong = {
    {"np", "num-proc"},
    {"cb", "check-build"},
    {"hostfile", "hostfile"},
    {"prefix-timestamp", "prefix-output-with-timestamp"},
};

// Options that collect every occurrence; all other valued options keep the last one (argparse).
const std::set<std::string> kRepeatable = {"env", "network-interface", "network-interfaces"};

// Flags that come in on/off pairs: the later one on the command line wins. Key: flag -> (setting, value).
const std::map<std::string, std::pair<std::string, bool>> kSwitches = {
    {"hierarchical-allreduce", {"hierarchical-allreduce", true}},
    {"no-hierarchical-allreduce", {"hierarchical-allreduce", false}},
    {"hierarchical-allgather", {"hierarchical-allgather", true}},
    {"no-hierarchical-allgather", {"hierarchical-allgather", false}},
    {"torus-allreduce", {"torus-allreduce", true}},
    {"shared-memory", {"shared-memory", true}},
    {"no-shared-memory", {"shared-memory", false}},
    {"no-torus-allreduce", {"torus-allreduce", false}},
    {"autotune", {"autotune", true}},
    {"no-autotune", {"autotune", false}},
    {"timeline-mark-cycles", {"timeline-mark-cycles", true}},
    {"no-timeline-mark-cycles", {"timeline-mark-cycles", false}},
    {"no-stall-check", {"no-stall-check", true}},
    {"stall-check", {"no-stall-check", false}},
    {"mpi-threads-disable", {"mpi-threads-disable", true}},
    {"no-mpi-threads-disable", {"mpi-threads-disable", false}},
    {"log-without-timestamp", {"log-without-timestamp", true}},
    {"log-with-timestamp", {"log-without-timestamp", false}},
    {"log-hide-timestamp", {"log-without-timestamp", true}},
    {"no-log-hide-timestamp", {"log-without-timestamp", false}},
};

// One option per line reads better than the formatter's packing of the add_options() chain.
// clang-format off
po::options_description makeDescription() {
  po::options_description all("hvdrun options");
  const auto value = [] { return po::value<std::string>()->value_name("ARG"); };

  po::options_description general("General");
  general.add_options()
      ("help,h", "show this help and exit")
      ("version,v", "print the version and exit")
      ("num-proc", value()->value_name("N"), "-np N: total number of worker processes (required)")
      ("check-build", "-cb: print the available controllers and operations and exit")
      ("hosts,H", value()->value_name("LIST"),
       "hosts and slots: host1:2,user@host2:4,[fe80::1]:2 (slots default to 1)")
      ("hostfile", value()->value_name("FILE"),
       "-hostfile FILE: lines 'host slots=N [max_slots=M]', # comments allowed")
      ("slots-per-host", value()->value_name("N"), "--slots N: slots of -H hosts written without :N")
      ("start-timeout", value()->value_name("SECONDS"),
       "every rank must join the rendezvous within this time (default: HOROVOD_START_TIMEOUT or 30)")
      ("network-interface", value()->value_name("NIC"), "network interface to use (repeatable)")
      ("network-interfaces", value()->value_name("NICS"), "comma-separated network interfaces")
      ("output-filename", value()->value_name("DIR"), "also write DIR/rank.N/stdout and DIR/rank.N/stderr")
      ("prefix-output-with-timestamp", "-prefix-timestamp: prefix each output line with the time")
      ("no-tag-output", "do not prefix output lines with [rank]<stdout>: / [rank]<stderr>:")
      ("verbose", "print what hvdrun does, including each worker's command")
      ("config-file", value()->value_name("FILE"), "YAML file with parameters (horovodrun's format)")
      ("env,x", value()->value_name("NAME[=VALUE]"), "forward (NAME) or set (NAME=VALUE) a worker variable")
      ("dry-run", "print each rank's host, environment and command; start nothing")
      ("termination-grace-seconds", value()->value_name("SECONDS"),
       "after SIGTERM, workers get this long before SIGKILL (default 5)")
      ("no-rendezvous-token",
       "serve rendezvous requests without the per-job token, for Horovod's own workers on several hosts "
       "(anyone who can reach the rendezvous port can then read and write the job's keys); also "
       "HVD_NO_RENDEZVOUS_TOKEN=1. Not needed for local jobs")
      ("horovod-compat",
       "make `import horovod` (horovod.torch, ...) in the workers resolve to hvd's compatibility package on "
       "libhvd, for Horovod scripts without a Horovod install; also HVD_HOROVOD_COMPAT=1")
      ("no-malloc-tuning",
       "leave the workers' glibc malloc as it is; by default hvdrun adds glibc.malloc.mmap_threshold=32 MiB and "
       "glibc.malloc.trim_threshold=1 GiB to their GLIBC_TUNABLES, so the gradients and activations each step "
       "allocates and frees stay mapped for the next one; also HVD_MALLOC_TUNING=0")
      ("status-port", value()->value_name("PORT"),
       "serve the job's live status page (/), its JSON (/status.json) and Prometheus metrics (/metrics) on "
       "this port (0: any free port); the address is printed at start")
      ("status-address", value()->value_name("ADDR"),
       "address the status port binds to (default 127.0.0.1: reach it from elsewhere through an ssh tunnel)")
      ("summary", value()->value_name("FORMAT"),
       "the end-of-job summary: table (default: one table on stderr), none, or 'json FILE' (the table, and "
       "the same as JSON in FILE)")
      ("disable-cache", "accepted for compatibility (hvdrun keeps no cache)")
      ("gloo", "use Gloo (the only controller hvdrun supports)")
      ("mpi", "not supported")
      ("jsrun", "not supported");

  po::options_description ssh("SSH");
  ssh.add_options()
      ("ssh-port,p", value()->value_name("PORT"), "ssh port of all remote hosts")
      ("ssh-identity-file,i", value()->value_name("FILE"), "ssh private key")
      ("ssh-known-hosts", value()->value_name("POLICY"), "host key policy: strict, accept-new (default), off")
      ("ssh-connect-timeout", value()->value_name("SECONDS"), "ssh connection timeout (default 10)")
      ("ssh-force", "start even local hosts through ssh (the same as --launcher ssh)")
      ("ssh-proxy", value()->value_name("MODE"),
       "auto (default): one hvd-proxy per remote host starts its ranks over one channel, falling back per "
       "host when hvd-proxy is not there; never: one ssh channel per rank");

  po::options_description launch("Launcher");
  launch.add_options()
      ("launcher", value()->value_name("KIND"),
       "how ranks are started: auto (default: srun inside a Slurm allocation that spans other nodes, else "
       "fork/exec here and ssh elsewhere), local, ssh, slurm (one srun step starting hvd-proxy per node), agent "
       "(--launcher-agent)")
      ("launcher-agent", value()->value_name("\"PROGRAM ARGS\""),
       "start each rank by running 'PROGRAM ARGS HOST hvd-proxy --connect ADDRESS:PORT' here; the program makes that "
       "hvd-proxy run on HOST (implies --launcher agent; see docs/launcher.md)");

  po::options_description tuning("Tuning and diagnostics (become worker environment variables)");
  tuning.add_options()
      ("fusion-threshold-mb", value()->value_name("MB"), "HOROVOD_FUSION_THRESHOLD (MiB)")
      ("cycle-time-ms", value()->value_name("MS"), "HOROVOD_CYCLE_TIME")
      ("cache-capacity", value()->value_name("N"), "HOROVOD_CACHE_CAPACITY")
      ("hierarchical-allreduce", "HOROVOD_HIERARCHICAL_ALLREDUCE=1")
      ("no-hierarchical-allreduce", "HOROVOD_HIERARCHICAL_ALLREDUCE=0")
      ("hierarchical-allgather", "HOROVOD_HIERARCHICAL_ALLGATHER=1")
      ("no-hierarchical-allgather", "HOROVOD_HIERARCHICAL_ALLGATHER=0")
      ("shared-memory", "HVD_SHARED_MEMORY=1 (the default): ranks of one host exchange data through shared memory")
      ("no-shared-memory", "HVD_SHARED_MEMORY=0: ranks of one host exchange data over TCP loopback, as between hosts")
      ("torus-allreduce", "HOROVOD_TORUS_ALLREDUCE=1")
      ("no-torus-allreduce", "HOROVOD_TORUS_ALLREDUCE=0")
      ("autotune", "HOROVOD_AUTOTUNE=1")
      ("no-autotune", "autotune off")
      ("autotune-log-file", value()->value_name("FILE"), "HOROVOD_AUTOTUNE_LOG")
      ("autotune-warmup-samples", value()->value_name("N"), "HOROVOD_AUTOTUNE_WARMUP_SAMPLES")
      ("autotune-steps-per-sample", value()->value_name("N"), "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE")
      ("autotune-bayes-opt-max-samples", value()->value_name("N"), "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES")
      ("autotune-gaussian-process-noise", value()->value_name("X"),
       "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE, in [0, 1]")
      ("timeline-filename", value()->value_name("FILE"), "HOROVOD_TIMELINE")
      ("timeline-mark-cycles", "HOROVOD_TIMELINE_MARK_CYCLES=1")
      ("no-timeline-mark-cycles", "HOROVOD_TIMELINE_MARK_CYCLES=0")
      ("no-stall-check", "HOROVOD_STALL_CHECK_DISABLE=1")
      ("stall-check", "HOROVOD_STALL_CHECK_DISABLE=0")
      ("stall-check-warning-time-seconds", value()->value_name("S"), "HOROVOD_STALL_CHECK_TIME_SECONDS")
      ("stall-check-shutdown-time-seconds", value()->value_name("S"), "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS")
      ("mpi-threads-disable", "HOROVOD_MPI_THREADS_DISABLE=1")
      ("no-mpi-threads-disable", "HOROVOD_MPI_THREADS_DISABLE=0")
      ("tcp", "NCCL_IB_DISABLE=1")
      ("num-nccl-streams", value()->value_name("N"), "HOROVOD_NUM_NCCL_STREAMS")
      ("thread-affinity", value()->value_name("N"), "HOROVOD_THREAD_AFFINITY")
      ("gloo-timeout-seconds", value()->value_name("S"), "HOROVOD_GLOO_TIMEOUT_SECONDS")
      ("log-level", value()->value_name("LEVEL"), "HOROVOD_LOG_LEVEL: TRACE, DEBUG, INFO, WARNING, ERROR, FATAL")
      ("log-without-timestamp", "HOROVOD_LOG_HIDE_TIME=1")
      ("log-with-timestamp", "HOROVOD_LOG_HIDE_TIME=0")
      ("log-hide-timestamp", "deprecated: --log-without-timestamp")
      ("no-log-hide-timestamp", "deprecated: --log-with-timestamp");

  po::options_description rejected("Not supported (a clear error)");
  rejected.add_options()
      ("mpi-args", value(), "MPI only")
      ("binding-args", value(), "MPI/jsrun only");

  po::options_description elastic("Elastic jobs (docs/elastic.md)");
  elastic.add_options()
      ("min-np", value()->value_name("N"), "--min-num-proc: ranks needed to go on (default -np); elastic mode")
      ("min-num-proc", value()->value_name("N"), "the same as --min-np")
      ("max-np", value()->value_name("N"), "--max-num-proc: at most this many ranks (default: no cap)")
      ("max-num-proc", value()->value_name("N"), "the same as --max-np")
      ("host-discovery-script", value()->value_name("FILE"),
       "prints the available hosts, one 'host[:slots]' per line; elastic mode")
      ("elastic-timeout", value()->value_name("SECONDS"),
       "how long to wait for --min-np slots (default: HOROVOD_ELASTIC_TIMEOUT or 600)")
      ("reset-limit", value()->value_name("N"), "at most this many re-formations (default: no limit)")
      ("blacklist-cooldown-range", value()->value_name("MIN MAX"),
       "a failing host is left out for MIN to MAX seconds, growing with each failure (default: for good)");

  all.add(general).add(launch).add(ssh).add(tuning).add(elastic).add(rejected);
  return all;
}
// clang-format on

// "-np/--num-proc" as argparse names an option in messages.
std::string displayName(const po::options_description& desc, const std::string& key) {
  std::string out;
  for (const auto& [alias, target] : kSingleDashLong) {
    if (target == key && alias != key) out += "-" + alias + "/";
  }
  if (const auto* d = desc.find_nothrow(key, false)) {
    const std::string shortName = d->canonical_display_name(po::command_line_style::allow_dash_for_short);
    if (shortName.size() == 2) out += shortName + "/";
  }
  if (kSingleDashLong.count(key)) out += "-" + key + "/";
  return out + "--" + key;
}

// ---------------------------------------------------------------------------------------------------------
// argparse-compatible tokenizer: finds where the command starts and rewrites every option into the
// canonical "--key" / "--key=value" form for Boost.Program_options.

struct Tokenized {
  std::vector<std::string> canonical;
  std::vector<std::string> command;
};

bool looksNegativeNumber(const std::string& t) {
  if (t.size() < 2 || t[0] != '-') return false;
  double ignored = 0;
  const auto [end, ec] = std::from_chars(t.data() + 1, t.data() + t.size(), ignored);
  return ec == std::errc() && end == t.data() + t.size();
}

bool takesValue(const po::options_description& desc, const std::string& key) {
  return desc.find(key, false).semantic()->max_tokens() > 0;
}

// Resolves "--name" (exact, else unique prefix among long names) to a canonical key.
std::string resolveLong(const po::options_description& desc, const std::string& name,
                        const std::string& token) {
  if (desc.find_nothrow(name, false) && name.size() > 1) return name;
  std::vector<std::string> matches;
  for (const auto& d : desc.options()) {
    const auto [names, count] = d->long_names();
    for (size_t i = 0; i < count; ++i) {
      if (names[i].size() > 1 && names[i].compare(0, name.size(), name) == 0) matches.push_back(names[i]);
    }
  }
  usageCheck(!matches.empty(), "unrecognized arguments: ", token);
  if (matches.size() > 1) {
    std::string list;
    for (const auto& m : matches) list += (list.empty() ? "--" : ", --") + m;
    throw UsageError(detail::concat("ambiguous option: --", name, " could match ", list));
  }
  return matches.front();
}

Tokenized tokenize(const po::options_description& desc, const std::vector<std::string>& args) {
  Tokenized out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& t = args[i];
    if (t == "--") {
      out.command.assign(args.begin() + i + 1, args.end());
      return out;
    }
    if (t.size() < 2 || t[0] != '-' || looksNegativeNumber(t)) {
      out.command.assign(args.begin() + i, args.end());
      return out;
    }
    const bool dashdash = t[1] == '-';
    const auto eq = t.find('=');
    const std::string name =
        t.substr(dashdash ? 2 : 1, eq == std::string::npos ? std::string::npos : eq - (dashdash ? 2 : 1));
    std::optional<std::string> value;
    if (eq != std::string::npos) value = t.substr(eq + 1);
    std::string key;
    if (dashdash) {
      usageCheck(!name.empty(), "unrecognized arguments: ", t);
      key = resolveLong(desc, name, t);
    } else if (const auto alias = kSingleDashLong.find(name); alias != kSingleDashLong.end()) {
      key = alias->second;
    } else if (const auto* d = desc.find_nothrow("-" + t.substr(1, 1), false, false, false);
               d && name.size() == 1) {
      key = d->long_name();  // "-x", "-p", "-x=VALUE"
    } else if (d && d->semantic()->max_tokens() > 0) {
      key = d->long_name();  // "-p2222", "-xNAME=V": a short option with its value attached
      value = t.substr(2);
    } else {
      // argparse also takes unambiguous prefixes of the single-dash long options ("-host" for -hostfile).
      std::vector<std::string> matches;
      for (const auto& [alias, target] : kSingleDashLong) {
        if (alias.compare(0, name.size(), name) == 0) matches.push_back(target);
      }
      usageCheck(matches.size() == 1, matches.empty() ? "unrecognized arguments: " : "ambiguous option: ", t);
      key = matches.front();
    }
    if (key == "blacklist-cooldown-range") {
      // argparse's nargs=2: exactly two following words, never the "=value" form.
      auto isValue = [&](size_t j) {
        return j < args.size() && (args[j].empty() || args[j][0] != '-' || looksNegativeNumber(args[j]));
      };
      usageCheck(!value && isValue(i + 1) && isValue(i + 2), "argument ", displayName(desc, key),
                 ": expected 2 arguments");
      out.canonical.push_back("--" + key + "=" + args[i + 1] + " " + args[i + 2]);
      i += 2;
      continue;
    }
    if (key == "summary" && !value && i + 1 < args.size() && args[i + 1] == "json") {
      // "--summary json FILE": the format and the file as two words.
      usageCheck(i + 2 < args.size() && !args[i + 2].empty() && args[i + 2][0] != '-', "argument ",
                 displayName(desc, key), ": json needs a FILE: --summary json FILE");
      out.canonical.push_back("--summary=json " + args[i + 2]);
      i += 2;
      continue;
    }
    if (takesValue(desc, key)) {
      if (!value) {
        usageCheck(i + 1 < args.size() &&
                       (args[i + 1].empty() || args[i + 1][0] != '-' || looksNegativeNumber(args[i + 1])),
                   "argument ", displayName(desc, key), ": expected one argument");
        value = args[++i];
      }
      if (value->empty()) {
        out.canonical.insert(out.canonical.end(), {"--" + key, ""});  // Boost rejects "--key="
      } else {
        out.canonical.push_back("--" + key + "=" + *value);
      }
    } else {
      usageCheck(!value, "argument ", displayName(desc, key), ": ignored explicit argument '",
                 value.value_or(""), "'");
      out.canonical.push_back("--" + key);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Typed values with argparse-style messages.

int toInt(const po::options_description& desc, const std::string& key, const std::string& text) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  usageCheck(!text.empty() && ec == std::errc() && end == text.data() + text.size() && v >= INT32_MIN &&
                 v <= INT32_MAX,
             "argument ", displayName(desc, key), ": invalid int value: '", text, "'");
  return static_cast<int>(v);
}

double toFloat(const po::options_description& desc, const std::string& key, const std::string& text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  usageCheck(!text.empty() && ec == std::errc() && end == text.data() + text.size() && std::isfinite(v),
             "argument ", displayName(desc, key), ": invalid float value: '", text, "'");
  return v;
}

// Python's str(float): "1.0", "0.5", "1e-05" is not needed for the values that occur here.
std::string pythonFloat(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  // Shortest representation that round-trips.
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// ---------------------------------------------------------------------------------------------------------
// Tuning settings: flag > environment > config file > default, in this one table.

enum class Kind { kInt, kFloat, kBool, kString, kLogLevel };

struct Tunable {
  const char* key;      // canonical flag key (for switches: the setting name of kSwitches)
  const char* env;      // worker variable
  const char* section;  // YAML section, nullptr: not settable from the file
  const char* yaml;     // YAML key
  Kind kind;
  bool yaml_inverted = false;  // YAML value is the complement (stall_check.enabled, logging.with_timestamp)
  bool non_negative = false;
  double scale = 1;            // fusion-threshold-mb: MiB -> bytes
  const char* gate = nullptr;  // written only when this switch is on (autotune, timeline filename)
};

const std::vector<Tunable> kTunables = {
    {"fusion-threshold-mb", "HOROVOD_FUSION_THRESHOLD", "params", "fusion_threshold_mb", Kind::kInt, false,
     true, 1024.0 * 1024.0},
    {"cycle-time-ms", "HOROVOD_CYCLE_TIME", "params", "cycle_time_ms", Kind::kFloat, false, true},
    {"cache-capacity", "HOROVOD_CACHE_CAPACITY", "params", "cache_capacity", Kind::kInt, false, true},
    {"hierarchical-allreduce", "HOROVOD_HIERARCHICAL_ALLREDUCE", "params", "hierarchical_allreduce",
     Kind::kBool},
    {"hierarchical-allgather", "HOROVOD_HIERARCHICAL_ALLGATHER", "params", "hierarchical_allgather",
     Kind::kBool},
    {"torus-allreduce", "HOROVOD_TORUS_ALLREDUCE", "params", "torus_allreduce", Kind::kBool},
    {"shared-memory", "HVD_SHARED_MEMORY", "params", "shared_memory", Kind::kBool},
    {"autotune", "HOROVOD_AUTOTUNE", "autotune", "enabled", Kind::kBool},
    {"autotune-log-file", "HOROVOD_AUTOTUNE_LOG", "autotune", "log_file", Kind::kString, false, false, 1,
     "autotune"},
    {"autotune-warmup-samples", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "autotune", "warmup_samples", Kind::kInt,
     false, true, 1, "autotune"},
    {"autotune-steps-per-sample", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "autotune", "steps_per_sample",
     Kind::kInt, false, true, 1, "autotune"},
    {"autotune-bayes-opt-max-samples", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "autotune",
     "bayes_opt_max_samples", Kind::kInt, false, true, 1, "autotune"},
    {"autotune-gaussian-process-noise", "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "autotune",
     "gaussian_process_noise", Kind::kFloat, false, false, 1, "autotune"},
    {"timeline-filename", "HOROVOD_TIMELINE", "timeline", "filename", Kind::kString},
    {"timeline-mark-cycles", "HOROVOD_TIMELINE_MARK_CYCLES", "timeline", "mark_cycles", Kind::kBool, false,
     false, 1, "timeline-filename"},
    {"no-stall-check", "HOROVOD_STALL_CHECK_DISABLE", "stall_check", "enabled", Kind::kBool, true},
    {"stall-check-warning-time-seconds", "HOROVOD_STALL_CHECK_TIME_SECONDS", "stall_check",
     "warning_time_seconds", Kind::kInt, false, true},
    {"stall-check-shutdown-time-seconds", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "stall_check",
     "shutdown_time_seconds", Kind::kInt, false, true},
    {"mpi-threads-disable", "HOROVOD_MPI_THREADS_DISABLE", "library_options", "mpi_threads_disable",
     Kind::kBool},
    {"tcp", "NCCL_IB_DISABLE", nullptr, nullptr, Kind::kBool},
    {"num-nccl-streams", "HOROVOD_NUM_NCCL_STREAMS", "library_options", "num_nccl_streams", Kind::kInt, false,
     true},
    {"thread-affinity", "HOROVOD_THREAD_AFFINITY", "library_options", "thread_affinity", Kind::kInt, false,
     true},
    {"gloo-timeout-seconds", "HOROVOD_GLOO_TIMEOUT_SECONDS", "library_options", "gloo_timeout_seconds",
     Kind::kInt, false, true},
    {"log-level", "HOROVOD_LOG_LEVEL", "logging", "level", Kind::kLogLevel},
    {"log-without-timestamp", "HOROVOD_LOG_HIDE_TIME", "logging", "with_timestamp", Kind::kBool, true},
};

// Tunables that libhvd does not act on (key, why). Horovod's own workers under hvdrun do.
const std::vector<std::pair<std::string, std::string>> kIgnoredByLibhvd = {
    {"torus-allreduce", "libhvd has no torus allreduce"},
    {"mpi-threads-disable", "libhvd does not use MPI"},
    {"num-nccl-streams", "libhvd does not use NCCL"},
    {"tcp", "libhvd does not use NCCL"},
    {"thread-affinity", "libhvd does not pin its background thread"},
};

// The canonical text of a tunable's value (what the worker variable holds), validated.
std::string convertTunable(const po::options_description& desc, const Tunable& t, const std::string& text,
                           const std::string& origin) {
  std::string name = t.key;  // horovodrun names the setting with underscores in these messages
  std::replace(name.begin(), name.end(), '-', '_');
  switch (t.kind) {
    case Kind::kInt: {
      const int v = toInt(desc, t.key, text);
      usageCheck(!t.non_negative || v >= 0, origin, name, "=", v, " must be >= 0");
      return std::to_string(static_cast<long long>(v * t.scale));
    }
    case Kind::kFloat: {
      const double v = toFloat(desc, t.key, text);
      usageCheck(!t.non_negative || v >= 0, origin, name, "=", text, " must be >= 0");
      if (name == "autotune_gaussian_process_noise") {
        usageCheck(v >= 0 && v <= 1, origin, name, "=", text, " must be in [0, 1]");
      }
      return pythonFloat(v);
    }
    case Kind::kBool:
      return text;  // already "1" / "0"
    case Kind::kString:
      return text;
    case Kind::kLogLevel: {
      static const std::set<std::string> kLevels = {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"};
      std::string upper = text;
      for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      usageCheck(kLevels.count(upper) > 0, origin, "argument --log-level: invalid choice: '", text,
                 "' (choose from 'TRACE', 'DEBUG', 'INFO', 'WARNING', 'ERROR', 'FATAL')");
      return upper;
    }
  }
  return text;
}

// Reads the YAML node of a tunable as text ("1"/"0" for booleans). UsageError naming file and key.
std::optional<std::string> yamlValue(const YAML::Node& root, const Tunable& t, const std::string& file) {
  if (!t.section || !root[t.section] || !root[t.section][t.yaml]) return std::nullopt;
  const YAML::Node node = root[t.section][t.yaml];
  const std::string where = detail::concat(file, ": ", t.section, ".", t.yaml);
  usageCheck(node.IsScalar(), where, ": expected a single value");
  if (t.kind == Kind::kBool) {
    bool b = false;
    usageCheck(YAML::convert<bool>::decode(node, b), where, ": expected true or false, got '", node.Scalar(),
               "'");
    return (b != t.yaml_inverted) ? "1" : "0";
  }
  return node.Scalar();
}

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The candidate closest to word, when it is close enough to be a likely typo.
std::optional<std::string> closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    if (const size_t d = editDistance(word, c); d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

// The config file's `elastic` section (hvdrun's own: horovodrun's config file cannot set elastic options):
// YAML key -> the flag it stands for when the flag is not given.
const std::vector<std::pair<const char*, const char*>> kElasticYaml = {
    {"min_np", "min-np"},
    {"max_np", "max-np"},
    {"slots_per_host", "slots-per-host"},
    {"host_discovery_script", "host-discovery-script"},
    {"elastic_timeout", "elastic-timeout"},
    {"reset_limit", "reset-limit"},
    {"blacklist_cooldown_range", "blacklist-cooldown-range"},  // [MIN, MAX]
};

// horovodrun's config format knows `controller` and the sections and keys of kTunables; it ignores
// anything else, so a typo silently leaves a default. Here an unknown key is a usage error naming it,
// with the closest known key when there is one.
void checkConfigKeys(const YAML::Node& root, const std::string& file) {
  if (!root.IsMap()) return;
  std::vector<std::string> sections = {"controller"};
  std::vector<std::string> qualified;  // section.key
  for (const auto& t : kTunables) {
    if (!t.section) continue;
    if (std::find(sections.begin(), sections.end(), t.section) == sections.end()) sections.push_back(t.section);
    qualified.push_back(std::string(t.section) + "." + t.yaml);
  }
  sections.push_back("elastic");
  for (const auto& [yaml, flag] : kElasticYaml) qualified.push_back(std::string("elastic.") + yaml);
  const auto suggestion = [](const std::optional<std::string>& s) {
    return s ? " (did you mean " + *s + "?)" : std::string();
  };
  for (const auto& entry : root) {
    const std::string section = entry.first.as<std::string>("");
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      // A tunable's key written at the top level is the likeliest mistake: suggest it with its section
      // (every section that has the closest key: stall_check.enabled and autotune.enabled mean different
      // things).
      std::optional<std::string> near = closest(section, sections);
      if (!near) {
        std::vector<std::string> bare;
        for (const auto& q : qualified) bare.push_back(q.substr(q.find('.') + 1));
        if (const auto key = closest(section, bare)) {
          for (const auto& q : qualified) {
            if (q.substr(q.find('.') + 1) == *key) near = near ? *near + " or " + q : q;
          }
        }
      }
      throw UsageError(detail::concat("config file ", file, ": unknown key '", section, "'", suggestion(near)));
    }
    if (section == "controller") continue;
    const YAML::Node& keys = entry.second;
    usageCheck(keys.IsMap() || keys.IsNull(), "config file ", file, ": '", section,
               "' must be a mapping of settings, got '", keys.IsScalar() ? keys.Scalar() : "a list", "'");
    if (keys.IsNull()) continue;
    std::vector<std::string> own;  // this section's keys
    for (const auto& q : qualified) {
      if (q.compare(0, section.size() + 1, section + ".") == 0) own.push_back(q.substr(section.size() + 1));
    }
    for (const auto& kv : keys) {
      const std::string key = kv.first.as<std::string>("");
      if (std::find(own.begin(), own.end(), key) != own.end()) continue;
      std::optional<std::string> near = closest(key, own);
      if (!near) {  // perhaps a key of another section
        for (const auto& q : qualified) {
          if (q.substr(q.find('.') + 1) == key) near = q;
        }
      }
      throw UsageError(
          detail::concat("config file ", file, ": unknown key '", section, ".", key, "'", suggestion(near)));
    }
  }
}

YAML::Node loadConfig(const std::string& path) {
  try {
    YAML::Node root = YAML::LoadFile(path);
    usageCheck(root.IsMap() || root.IsNull(), "config file ", path, ": expected a mapping at the top level");
    checkConfigKeys(root, path);
    return root;
  } catch (const YAML::BadFile&) {
    throw UsageError(detail::concat("cannot read config file \"", path, "\": ", errnoText(errno)));
  } catch (const YAML::Exception& e) {
    throw UsageError(
        detail::concat("config file ", path, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
}

std::string helpText(const po::options_description& desc) {
  std::ostringstream out;
  out << "usage: hvdrun [options] -np N [-H HOSTS | -hostfile FILE] COMMAND [ARGS...]\n\n"
      << "Horovod-compatible launcher (Gloo): starts N workers with horovodrun's HOROVOD_* environment,\n"
      << "runs the rendezvous server in-process, forwards output, and stops the job on the first failure.\n\n"
      << "Examples:\n"
      << "  hvdrun -np 4 python train.py                         4 workers on this machine\n"
      << "  hvdrun -np 8 -H node1:4,node2:4 ./train              two hosts over ssh\n"
      << "  hvdrun -np 4 -hostfile hosts.txt --output-filename logs ./train\n"
      << "  hvdrun -np 2 -x OMP_NUM_THREADS=4 -x PATH ./train    set / forward worker variables\n"
      << "  hvdrun -np 2 --dry-run ./train                       show what would run\n"
      << "  hvdrun -np 2 --fusion-threshold-mb 32 --config-file hvd.yaml ./train\n\n"
      << desc << "\n"
      << "Exit status: 0 success; the first failed worker's exit code (128+N for signal N); 128+N when\n"
      << "hvdrun is stopped by signal N; 2 usage error; 1 any other launcher error. See docs/launcher.md.\n";
  return out.str();
}

std::chrono::seconds toSeconds(const po::options_description& desc, const std::string& key,
                               const std::string& text, bool allow_zero) {
  const int v = toInt(desc, key, text);
  usageCheck(v > 0 || (allow_zero && v == 0), "argument ", displayName(desc, key), ": must be ",
             allow_zero ? ">= 0" : "> 0", ", got ", v);
  return std::chrono::seconds(v);
}

// One of hvdrun's own on/off settings: the flag's value when given, else NAME in hvdrun's environment (1 or
// 0; anything else is a usage error naming it), else fallback. one_means says what 1 turns on.
bool hvdSwitch(std::optional<bool> flag, const Environment& env, const char* name, const char* one_means,
               bool fallback) {
  if (flag) return *flag;
  const auto* v = findEnv(env, name);
  if (!v || v->empty()) return fallback;
  usageCheck(*v == "0" || *v == "1", name, " must be 1 (", one_means, ") or 0, got '", *v, "'");
  return *v == "1";
}

bool isEnvName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (unsigned char c : name) {
    if (!std::isalnum(c) && c != '_') return false;
  }
  return true;
}


// The elastic flags: checked whatever the mode; without --min-np or a discovery script they are ignored.
void parseElastic(const po::options_description& desc, std::map<std::string, std::string>& last,
                  const Environment& env, const YAML::Node& config, const std::string& config_path, HvdrunOptions& o,
                  std::vector<std::string>& warnings) {
  // The config file's elastic section stands in for the flags that are not given (a flag always wins).
  if (config && config["elastic"] && config["elastic"].IsMap()) {
    for (const auto& [yaml, flag] : kElasticYaml) {
      const YAML::Node node = config["elastic"][yaml];
      const bool long_given = last.count(flag) > 0 ||
                              (std::string(flag) == "min-np" && last.count("min-num-proc")) ||
                              (std::string(flag) == "max-np" && last.count("max-num-proc"));
      if (!node || long_given) continue;
      const std::string where = detail::concat("config file ", config_path, ": elastic.", yaml);
      if (std::string(flag) == "blacklist-cooldown-range") {
        usageCheck(node.IsSequence() && node.size() == 2 && node[0].IsScalar() && node[1].IsScalar(), where,
                   ": expected [MIN, MAX], got '", YAML::Dump(node), "'");
        last[flag] = node[0].Scalar() + " " + node[1].Scalar();
      } else {
        usageCheck(node.IsScalar(), where, ": expected a single value");
        last[flag] = node.Scalar();
      }
    }
    if (!o.slots_per_host && last.count("slots-per-host")) {
      o.slots_per_host = toInt(desc, "slots-per-host", last["slots-per-host"]);
      usageCheck(*o.slots_per_host >= 0, "argument --slots-per-host: must be >= 0, got ", *o.slots_per_host);
    }
  }
  const auto given = [&](const char* key) { return last.count(key) > 0; };
  // The long and the short spelling share one setting, as in horovodrun.
  const char* min_key = given("min-num-proc") ? "min-num-proc" : "min-np";
  const char* max_key = given("max-num-proc") ? "max-num-proc" : "max-np";
  HvdrunOptions::Elastic e;
  e.min_np = o.num_proc;
  if (given(min_key)) {
    e.min_np = toInt(desc, min_key, last[min_key]);
    usageCheck(e.min_np >= 1, "argument --", min_key, ": must be at least 1, got ", e.min_np);
    usageCheck(o.num_proc == 0 || e.min_np <= o.num_proc, "argument --", min_key, ": ", e.min_np, " is more than -np ", o.num_proc,
               " (-np is the size the job starts at, --min-np the size it may shrink to)");
  }
  if (given(max_key)) {
    const int max_np = toInt(desc, max_key, last[max_key]);
    usageCheck(max_np >= std::max(o.num_proc, 1), "argument --", max_key, ": ", max_np, " is less than -np ", o.num_proc);
    e.max_np = max_np;
  }
  if (given("host-discovery-script")) {
    const std::string& script = last["host-discovery-script"];
    usageCheck(!script.empty(), "argument --host-discovery-script: empty path");
    // It runs through /bin/sh, so it may carry arguments; its program must be there to run.
    const std::string program = script.substr(0, script.find_first_of(" \t"));
    usageCheck(findExecutable(program, env).has_value(), "argument --host-discovery-script: '", program,
               "' is not an executable file", program.find('/') == std::string::npos ? " in PATH" : "");
    e.discovery_script = script;
  }
  if (given("elastic-timeout")) {
    e.timeout = toSeconds(desc, "elastic-timeout", last["elastic-timeout"], false);
  } else if (const auto* v = findEnv(env, "HOROVOD_ELASTIC_TIMEOUT"); v && !v->empty()) {
    long long seconds = 0;
    const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), seconds);
    usageCheck(ec == std::errc() && end == v->data() + v->size() && seconds > 0 && seconds <= INT32_MAX,
               "HOROVOD_ELASTIC_TIMEOUT must be a positive number of seconds, got '", *v, "'");
    e.timeout = std::chrono::seconds(seconds);
  }
  if (given("reset-limit")) {
    e.reset_limit = toInt(desc, "reset-limit", last["reset-limit"]);
    usageCheck(*e.reset_limit >= 0, "argument --reset-limit: must be >= 0, got ", *e.reset_limit);
  }
  if (given("blacklist-cooldown-range")) {
    const std::string& text = last["blacklist-cooldown-range"];
    const auto space = text.find(' ');
    const int lo = toInt(desc, "blacklist-cooldown-range", text.substr(0, space));
    const int hi = toInt(desc, "blacklist-cooldown-range", text.substr(space + 1));
    usageCheck(lo >= 1 && hi <= 3600 && lo <= hi, "argument --blacklist-cooldown-range: need 1 <= MIN <= MAX <= ",
               "3600 seconds, got ", lo, " ", hi);
    e.cooldown = std::make_pair(lo, hi);
  }
  if (given(min_key) || e.discovery_script) {
    usageCheck(!(e.discovery_script && (o.hosts || o.hostfile)), "argument --host-discovery-script: not allowed with ",
               o.hosts ? "-H/--hosts" : "--hostfile", " (the script lists the hosts)");
    o.elastic = e;
    return;
  }
  // horovodrun runs such a job as a static one and ignores these; say so.
  for (const char* only : {"max-np", "max-num-proc", "elastic-timeout", "reset-limit", "blacklist-cooldown-range"}) {
    if (given(only)) {
      warnings.push_back(detail::concat("--", only, " is ignored: it applies to elastic jobs only (with --min-np ",
                                        "or --host-discovery-script)"));
    }
  }
}

}  // namespace

// `program` as the shell finds it: a path with '/' as it is, else the first match in the PATH of `env`.
std::optional<std::string> findExecutable(const std::string& program, const Environment& env) {
  if (program.find('/') != std::string::npos) {
    if (::access(program.c_str(), X_OK) == 0) return program;
    return std::nullopt;
  }
  const auto* path = findEnv(env, "PATH");
  const std::string dirs = path ? *path : "/usr/local/bin:/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    const std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

CliResult parseCommandLine(const std::vector<std::string>& args, const Environment& env) {
  const po::options_description desc = makeDescription();
  const Tokenized tokens = tokenize(desc, args);

  po::parsed_options parsed(&desc);
  try {
    parsed = po::command_line_parser(tokens.canonical)
                 .options(desc)
                 .style(po::command_line_style::allow_long | po::command_line_style::long_allow_adjacent |
                        po::command_line_style::long_allow_next)
                 .run();
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }

  // Last value of each single-valued option, every value of repeatable ones, in command-line order.
  std::map<std::string, std::string> last;
  std::map<std::string, std::vector<std::string>> repeated;
  std::map<std::string, bool> switches;
  for (const auto& opt : parsed.options) {
    const std::string& key = opt.string_key;
    const std::string value = opt.value.empty() ? "" : opt.value.front();
    if (kRepeatable.count(key)) {
      repeated[key].push_back(value);
    } else if (const auto sw = kSwitches.find(key); sw != kSwitches.end()) {
      switches[sw->second.first] = sw->second.second;
    } else {
      last[key] = value;
    }
  }
  const auto given = [&](const char* key) { return last.count(key) > 0; };

  CliResult result;
  if (given("help")) {
    result.action = CliResult::Action::kPrintAndExit;
    result.text = helpText(desc);
    return result;
  }
  if (given("version")) {
    result.action = CliResult::Action::kPrintAndExit;
    result.text = std::string("hvdrun ") + HVD_VERSION_STRING + " (horovodrun-compatible launcher, Gloo)\n";
    return result;
  }
  for (const char* rejected : {"mpi", "jsrun"}) {
    usageCheck(!given(rejected), "--", rejected,
               " is not supported: hvdrun launches Gloo jobs only (use --gloo)");
  }
  for (const char* rejected : {"mpi-args", "binding-args"}) {
    usageCheck(!given(rejected), "--", rejected, " is not supported: hvdrun does not launch through MPI");
  }
  if (given("check-build")) {
    result.action = CliResult::Action::kPrintAndExit;
    result.text =
        std::string("hvdrun v") + HVD_VERSION_STRING +
        ":\n\nAvailable Frameworks:\n    [ ] TensorFlow\n    [ ] PyTorch\n    [ ] MXNet\n\n"
        "Available Controllers:\n    [ ] MPI\n    [X] Gloo\n\n"
        "Available Tensor Operations:\n    [ ] NCCL\n    [ ] DDL\n    [ ] CCL\n    [ ] MPI\n    [X] Gloo\n";
    return result;
  }

  HvdrunOptions& o = result.options;
  usageCheck(!(given("hosts") && given("hostfile")),
             "argument -hostfile/--hostfile: not allowed with argument -H/--hosts");
  const bool in_slurm = findEnv(env, "SLURM_JOB_NODELIST") && !given("hosts") && !given("hostfile");
  usageCheck(given("num-proc") || in_slurm, "the following arguments are required: -np/--num-proc");
  // horovodrun runs `env` when the command is missing: every rank prints its environment, the job's
  // secret included. Nobody wants that; a forgotten program is a usage error here.
  usageCheck(!tokens.command.empty(),
             "no command to run: put the program and its arguments after the options, as in "
             "hvdrun -np 2 python train.py");
  if (given("num-proc")) {
    o.num_proc = toInt(desc, "num-proc", last["num-proc"]);
    usageCheck(o.num_proc >= 1, "argument -np/--num-proc: must be at least 1, got ", o.num_proc);
  }
  if (given("hosts")) o.hosts = last["hosts"];
  if (given("hostfile")) o.hostfile = last["hostfile"];
  if (given("slots-per-host")) {
    o.slots_per_host = toInt(desc, "slots-per-host", last["slots-per-host"]);
    usageCheck(*o.slots_per_host >= 0, "argument --slots-per-host: must be >= 0, got ", *o.slots_per_host);
  }

  // SSH.
  if (given("ssh-port")) {
    const int port = toInt(desc, "ssh-port", last["ssh-port"]);
    usageCheck(port >= 1 && port <= 65535, "argument -p/--ssh-port: invalid port ", port, " (1 to 65535)");
    o.ssh.port = static_cast<uint16_t>(port);
  }
  if (given("ssh-identity-file")) {
    const std::string& file = last["ssh-identity-file"];
    usageCheck(::access(file.c_str(), R_OK) == 0, "argument -i/--ssh-identity-file: cannot read \"", file,
               "\": ", errnoText(errno));
    o.ssh.identity_file = file;
  }
  if (given("ssh-known-hosts")) {
    const std::string& policy = last["ssh-known-hosts"];
    if (policy == "strict") {
      o.ssh.known_hosts = KnownHostsPolicy::kStrict;
    } else if (policy == "accept-new") {
      o.ssh.known_hosts = KnownHostsPolicy::kAcceptNew;
    } else {
      usageCheck(policy == "off", "argument --ssh-known-hosts: invalid choice: '", policy,
                 "' (choose from 'strict', 'accept-new', 'off')");
      o.ssh.known_hosts = KnownHostsPolicy::kOff;
    }
  }
  if (given("ssh-connect-timeout")) {
    o.ssh.connect_timeout = toSeconds(desc, "ssh-connect-timeout", last["ssh-connect-timeout"], false);
  }
  o.ssh.force_ssh = given("ssh-force");
  if (given("launcher")) {
    const std::string& kind = last["launcher"];
    static const std::map<std::string, LauncherKind> kKinds = {{"auto", LauncherKind::kAuto},
                                                               {"local", LauncherKind::kLocal},
                                                               {"ssh", LauncherKind::kSsh},
                                                               {"slurm", LauncherKind::kSlurm},
                                                               {"agent", LauncherKind::kAgent}};
    const auto it = kKinds.find(kind);
    usageCheck(it != kKinds.end(), "argument --launcher: invalid choice: '", kind,
               "' (choose from 'auto', 'local', 'ssh', 'slurm', 'agent')");
    o.launcher = it->second;
    usageCheck(!o.ssh.force_ssh || o.launcher == LauncherKind::kSsh || o.launcher == LauncherKind::kAuto,
               "argument --ssh-force: not allowed with --launcher ", kind);
  }
  if (given("launcher-agent")) {
    o.launcher_agent = last["launcher-agent"];
    usageCheck(o.launcher_agent.find_first_not_of(" \t") != std::string::npos,
               "argument --launcher-agent: '", o.launcher_agent, "' names no program");
    usageCheck(o.launcher == LauncherKind::kAuto || o.launcher == LauncherKind::kAgent,
               "argument --launcher-agent: not allowed with --launcher ", toString(o.launcher));
    usageCheck(!o.ssh.force_ssh, "argument --launcher-agent: not allowed with --ssh-force");
    o.launcher = LauncherKind::kAgent;
  }
  usageCheck(o.launcher != LauncherKind::kAgent || !o.launcher_agent.empty(),
             "argument --launcher agent: needs --launcher-agent \"PROGRAM ARGS\" (the program that starts hvd-proxy on a host)");
  if (o.ssh.force_ssh) o.launcher = LauncherKind::kSsh;
  if (o.launcher == LauncherKind::kSsh) o.ssh.force_ssh = true;
  if (given("ssh-proxy")) {
    const std::string& mode = last["ssh-proxy"];
    usageCheck(mode == "auto" || mode == "never", "argument --ssh-proxy: invalid choice: '", mode,
               "' (choose from 'auto', 'never')");
    o.ssh.proxy = mode == "auto";
  }

  // Timeouts: flag > HOROVOD_START_TIMEOUT > default.
  if (given("start-timeout")) {
    o.start_timeout = toSeconds(desc, "start-timeout", last["start-timeout"], false);
    o.start_timeout_explicit = true;
  } else if (const auto* v = findEnv(env, "HOROVOD_START_TIMEOUT")) {
    int seconds = 0;
    const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), seconds);
    usageCheck(ec == std::errc() && end == v->data() + v->size() && seconds > 0,
               "HOROVOD_START_TIMEOUT must be a positive number of seconds, got '", *v, "'");
    o.start_timeout = std::chrono::seconds(seconds);
    o.start_timeout_explicit = true;
  }
  if (given("termination-grace-seconds")) {
    o.grace_period = toSeconds(desc, "termination-grace-seconds", last["termination-grace-seconds"], true);
  }

  // Network interfaces: union in the order given (horovodrun keeps a set; hvdrun keeps the order, so the
  // first one is HOROVOD_GLOO_IFACE deterministically).
  for (const char* key : {"network-interface", "network-interfaces"}) {
    for (const auto& list : repeated[key]) {
      std::stringstream in(list);
      std::string nic;
      while (std::getline(in, nic, ',')) {
        usageCheck(!nic.empty(), "argument --", key, ": empty interface name in '", list, "'");
        if (std::find(o.network_interfaces.begin(), o.network_interfaces.end(), nic) ==
            o.network_interfaces.end()) {
          o.network_interfaces.push_back(nic);
        }
      }
    }
  }

  if (given("output-filename")) {
    o.output_filename = last["output-filename"];
    usageCheck(!o.output_filename->empty(), "argument --output-filename: empty directory name");
  }
  o.prefix_timestamp = given("prefix-output-with-timestamp");
  o.tag_output = !given("no-tag-output");
  o.verbose = given("verbose");
  o.dry_run = given("dry-run");
  if (given("status-port")) {
    const int port = toInt(desc, "status-port", last["status-port"]);
    usageCheck(port >= 0 && port <= 65535, "argument --status-port: ", port, " is not a port (0-65535)");
    o.status_port = static_cast<uint16_t>(port);
  }
  if (given("status-address")) {
    o.status_address = last["status-address"];
    usageCheck(!o.status_address.empty(), "argument --status-address: empty address");
    usageCheck(o.status_port.has_value(), "argument --status-address: needs --status-port");
  }
  if (given("summary")) {
    const std::string& text = last["summary"];
    if (text == "table") {
      o.summary_table = true;
    } else if (text == "none") {
      o.summary_table = false;
    } else if (text.rfind("json ", 0) == 0 && text.size() > 5) {
      o.summary_json = text.substr(5);
    } else {
      usageCheck(false, "argument --summary: invalid choice '", text, "' (choose from table, none, json FILE)");
    }
  }
  o.disable_cache = given("disable-cache");
  // Rendezvous token: flag > HVD_NO_RENDEZVOUS_TOKEN > on.
  o.rendezvous_token =
      !hvdSwitch(given("no-rendezvous-token") ? std::optional(true) : std::nullopt, env, "HVD_NO_RENDEZVOUS_TOKEN",
                 "no token", false);
  // Horovod compatibility package: flag > HVD_HOROVOD_COMPAT > off.
  o.horovod_compat =
      hvdSwitch(given("horovod-compat") ? std::optional(true) : std::nullopt, env, "HVD_HOROVOD_COMPAT", "on", false);
  // Workers' malloc thresholds: flag > HVD_MALLOC_TUNING > on.
  o.malloc_tuning =
      hvdSwitch(given("no-malloc-tuning") ? std::optional(false) : std::nullopt, env, "HVD_MALLOC_TUNING", "on", true);

  // Tuning: flag > environment > config file > default (the worker's own default: nothing is set).
  YAML::Node config;
  std::string config_path;
  if (given("config-file")) {
    config_path = last["config-file"];
    config = loadConfig(config_path);
    if (config["controller"]) {
      std::string controller = config["controller"].as<std::string>("");
      for (auto& c : controller) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      usageCheck(controller == "gloo" || controller == "mpi", config_path,
                 ": No such controller supported: ", config["controller"].as<std::string>(""));
      usageCheck(controller == "gloo" || given("gloo"), config_path,
                 ": controller: mpi is not supported: hvdrun launches Gloo jobs only");
    }
  }
  std::map<std::string, std::string> resolved;  // key -> worker value ("" never stored)
  std::map<std::string, std::string> asked_by;  // key -> the flag or config entry that set it
  for (const auto& t : kTunables) {
    std::optional<std::string> text;
    std::string origin;
    if (t.kind == Kind::kBool) {
      if (const auto sw = switches.find(t.key); sw != switches.end()) text = sw->second ? "1" : "0";
      if (std::string(t.key) == "tcp" && given("tcp")) text = "1";
    } else if (given(t.key)) {
      text = last[t.key];
    }
    if (text) asked_by[t.key] = std::string("--") + t.key;
    if (!text && findEnv(env, t.env)) {
      resolved[t.key] = *findEnv(env, t.env);  // inherited by the workers as is
      continue;
    }
    if (!text && config) {
      text = yamlValue(config, t, config_path);
      origin = config_path + ": ";
      if (text) asked_by[t.key] = detail::concat(config_path, ": ", t.section, ".", t.yaml);
    }
    if (text) resolved[t.key] = convertTunable(desc, t, *text, origin);
  }
  // Settings Horovod's own workers act on and libhvd does not: passed on, with a warning, so that nobody
  // believes they took effect in an hvd worker.
  for (const auto& [key, why] : kIgnoredByLibhvd) {
    const auto it = resolved.find(key);
    const auto by = asked_by.find(key);
    const auto t = std::find_if(kTunables.begin(), kTunables.end(), [&](const Tunable& x) { return key == x.key; });
    if (it == resolved.end() || by == asked_by.end() || (t->kind == Kind::kBool && it->second == "0")) continue;
    result.warnings.push_back(detail::concat(by->second, ": ", why, "; ", t->env, "=", it->second,
                                             " is passed on for Horovod's own workers"));
  }
  for (const auto& t : kTunables) {
    const auto it = resolved.find(t.key);
    if (it == resolved.end() || (findEnv(env, t.env) && *findEnv(env, t.env) == it->second)) continue;
    if (t.gate) {
      const auto gate = resolved.find(t.gate);
      if (gate == resolved.end() || gate->second.empty() || gate->second == "0") continue;
    }
    o.worker_env.emplace_back(t.env, it->second);
  }

  // -x NAME[=VALUE].
  for (const auto& item : repeated["env"]) {
    const auto eq = item.find('=');
    const std::string name = item.substr(0, eq);
    usageCheck(isEnvName(name), "argument -x/--env: invalid variable name '", name, "' in '", item, "'");
    usageCheck(
        !isReservedVariable(name), "argument -x/--env: ", name,
        " is set by hvdrun for each worker and cannot be overridden",
        name == "HOROVOD_GLOO_IFACE" || name == "NCCL_SOCKET_IFNAME" ? " (use --network-interface)" : "");
    std::string value;
    if (eq != std::string::npos) {
      value = item.substr(eq + 1);
    } else {
      const auto* inherited = findEnv(env, name);
      usageCheck(inherited != nullptr, "argument -x/--env: ", name, " is not set in hvdrun's environment");
      value = *inherited;
    }
    const auto existing = std::find_if(o.worker_env.begin(), o.worker_env.end(),
                                       [&](const auto& kv) { return kv.first == name; });
    if (existing != o.worker_env.end()) {
      existing->second = value;
    } else {
      o.worker_env.emplace_back(name, value);
    }
  }

  parseElastic(desc, last, env, config, config_path, o, result.warnings);
  // The srun step is made once, over the first hosts; an elastic job adds hosts later.
  usageCheck(!o.elastic || o.launcher != LauncherKind::kSlurm,
             "argument --launcher slurm: not allowed with an elastic job (--min-np or --host-discovery-script); "
             "its hosts start over ssh or locally");

  o.command = tokens.command;
  return result;
}

}  // namespace hvd::launcher
