#include "launcher/cli_options.h"

#include <sstream>

#include "base/error.h"

namespace hvd::launcher {

namespace po = boost::program_options;

// ---------------------------------------------------------------------------------------------------------
// The flag table. Boost.Program_options holds names, arity and help text; the canonical key of an option
// is its first long name. horovodrun's single-dash long spellings map onto those keys.

const std::map<std::string, std::string> kSingleDashLong = {
    {"np", "num-proc"},
    {"cb", "check-build"},
    {"hostfile", "hostfile"},
    {"prefix-timestamp", "prefix-output-with-timestamp"},
};

const std::set<std::string> kRepeatable = {"env", "network-interface", "network-interfaces"};

namespace {
// The "Tuning and diagnostics" group, made from kTunables (below).
void addTuningOptions(po::options_description& tuning);
}  // namespace

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
       "hvd-proxy run on HOST (implies --launcher agent; see docs/launcher.md)")
      ("bind-to", value()->value_name("UNIT"),
       "none (default, as horovodrun: the kernel places the workers' threads) or core: each worker bound to a "
       "core of its own (all of its hardware threads), the host's i-th worker to the i-th core that hvdrun, or "
       "hvd-proxy on a remote host, may use; a worker beyond the host's cores fails to start");

  po::options_description tuning("Tuning and diagnostics (become worker environment variables)");
  addTuningOptions(tuning);

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

// ---------------------------------------------------------------------------------------------------------
// Tuning settings: flag > environment > config file > default, in this one table.

// One tunable per entry reads better than the formatter's one field per line.
// clang-format off
const std::vector<Tunable> kTunables = {
    {.key = "fusion-threshold-mb", .env = "HOROVOD_FUSION_THRESHOLD", .section = "params",
     .yaml = "fusion_threshold_mb", .kind = TunableKind::kInt, .non_negative = true, .scale = 1024.0 * 1024.0,
     .value_name = "MB", .note = " (MiB)"},
    {.key = "cycle-time-ms", .env = "HOROVOD_CYCLE_TIME", .section = "params", .yaml = "cycle_time_ms",
     .kind = TunableKind::kFloat, .non_negative = true, .value_name = "MS"},
    {.key = "cache-capacity", .env = "HOROVOD_CACHE_CAPACITY", .section = "params", .yaml = "cache_capacity",
     .kind = TunableKind::kInt, .non_negative = true, .value_name = "N"},
    {.key = "hierarchical-allreduce", .env = "HOROVOD_HIERARCHICAL_ALLREDUCE", .section = "params",
     .yaml = "hierarchical_allreduce", .kind = TunableKind::kBool, .off = "no-hierarchical-allreduce"},
    {.key = "hierarchical-allgather", .env = "HOROVOD_HIERARCHICAL_ALLGATHER", .section = "params",
     .yaml = "hierarchical_allgather", .kind = TunableKind::kBool, .off = "no-hierarchical-allgather"},
    {.key = "torus-allreduce", .env = "HOROVOD_TORUS_ALLREDUCE", .section = "params",
     .yaml = "torus_allreduce", .kind = TunableKind::kBool, .off = "no-torus-allreduce"},
    {.key = "shared-memory", .env = "HVD_SHARED_MEMORY", .section = "params", .yaml = "shared_memory",
     .kind = TunableKind::kBool,
     .note = " (the default): ranks of one host exchange data through shared memory",
     .off = "no-shared-memory",
     .off_note = ": ranks of one host exchange data over TCP loopback, as between hosts"},
    {.key = "autotune", .env = "HOROVOD_AUTOTUNE", .section = "autotune", .yaml = "enabled",
     .kind = TunableKind::kBool, .off = "no-autotune"},
    {.key = "autotune-log-file", .env = "HOROVOD_AUTOTUNE_LOG", .section = "autotune", .yaml = "log_file",
     .kind = TunableKind::kString, .gate = "autotune", .value_name = "FILE"},
    {.key = "autotune-warmup-samples", .env = "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", .section = "autotune",
     .yaml = "warmup_samples", .kind = TunableKind::kInt, .non_negative = true, .gate = "autotune",
     .value_name = "N"},
    {.key = "autotune-steps-per-sample", .env = "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", .section = "autotune",
     .yaml = "steps_per_sample", .kind = TunableKind::kInt, .non_negative = true, .gate = "autotune",
     .value_name = "N"},
    {.key = "autotune-bayes-opt-max-samples", .env = "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
     .section = "autotune", .yaml = "bayes_opt_max_samples", .kind = TunableKind::kInt, .non_negative = true,
     .gate = "autotune", .value_name = "N"},
    {.key = "autotune-gaussian-process-noise", .env = "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
     .section = "autotune", .yaml = "gaussian_process_noise", .kind = TunableKind::kFloat, .gate = "autotune",
     .value_name = "X", .note = ", in [0, 1]"},
    {.key = "timeline-filename", .env = "HOROVOD_TIMELINE", .section = "timeline", .yaml = "filename",
     .kind = TunableKind::kString, .value_name = "FILE"},
    {.key = "timeline-mark-cycles", .env = "HOROVOD_TIMELINE_MARK_CYCLES", .section = "timeline",
     .yaml = "mark_cycles", .kind = TunableKind::kBool, .gate = "timeline-filename",
     .off = "no-timeline-mark-cycles"},
    {.key = "no-stall-check", .env = "HOROVOD_STALL_CHECK_DISABLE", .section = "stall_check",
     .yaml = "enabled", .kind = TunableKind::kBool, .yaml_inverted = true, .off = "stall-check"},
    {.key = "stall-check-warning-time-seconds", .env = "HOROVOD_STALL_CHECK_TIME_SECONDS",
     .section = "stall_check", .yaml = "warning_time_seconds", .kind = TunableKind::kInt,
     .non_negative = true, .value_name = "S"},
    {.key = "stall-check-shutdown-time-seconds", .env = "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
     .section = "stall_check", .yaml = "shutdown_time_seconds", .kind = TunableKind::kInt,
     .non_negative = true, .value_name = "S"},
    {.key = "mpi-threads-disable", .env = "HOROVOD_MPI_THREADS_DISABLE", .section = "library_options",
     .yaml = "mpi_threads_disable", .kind = TunableKind::kBool, .off = "no-mpi-threads-disable"},
    {.key = "tcp", .env = "NCCL_IB_DISABLE", .kind = TunableKind::kBool},
    {.key = "num-nccl-streams", .env = "HOROVOD_NUM_NCCL_STREAMS", .section = "library_options",
     .yaml = "num_nccl_streams", .kind = TunableKind::kInt, .non_negative = true, .value_name = "N"},
    {.key = "thread-affinity", .env = "HOROVOD_THREAD_AFFINITY", .section = "library_options",
     .yaml = "thread_affinity", .kind = TunableKind::kInt, .non_negative = true, .value_name = "N"},
    {.key = "gloo-timeout-seconds", .env = "HOROVOD_GLOO_TIMEOUT_SECONDS", .section = "library_options",
     .yaml = "gloo_timeout_seconds", .kind = TunableKind::kInt, .non_negative = true, .value_name = "S"},
    {.key = "log-level", .env = "HOROVOD_LOG_LEVEL", .section = "logging", .yaml = "level",
     .kind = TunableKind::kLogLevel, .value_name = "LEVEL",
     .note = ": TRACE, DEBUG, INFO, WARNING, ERROR, FATAL"},
    {.key = "log-without-timestamp", .env = "HOROVOD_LOG_HIDE_TIME", .section = "logging",
     .yaml = "with_timestamp", .kind = TunableKind::kBool, .yaml_inverted = true,
     .off = "log-with-timestamp"},
};
// clang-format on

namespace {

// horovodrun's old spellings of switches: the old flag, the flag it means now.
const std::pair<const char*, const char*> kOldSwitchSpellings[] = {
    {"log-hide-timestamp", "log-without-timestamp"}, {"no-log-hide-timestamp", "log-with-timestamp"}};

std::map<std::string, std::pair<std::string, bool>> makeSwitches() {
  std::map<std::string, std::pair<std::string, bool>> out;
  for (const Tunable& t : kTunables) {
    if (t.kind != TunableKind::kBool) continue;
    out[t.key] = {t.key, true};
    if (t.off) out[t.off] = {t.key, false};
  }
  for (const auto& [old_flag, flag] : kOldSwitchSpellings) out[old_flag] = out.at(flag);
  return out;
}

// An option per tunable, each switch's "off" flag and the old spellings of switches.
void addTuningOptions(po::options_description& tuning) {
  for (const Tunable& t : kTunables) {
    if (t.kind != TunableKind::kBool) {
      tuning.add_options()(t.key, po::value<std::string>()->value_name(t.value_name),
                           detail::concat(t.env, t.note).c_str());
      continue;
    }
    tuning.add_options()(t.key, detail::concat(t.env, "=1", t.note).c_str());
    if (t.off) tuning.add_options()(t.off, detail::concat(t.env, "=0", t.off_note).c_str());
  }
  for (const auto& [old_flag, flag] : kOldSwitchSpellings) {
    tuning.add_options()(old_flag, detail::concat("deprecated: --", flag).c_str());
  }
}

}  // namespace

// After kTunables: it is made from it.
const std::map<std::string, std::pair<std::string, bool>> kSwitches = makeSwitches();

}  // namespace hvd::launcher
