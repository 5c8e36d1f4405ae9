// The Launcher interface: how a worker is started, watched and stopped, shared by the local (fork/exec)
// and ssh (libssh2) transports.
//
// Two kinds of types, blueprint and instance:
//   blueprint  HostSpec, LaunchSpec           what to run where; plain data, built by the host plan + job
//   instance   Worker, WorkerState,           one started worker and what became of it
//              ExitStatus, RunResult
//
// Event model. Every launcher runs on ONE boost::asio::io_context owned by the job (hvdrun runs the
// rendezvous server, output forwarding, child reaping and signal handling on that loop, single-threaded).
// A launcher never starts a thread per pipe or per channel: local workers' pipes are
// posix::stream_descriptors, ssh channels are polled from the same loop. Output and exit reach the job as
// WorkerEvents callbacks, invoked on the io_context's thread only.
//
// Choosing a launcher. hvdrun starts hosts that are this machine (isLocalHost: its hostname, any of its
// addresses, "localhost", 127.0.0.0/8, ::1) with LocalLauncher (launcher/local/launcher.h) and every other
// host, or every host when SshOptions::force_ssh is set, with the launcher returned by
//     std::unique_ptr<Launcher> hvd::launcher::ssh::makeLauncher(boost::asio::io_context&, const
//     SshOptions&);
// declared in launcher/ssh/launcher.h and defined by the ssh transport. Shared code never branches on a
// launcher's kind: transport-specific behaviour lives in the subclasses' overrides below.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hvd::launcher {

// ---------------------------------------------------------------------------------------------------------
// Blueprint

// One entry of a host plan, as the user wrote it (-H, hostfile, Slurm).
struct HostSpec {
  std::string name;                 // as written (no user, no brackets): becomes HOROVOD_HOSTNAME
  std::optional<std::string> user;  // "user@host" form; unset: the current user / ~/.ssh/config
  int slots = 1;                    // processes this host may run
};

// Everything needed to start one worker. The environment is complete: the job has already merged the
// inherited variables (filtered through Launcher::shouldInheritEnv), the -x variables, the tuning
// variables and the per-rank HOROVOD_* ones; a launcher applies it as is (local: envp of execve; ssh:
// sent to the remote side without putting secret values on a command line).
struct LaunchSpec {
  int rank = -1;
  HostSpec host;                                         // where (name, user; slots is informational)
  std::vector<std::string> argv;                         // argv[0] looked up in PATH; never empty
  std::vector<std::pair<std::string, std::string>> env;  // NAME, VALUE; no duplicates
  std::string cwd;                                       // working directory on that host
  bool forward_stdin = false;                            // true for rank 0 only: it reads hvdrun's stdin
  int bind_index = -1;  // --bind-to core: the worker's index among its host's workers, whose core it is bound
                        // to (cpu_binding.h); -1: not bound
};

// ---------------------------------------------------------------------------------------------------------
// Instances

enum class Stream { kStdout, kStderr };

enum class WorkerState {
  kInit,  // created, not yet running
  kRunning,
  kSucceeded,  // exited 0
  kFailed,     // exited non-zero, killed by a signal, or could not be started
  kStopped,    // ended after hvdrun asked it to stop (signal())
  kUnknown,    // the transport lost track of it (e.g. ssh connection dropped)
};

const char* toString(WorkerState state);

// For a child between fork() and exec (async-signal-safe): every signal back to its default disposition,
// then an empty signal mask, so the program starts as from a shell, without the parent's handlers,
// ignored signals or blocked set. Call it only once nothing of the parent's may run any more.
void resetSignalsForExec() noexcept;

// For a child after fork(): makes envp its environment and runs argv[0] (looked up in envp's PATH, as
// execvp does). When that fails, writes exec_error, the reason and a newline to stderr in one write and
// exits 127. Never returns. Async-signal-safe once argv and envp are built.
[[noreturn]] void execOrExit(char* const argv[], char* envp[], std::string_view exec_error) noexcept;

// Sends `signo` to the process group a forked worker leads (it calls setsid() first thing). Until the
// child has done so, the group does not exist and kill(-pid) reaches nobody: the child itself is signalled
// then (it has started nothing yet). Returns kill()'s result.
int signalWorkerGroup(pid_t pid, int signo) noexcept;

// "hvdrun: rank R: cannot execute 'PROGRAM': " -- the start of the line a worker that could not be exec'd
// prints (errno text follows), the same for local workers and hvd-proxy ranks.
std::string cannotExecutePrefix(int rank, const std::string& program);

// How a worker ended.
struct ExitStatus {
  enum class Kind {
    kExited,    // code is the exit status
    kSignaled,  // signal is the terminating signal number
    kLost,      // the transport lost the worker (ssh connection dropped); detail says why
  };
  Kind kind = Kind::kExited;
  int code = 0;
  int signal = 0;
  std::string detail;  // optional human text (e.g. "connection to host-3 reset")
  // The process's peak resident set size, where the launcher measures it (local workers: wait4's
  // ru_maxrss, which covers the worker and the descendants it waited for).
  std::optional<uint64_t> peak_rss_bytes;

  bool success() const { return kind == Kind::kExited && code == 0; }
  // The shell convention: the exit code, or 128 + N for signal N; kLost maps to 255 (as ssh does).
  int shellCode() const;
  // "exit code 3", "signal 9 (Killed)", "lost: <detail>".
  std::string describe() const;
};

// Callbacks from a launcher to the job, always on the io_context's thread.
// Contract per worker: any number of onOutput calls per stream, then exactly one onStreamClosed per
// stream, then exactly one onExit. A launcher drains a worker's streams until EOF before it reports the
// exit, but gives up waiting for EOF a short while after the process ended (a background grandchild may
// hold the pipe open) and then closes the stream itself.
class WorkerEvents {
 public:
  virtual ~WorkerEvents() = default;
  // Bytes as read, in any chunking; not necessarily whole lines, not necessarily valid UTF-8.
  virtual void onOutput(int rank, Stream stream, std::string_view bytes) = 0;
  virtual void onStreamClosed(int rank, Stream stream) = 0;
  virtual void onExit(int rank, const ExitStatus& status) = 0;
};

// A started worker. Threading: every method on the io_context's thread.
class Worker {
 public:
  // Destroying a worker that is still running kills it (SIGKILL to all its processes) without reporting.
  virtual ~Worker() = default;
  virtual int rank() const = 0;
  virtual WorkerState state() const = 0;
  // Delivers `signo` to the worker and everything it started (local: its process group; ssh: the remote
  // process group). Marks the worker as asked to stop, so its end is reported as kStopped unless it had
  // already failed. No effect once it has ended.
  virtual void signal(int signo) = 0;
  // Local process id for diagnostics and tests; nullopt for remote workers.
  virtual std::optional<int> pid() const { return std::nullopt; }
};

// The transport.
class Launcher {
 public:
  virtual ~Launcher() = default;

  // Short name for messages ("local", "ssh").
  virtual std::string name() const = 0;

  // Called once with every host this launcher will start, before ANY worker of the job starts. Throws
  // LaunchError whose message has one line per failing host (naming the host and the cause). Default:
  // nothing to check.
  virtual void preflight(const std::vector<HostSpec>& hosts) {}

  // Whether a variable of hvdrun's own environment is passed on to workers. The job asks this for every
  // inherited variable (variables set with -x and by hvdrun itself are always passed). Default: all.
  virtual bool shouldInheritEnv(std::string_view name) const { return true; }

  // Whether the hosts this launcher starts name their network interfaces as this machine does, so that
  // the interface hvdrun picks for itself (the one routing to the hosts) is the workers' HOROVOD_GLOO_IFACE,
  // as horovodrun assumes of a cluster. false: each worker takes the address routing to the rendezvous
  // server instead, unless --network-interface names the interfaces. Default: true.
  virtual bool hostsShareInterfaceNames() const { return true; }

  // The name or address through which this machine reaches `host` over the network, for choosing the
  // rendezvous address by route (ssh: HostName from ~/.ssh/config). Default: the name as written.
  virtual std::string networkName(const HostSpec& host) const { return host.name; }

  // Called once after the rendezvous server listens on address:port and before any worker starts:
  // throws LaunchError naming the host and the address when a host cannot reach it. Default: nothing.
  virtual void checkRendezvousReachable(const std::vector<HostSpec>& hosts, const std::string& address,
                                        uint16_t port) {}

  // Starts one worker; events for it are delivered to `events` (which must outlive the Worker). Throws
  // LaunchError naming the rank, host and cause when it cannot be started at all; a command that is not
  // found is NOT such a case: the worker starts and ends with exit code 127 and a message on its stderr.
  virtual std::unique_ptr<Worker> start(const LaunchSpec& spec, WorkerEvents& events) = 0;
};

// ---------------------------------------------------------------------------------------------------------
// Job outcome

struct WorkerFailure {
  std::string host;
  ExitStatus status;
  std::chrono::system_clock::time_point time;  // when hvdrun saw it end
};

struct RunResult {
  std::map<int, WorkerFailure> failures;  // by global rank; workers stopped by hvdrun are not failures
  std::optional<int> first_failed_rank;   // the failure that brought the job down
  std::optional<int> interrupted_by;      // signal hvdrun received (SIGINT, SIGTERM, SIGHUP)
  std::optional<std::string> error;       // job-level failure not tied to one worker (start timeout, ...)

  // hvdrun's exit code: 0; the first failed worker's shellCode(); 128 + interrupting signal; or 1.
  int exitCode() const;
};

// ---------------------------------------------------------------------------------------------------------
// Choosing a launcher

// True when `host` names this machine: "localhost", an address in 127.0.0.0/8 or ::1, this machine's
// hostname (short or as returned by gethostname), or a name that resolves to one of its interface
// addresses. Never blocks longer than name resolution.
bool isLocalHost(const std::string& host);

// Every address of every interface of this machine (loopback included), as numeric strings.
std::set<std::string> interfaceAddresses();

}  // namespace hvd::launcher
