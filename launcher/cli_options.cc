#include "launcher/cli_options.h"

#include <sstream>

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

const std::vector<Tunable> kTunables = {
    {"fusion-threshold-mb", "HOROVOD_FUSION_THRESHOLD", "params", "fusion_threshold_mb", TunableKind::kInt,
     false, true, 1024.0 * 1024.0},
    {"cycle-time-ms", "HOROVOD_CYCLE_TIME", "params", "cycle_time_ms", TunableKind::kFloat, false, true},
    {"cache-capacity", "HOROVOD_CACHE_CAPACITY", "params", "cache_capacity", TunableKind::kInt, false, true},
    {"hierarchical-allreduce", "HOROVOD_HIERARCHICAL_ALLREDUCE", "params", "hierarchical_allreduce",
     TunableKind::kBool},
    {"hierarchical-allgather", "HOROVOD_HIERARCHICAL_ALLGATHER", "params", "hierarchical_allgather",
     TunableKind::kBool},
    {"torus-allreduce", "HOROVOD_TORUS_ALLREDUCE", "params", "torus_allreduce", TunableKind::kBool},
    {"shared-memory", "HVD_SHARED_MEMORY", "params", "shared_memory", TunableKind::kBool},
    {"autotune", "HOROVOD_AUTOTUNE", "autotune", "enabled", TunableKind::kBool},
    {"autotune-log-file", "HOROVOD_AUTOTUNE_LOG", "autotune", "log_file", TunableKind::kString, false, false,
     1, "autotune"},
    {"autotune-warmup-samples", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "autotune", "warmup_samples",
     TunableKind::kInt, false, true, 1, "autotune"},
    {"autotune-steps-per-sample", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "autotune", "steps_per_sample",
     TunableKind::kInt, false, true, 1, "autotune"},
    {"autotune-bayes-opt-max-samples", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "autotune",
     "bayes_opt_max_samples", TunableKind::kInt, false, true, 1, "autotune"},
    {"autotune-gaussian-process-noise", "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "autotune",
     "gaussian_process_noise", TunableKind::kFloat, false, false, 1, "autotune"},
    {"timeline-filename", "HOROVOD_TIMELINE", "timeline", "filename", TunableKind::kString},
    {"timeline-mark-cycles", "HOROVOD_TIMELINE_MARK_CYCLES", "timeline", "mark_cycles", TunableKind::kBool,
     false, false, 1, "timeline-filename"},
    {"no-stall-check", "HOROVOD_STALL_CHECK_DISABLE", "stall_check", "enabled", TunableKind::kBool, true},
    {"stall-check-warning-time-seconds", "HOROVOD_STALL_CHECK_TIME_SECONDS", "stall_check",
     "warning_time_seconds", TunableKind::kInt, false, true},
    {"stall-check-shutdown-time-seconds", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "stall_check",
     "shutdown_time_seconds", TunableKind::kInt, false, true},
    {"mpi-threads-disable", "HOROVOD_MPI_THREADS_DISABLE", "library_options", "mpi_threads_disable",
     TunableKind::kBool},
    {"tcp", "NCCL_IB_DISABLE", nullptr, nullptr, TunableKind::kBool},
    {"num-nccl-streams", "HOROVOD_NUM_NCCL_STREAMS", "library_options", "num_nccl_streams", TunableKind::kInt,
     false, true},
    {"thread-affinity", "HOROVOD_THREAD_AFFINITY", "library_options", "thread_affinity", TunableKind::kInt,
     false, true},
    {"gloo-timeout-seconds", "HOROVOD_GLOO_TIMEOUT_SECONDS", "library_options", "gloo_timeout_seconds",
     TunableKind::kInt, false, true},
    {"log-level", "HOROVOD_LOG_LEVEL", "logging", "level", TunableKind::kLogLevel},
    {"log-without-timestamp", "HOROVOD_LOG_HIDE_TIME", "logging", "with_timestamp", TunableKind::kBool, true},
};

}  // namespace hvd::launcher
