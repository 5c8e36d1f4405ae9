// hvdrun's command line: horovodrun's Gloo-mode flags (Boost.Program_options) plus a few extensions.
//
// Parsing follows horovodrun's argparse semantics:
//   - single-dash long forms (-np 4, -np=4, -hostfile F, -prefix-timestamp); -np4 is rejected;
//   - unambiguous prefixes of long options (--verb, --slots for --slots-per-host);
//   - the user command starts at the first token that is neither an option nor an option's value, and
//     everything after it is the command's; one leading "--" is stripped (argparse keeps it);
//   - a repeated single-valued option: the last one wins.
// Configuration precedence is resolved here and nowhere else: flag > environment > config file > default.
// Every error is a UsageError with a one-line message naming the offending token (hvdrun exits 2).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/options.h"

namespace hvd::launcher {

// hvdrun's own environment as NAME, VALUE pairs in environ order (a snapshot, so parsing is testable).
using Environment = std::vector<std::pair<std::string, std::string>>;
Environment currentEnvironment();
const std::string* findEnv(const Environment& env, const std::string& name);
// `program` as the shell finds it: a path with '/' if executable, else the first match in the PATH of `env`.
std::optional<std::string> findExecutable(const std::string& program, const Environment& env);

struct HvdrunOptions {
  static constexpr std::chrono::seconds kDefaultStartTimeout{30};        // horovodrun's default
  static constexpr std::chrono::milliseconds kDefaultGracePeriod{5000};  // GRACEFUL_TERMINATION_TIME_S

  int num_proc = 0;
  std::optional<std::string> hosts;     // -H, as given
  std::optional<std::string> hostfile;  // --hostfile path
  std::optional<int> slots_per_host;    // default slots for -H entries without ":slots"
  SshOptions ssh;
  LauncherKind launcher = LauncherKind::kAuto;  // --launcher; resolved in hvdrunMain (resolveLauncher)
  std::string launcher_agent;                   // --launcher-agent "PROGRAM ARGS" (implies --launcher agent)
  bool bind_to_core = false;                    // --bind-to core: each worker bound to a core (cpu_binding.h)

  // --start-timeout / HOROVOD_START_TIMEOUT. When given explicitly, every rank must have joined the
  // rendezvous by then; with the default, only jobs in which some rank joined are held to it (a command
  // that never uses hvd, e.g. a shell script, is not stopped).
  std::chrono::seconds start_timeout = kDefaultStartTimeout;
  bool start_timeout_explicit = false;
  std::chrono::milliseconds grace_period = kDefaultGracePeriod;  // SIGTERM -> SIGKILL

  std::vector<std::string> network_interfaces;  // --network-interface(s), in the order given, no repeats
  std::optional<std::string> output_filename;   // --output-filename DIR
  bool prefix_timestamp = false;                // --prefix-output-with-timestamp
  bool tag_output = true;                       // --no-tag-output turns the [rank]<stream>: tags off
  bool verbose = false;
  bool dry_run = false;
  bool disable_cache = false;  // accepted for compatibility: hvdrun keeps no cache
  // The rendezvous server requires the per-job token (HVD_RENDEZVOUS_TOKEN) except from this user's own
  // processes on a local job. false: --no-rendezvous-token or HVD_NO_RENDEZVOUS_TOKEN=1, for Horovod's
  // own workers on several hosts (they cannot send a token); the server then serves anyone who reaches it.
  bool rendezvous_token = true;
  // --horovod-compat or HVD_HOROVOD_COMPAT=1: `import horovod` in the workers resolves to hvd's
  // compatibility package (launcher/python_path.h).
  bool horovod_compat = false;
  // Workers' GLIBC_TUNABLES keep freed heap memory mapped between steps (launcher/worker_heap.h). false:
  // --no-malloc-tuning or HVD_MALLOC_TUNING=0.
  bool malloc_tuning = true;

  // --status-port: the job's status page, JSON and Prometheus metrics on this port (0: any free port),
  // bound to --status-address (127.0.0.1 unless given); nullopt: no status port.
  std::optional<uint16_t> status_port;
  std::string status_address = "127.0.0.1";
  // The end-of-job summary: a table on stderr unless --summary none; --summary json FILE also writes it
  // as JSON to FILE.
  bool summary_table = true;
  std::optional<std::string> summary_json;

  // Elastic mode, on when --min-np or --host-discovery-script is given (horovodrun's rule); run by
  // runElasticJob (launcher/elastic.h, docs/elastic.md).
  struct Elastic {
    static constexpr std::chrono::seconds kDefaultTimeout{600};  // horovodrun's default
    int min_np = 0;                                // --min-np; default -np
    std::optional<int> max_np;                     // --max-np; unset: no cap
    std::optional<std::string> discovery_script;  // --host-discovery-script
    std::chrono::seconds timeout = kDefaultTimeout;  // --elastic-timeout / HOROVOD_ELASTIC_TIMEOUT
    std::optional<int> reset_limit;                // --reset-limit; unset: no limit
    std::optional<std::pair<int, int>> cooldown;   // --blacklist-cooldown-range MIN MAX, seconds
  };
  std::optional<Elastic> elastic;

  // Variables set on every worker: tuning/diagnostic flags and config-file values, then -x.
  std::vector<std::pair<std::string, std::string>> worker_env;
  std::vector<std::string> command;  // never empty: a missing command is a usage error (horovodrun runs `env`)
};

struct CliResult {
  enum class Action { kRun, kPrintAndExit };
  Action action = Action::kRun;
  HvdrunOptions options;  // kRun
  std::string text;       // kPrintAndExit: --help, --version, --check-build output
  // kRun: one line each, for stderr ("hvdrun: warning: ..."): settings that are passed on to the workers
  // but that libhvd does not act on.
  std::vector<std::string> warnings;
};

// Parses argv (without argv[0]) against `env`. Reads the --config-file and --hostfile only when named.
CliResult parseCommandLine(const std::vector<std::string>& args, const Environment& env);

// One line pointing at --help, printed after a usage error.
std::string usageHint();

// Variables hvdrun sets per rank or per job; -x cannot set them and they are not inherited.
bool isReservedVariable(const std::string& name);

}  // namespace hvd::launcher
