// The end-of-job summary: one row per worker (rank, host, how it ended, wall time, peak RSS, collectives run,
// bytes given to them), as a table for hvdrun's stderr and as JSON for scripts (--summary json FILE).
//
// Made from the job's Monitor snapshot (base/job_monitor.h): the launcher's view of each process (host,
// exit, wall time, and the peak RSS of local workers from wait4) and the runtime's last report (collectives,
// bytes, and the peak RSS of remote workers). A worker whose runtime never reported (not an hvd program, or
// Horovod's own workers) shows "-" for what only the runtime knows.
#pragma once

#include <chrono>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/job_monitor.h"
#include "launcher/cli.h"
#include "launcher/launcher.h"
#include "launcher/output.h"

namespace hvd::launcher {

// "exit 0", "exit 3", "signal 9 (Killed)", "lost: <why>", or "running" for a worker that has not ended.
std::string describeEnd(const WorkerView& worker);

// The table, ending in a newline; its first line names the job's outcome. `seconds`: the job's wall time.
std::string summaryTable(const JobSnapshot& job, double seconds, int exit_code);

// {"exit_code", "seconds", "ranks": [{"rank", "worker", "host", "pid", "state", "exit_code", "signal",
//  "end", "seconds", "peak_rss_bytes", "collectives", "bytes", "by_op": {op: {"count", "bytes"}}}]}; null
// for what is unknown.
nlohmann::json summaryJson(const JobSnapshot& job, double seconds, int exit_code);

// Tells the monitor how worker `id` ended.
void recordExit(Monitor& monitor, int id, const ExitStatus& status);

// The summary's outputs, as hvdrun's options ask. open() opens --summary json FILE before the job starts, so
// a path that cannot be written is a usage error (naming the file and the cause) before anything runs;
// write() prints the table (unless --summary none) through the output forwarder and writes the file, once.
class JobSummary {
 public:
  void open(const HvdrunOptions& options);
  void write(const JobSnapshot& job, std::chrono::steady_clock::time_point started, int exit_code,
             OutputForwarder& output);

 private:
  bool table_ = true;
  std::optional<std::string> path_;
  std::ofstream file_;
  bool written_ = false;
};

}  // namespace hvd::launcher
