// /status.json's document (statusJson, declared in status_page.h).
#include "rendezvous/status_page.h"

#include <chrono>
#include <optional>

#include "rendezvous/status_text.h"

namespace hvd::rendezvous {

namespace {

nlohmann::json waitJson(const CollectiveWait& w) {
  return {{"name", w.name},       {"op", w.op},           {"process_set", w.process_set},
          {"submitted", w.submitted}, {"missing", w.missing}, {"seconds", w.seconds}};
}

template <typename T>
nlohmann::json orNull(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json workerJson(const JobSnapshot& s, const WorkerView& w) {
  nlohmann::json collectives = nlohmann::json::object();
  if (w.report) {
    for (const auto& [op, c] : w.report->collectives) collectives[op] = {{"count", c.count}, {"bytes", c.bytes}};
  }
  nlohmann::json holding_up = nlohmann::json::array();
  for (const auto* wait : holdUps(s, w)) {
    holding_up.push_back({{"name", wait->name}, {"op", wait->op}, {"process_set", wait->process_set},
                          {"seconds", wait->seconds}});
  }
  nlohmann::json report = nullptr;
  if (w.report) {
    report = {{"size", w.report->size},         {"local_rank", w.report->local_rank},
              {"round", w.report->round},       {"state", w.report->state},
              {"uptime_s", w.report->uptime_s}, {"rss_bytes", w.report->rss_bytes},
              {"peak_rss_bytes", w.report->peak_rss_bytes}, {"stall_warnings", w.report->stall_warnings}};
  }
  return {{"id", w.id},
          {"rank", w.rank},
          {"host", w.host},
          {"pid", orNull(w.pid)},
          {"state", toString(w.state)},
          {"state_text", stateText(w)},
          {"failed", failed(w)},
          {"exit_code", orNull(w.exit_code)},
          {"signal", orNull(w.signal)},
          {"signal_name", w.signal ? nlohmann::json(signalName(*w.signal)) : nlohmann::json(nullptr)},
          {"exit_detail", w.exit_detail},
          {"run_s", w.run_seconds},
          {"peak_rss_bytes", orNull(w.peak_rss_bytes)},
          {"restarts", w.restarts},
          {"stuck", w.stuck},
          {"stuck_s", w.stuck_seconds},
          {"holding_up", std::move(holding_up)},
          {"tail", w.tail},
          {"collectives", std::move(collectives)},
          {"collectives_total", w.collectives()},
          {"bytes_total", w.bytes()},
          {"report", std::move(report)}};
}

}  // namespace

nlohmann::json statusJson(const JobSnapshot& s, bool full, int64_t now_unix_s) {
  nlohmann::json counts = nlohmann::json::object();
  for (const auto& [state, n] : s.countByState()) counts[toString(state)] = n;
  nlohmann::json out = {{"access", full ? "full" : "overview"},
                        {"name", s.name},
                        {"uptime_s", s.uptime_s},
                        {"size", s.size},
                        {"counts", std::move(counts)},
                        {"now_unix_s", now_unix_s}};
  if (!full) return out;
  out["round"] = orNull(s.round);
  out["rounds"] = s.rounds;
  out["restarts"] = s.restarts;
  out["stall_warnings"] = s.stall_warnings;
  out["stuck_after_s"] = std::chrono::duration<double>(Monitor::kStuckAfter).count();
  out["history_seconds"] = Monitor::kHistorySeconds;
  int stuck = 0;
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& w : s.workers) {
    stuck += w.stuck ? 1 : 0;
    workers.push_back(workerJson(s, w));
  }
  out["stuck"] = stuck;
  out["workers"] = std::move(workers);
  nlohmann::json waits = nlohmann::json::array();
  for (const auto& w : s.waits) waits.push_back(waitJson(w));
  out["waits"] = std::move(waits);
  nlohmann::json history = nlohmann::json::array();
  for (const auto& p : s.history) {
    history.push_back(
        {{"t", p.unix_s}, {"allreduce_bytes_per_s", p.allreduce_bytes_per_s}, {"collectives_per_s", p.collectives_per_s}});
  }
  out["history"] = std::move(history);
  nlohmann::json by = nlohmann::json::array();
  uint64_t total = 0;
  for (const auto& [key, n] : s.requests.count) {
    by.push_back({{"method", key.first}, {"code", key.second}, {"count", n}});
    total += n;
  }
  nlohmann::json buckets = nlohmann::json::array();
  for (size_t i = 0; i < std::size(RequestStats::kBuckets); ++i) {
    buckets.push_back({{"le", RequestStats::kBuckets[i]}, {"count", s.requests.latency_buckets.at(i)}});
  }
  out["requests"] = {{"total", total},
                     {"long_polls", s.requests.long_polls},
                     {"by_method_code", std::move(by)},
                     {"latency", {{"count", s.requests.latency_count},
                                  {"sum_s", s.requests.latency_sum},
                                  {"buckets", std::move(buckets)}}}};
  return out;
}

}  // namespace hvd::rendezvous
