// HOROVOD_TIMELINE: a Chrome-trace JSON file (chrome://tracing, Perfetto) written by rank 0, in
// Horovod's layout: every tensor is a "process" (pid = first-seen order) with
//   QUEUE                          X event: from the user's enqueue until the background thread took it
//   NEGOTIATE_<OP>                 B/E: first rank's request until every rank's arrived; X "<rank>" per rank
//   <OP>                           B/E: execution, with nested activities
//     MEMCPY_IN_FUSION_BUFFER, GLOO_ALLREDUCE, GLOO_ALLGATHER, GLOO_BCAST, GLOO_ALLTOALL,
//     GLOO_REDUCESCATTER, GLOO_BARRIER, MEMCPY_OUT_FUSION_BUFFER
//   the final E carries args {"dtype", "shape"}
//   CYCLE_START                    instant events when HOROVOD_TIMELINE_MARK_CYCLES is set
// Timestamps: microseconds since the timeline opened (steady clock).
//
// Deviation: the file is a complete JSON array once libhvd shuts down (Horovod rewrites the closing
// bracket after every record); a process killed mid-run leaves it without the final "]".
// Threading: used by the background thread only.
#pragma once

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/work.h"

namespace hvd::runtime {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  // Opens path for writing. No path (not rank 0, HOROVOD_TIMELINE unset) or a failed open: every call
  // is a no-op and enabled() is false (the caller logs the failure).
  Timeline(const std::optional<std::string>& path, bool mark_cycles);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  bool enabled() const { return file_ != nullptr; }

  void queued(const std::string& name, Clock::time_point enqueued, Clock::time_point taken);
  void negotiateRank(const std::string& name, OpType type, int rank);  // opens NEGOTIATE_ on the first
  void negotiateEnd(const std::string& name);
  void start(const std::string& name, OpType type);
  void activityStart(const std::vector<std::string>& names, const char* activity);
  // The activity "<path>_<what>" of a data path ("SHM" + "ALLREDUCE"), built only when writing.
  void activityStart(const std::vector<std::string>& names, const char* path, const char* what);
  void activityEnd(const std::vector<std::string>& names);
  void end(const std::string& name, const std::string& dtype, const std::string& shape);
  void cycleStart();

 private:
  int pid(const std::string& name);
  int64_t now() const;
  void write(const std::string& record);

  std::FILE* file_ = nullptr;
  bool mark_cycles_;
  Clock::time_point start_;
  std::map<std::string, int> pids_;
  std::set<std::string> negotiating_;
  std::map<std::string, int> open_activities_;  // names with an activity inside their top-level event
  bool first_record_ = true;
};

}  // namespace hvd::runtime
