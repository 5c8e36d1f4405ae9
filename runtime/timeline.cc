#include "runtime/timeline.h"

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace hvd::runtime {
namespace {

std::string upper(const char* s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

Timeline::Timeline(const std::optional<std::string>& path, bool mark_cycles)
    : file_(path ? std::fopen(path->c_str(), "w") : nullptr), mark_cycles_(mark_cycles), start_(Clock::now()) {
  if (!file_) return;
  std::fputs("[\n", file_);
  const auto wall = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  write(detail::concat(R"({"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros": )",
                       wall, "}}"));
  write(R"({"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}})");
}

Timeline::~Timeline() {
  if (!file_) return;
  std::fputs("\n]\n", file_);
  std::fclose(file_);
}

int64_t Timeline::now() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count();
}

void Timeline::write(const std::string& record) {
  if (!first_record_) std::fputs(",\n", file_);
  first_record_ = false;
  std::fputs(record.c_str(), file_);
}

int Timeline::pid(const std::string& name) {
  auto [it, inserted] = pids_.try_emplace(name, static_cast<int>(pids_.size()) + 1);
  if (inserted) {
    write(detail::concat(R"({"name": "process_name", "ph": "M", "pid": )", it->second,
                         R"(, "args": {"name": )", nlohmann::json(name).dump(), "}}"));
    write(detail::concat(R"({"name": "process_sort_index", "ph": "M", "pid": )", it->second,
                         R"(, "args": {"sort_index": )", it->second, "}}"));
  }
  return it->second;
}

void Timeline::queued(const std::string& name, Clock::time_point enqueued, Clock::time_point taken) {
  if (!file_) return;
  const auto ts = std::chrono::duration_cast<std::chrono::microseconds>(enqueued - start_).count();
  const auto dur = std::chrono::duration_cast<std::chrono::microseconds>(taken - enqueued).count();
  write(detail::concat(R"({"ph": "X", "name": "QUEUE", "ts": )", ts, R"(, "pid": )", pid(name), R"(, "dur": )", dur,
                       "}"));
}

void Timeline::negotiateRank(const std::string& name, OpType type, int rank) {
  if (!file_) return;
  const int p = pid(name);
  const auto t = now();
  if (negotiating_.insert(name).second) {
    write(detail::concat(R"({"ph": "B", "name": "NEGOTIATE_)", upper(runtime::name(type)), R"(", "ts": )", t,
                         R"(, "pid": )", p, "}"));
  }
  write(detail::concat(R"({"ph": "X", "name": ")", rank, R"(", "ts": )", t, R"(, "pid": )", p, R"(, "dur": 0})"));
}

void Timeline::negotiateEnd(const std::string& name) {
  if (!file_ || !negotiating_.erase(name)) return;
  write(detail::concat(R"({"ph": "E", "ts": )", now(), R"(, "pid": )", pid(name), "}"));
}

void Timeline::start(const std::string& name, OpType type) {
  if (!file_) return;
  write(detail::concat(R"({"ph": "B", "name": ")", upper(runtime::name(type)), R"(", "ts": )", now(), R"(, "pid": )",
                       pid(name), "}"));
}

void Timeline::activityStart(const std::vector<std::string>& names, const char* activity) {
  if (!file_) return;
  const auto t = now();
  for (const auto& name : names) {
    write(detail::concat(R"({"ph": "B", "name": ")", activity, R"(", "ts": )", t, R"(, "pid": )", pid(name), "}"));
    ++open_activities_[name];
  }
}

void Timeline::activityStart(const std::vector<std::string>& names, const char* path, const char* what) {
  if (!file_) return;
  activityStart(names, detail::concat(path, "_", what).c_str());
}

void Timeline::activityEnd(const std::vector<std::string>& names) {
  if (!file_) return;
  const auto t = now();
  for (const auto& name : names) {
    auto it = open_activities_.find(name);
    if (it == open_activities_.end()) continue;
    write(detail::concat(R"({"ph": "E", "ts": )", t, R"(, "pid": )", pid(name), "}"));
    if (--it->second == 0) open_activities_.erase(it);
  }
}

void Timeline::end(const std::string& name, const std::string& dtype, const std::string& shape) {
  if (!file_) return;
  activityEnd({name});  // End closes an open activity first (Horovod's state machine)
  std::string args;
  if (!dtype.empty()) {
    args = detail::concat(R"(, "args": {"dtype": ")", dtype, R"(", "shape": ")", shape, R"("})");
  }
  write(detail::concat(R"({"ph": "E", "ts": )", now(), R"(, "pid": )", pid(name), args, "}"));
  std::fflush(file_);
}

void Timeline::cycleStart() {
  if (!file_ || !mark_cycles_) return;
  write(detail::concat(R"({"ph": "i", "name": "CYCLE_START", "ts": )", now(), R"(, "s": "g"})"));
}

}  // namespace hvd::runtime
