// Multi-process jobs for runtime tests: a rendezvous Server on an ephemeral loopback port in the test
// process, and N worker processes started with the HOROVOD_* environment hvdrun gives them (all on
// this host: local_rank = rank, cross_rank = 0).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace hvd::rendezvous {
class Server;
}

namespace hvd::runtime::testing {

struct WorkerResult {
  int rank = -1;
  int pid = -1;          // the worker's process id
  int exit_code = -1;    // -1 when killed by a signal
  int signal = 0;        // the signal, 0 when it exited
  bool timed_out = false;
  std::string output;    // stdout and stderr, interleaved
};

struct JobOptions {
  int np = 2;
  std::vector<std::string> argv;               // argv[0]: path of the worker binary
  std::map<std::string, std::string> env;      // extra variables for every rank
  std::chrono::milliseconds timeout{60000};    // the whole job; then every worker is SIGKILLed
  bool with_server = true;                     // false: no rendezvous variables at all
  std::map<int, std::map<std::string, std::string>> rank_env;  // per-rank extra variables
  // Called once the rendezvous server is up, before any worker starts (e.g. to begin elastic rounds).
  std::function<void(rendezvous::Server&)> on_server;
  // Called once every worker has ended, while the rendezvous server is still up (e.g. to read its monitor).
  std::function<void(rendezvous::Server&)> on_finish;
};

// Runs the job to completion; returns one result per rank, in rank order.
std::vector<WorkerResult> runJob(const JobOptions& options);

// "$HVD_BUILD_DIR/<relative>", failing the test when HVD_BUILD_DIR is unset.
std::string buildPath(const std::string& relative);

// Readable summary of a job's results for assertion messages.
std::string describe(const std::vector<WorkerResult>& results);

// Rank by rank: REQUIREs that it exited 0 and CHECKs that its output holds `text`.
void requireEveryRankPrinted(const std::vector<WorkerResult>& results, const std::string& text);

}  // namespace hvd::runtime::testing
