// What a worker's runtime reports about itself, and how sizes are shown: the status-report model shared by
// the runtime (which fills RankReports, runtime/reporter.h), the rendezvous server (which keeps them,
// base/job_monitor.h, and serves them on the status port) and hvdrun's end-of-job summary.
//
// On the wire a report is JSON (PUT /_hvd/report/<rank> on the rendezvous port): toJson() and
// reportFromJson() below; a field missing from the JSON takes its default, so older and newer workers
// interoperate.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hvd {

// Counters of one kind of collective on one rank since its runtime started.
struct CollectiveCount {
  uint64_t count = 0;  // operations completed (a fused response counts each tensor)
  uint64_t bytes = 0;  // bytes of the tensors given to them (the input size, as Horovod's timeline counts)
};

// A collective that rank 0's negotiation has seen from some ranks and not from others.
struct CollectiveWait {
  std::string name;            // the tensor's name
  std::string op;              // "allreduce", "allgather", "broadcast", "alltoall", "reducescatter", ...
  int process_set = 0;
  std::vector<int> submitted;  // ranks that submitted it
  std::vector<int> missing;    // ranks it waits for
  double seconds = 0;          // since the first rank submitted it
};

// What a worker's runtime reports (JSON on the wire; toJson/fromJson below).
struct RankReport {
  int rank = -1, size = 0, local_rank = -1;
  std::string host;       // the host name the worker runs on (gethostname)
  int64_t pid = 0;
  std::optional<int> id;  // HVD_WORKER_ID when the launcher set it
  uint64_t round = 0;     // elastic round (0: not elastic)
  std::string state;      // "running" or "shutdown"
  double uptime_s = 0;    // since hvd_init
  std::map<std::string, CollectiveCount> collectives;  // by op name (CollectiveWait::op)
  uint64_t rss_bytes = 0, peak_rss_bytes = 0;           // VmRSS, VmHWM
  std::vector<CollectiveWait> waits;                    // rank 0 only
  uint64_t stall_warnings = 0;                          // rank 0 only: stall warnings logged so far
};
nlohmann::json toJson(const RankReport& report);
// Throws std::invalid_argument naming the field for a body that is not a report.
RankReport reportFromJson(const nlohmann::json& json);

// "512 B", "1.5 KiB", "12.0 MiB": how the status page and hvdrun's summary show sizes (the page's script
// formats the same way).
std::string formatBytes(double bytes);

}  // namespace hvd
