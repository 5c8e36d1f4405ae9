#include "base/report.h"

#include <cstdio>
#include <iterator>
#include <stdexcept>

namespace hvd {

namespace {

template <typename T>
T field(const nlohmann::json& json, const char* name, T fallback) {
  auto it = json.find(name);
  if (it == json.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw std::invalid_argument(std::string("report field '") + name + "' has the wrong type: " + it->dump());
  }
}

}  // namespace

nlohmann::json toJson(const RankReport& r) {
  nlohmann::json collectives = nlohmann::json::object();
  for (const auto& [op, c] : r.collectives) collectives[op] = {{"count", c.count}, {"bytes", c.bytes}};
  nlohmann::json waits = nlohmann::json::array();
  for (const auto& w : r.waits) {
    waits.push_back({{"name", w.name},
                     {"op", w.op},
                     {"process_set", w.process_set},
                     {"submitted", w.submitted},
                     {"missing", w.missing},
                     {"seconds", w.seconds}});
  }
  nlohmann::json out = {{"rank", r.rank},
                        {"size", r.size},
                        {"local_rank", r.local_rank},
                        {"host", r.host},
                        {"pid", r.pid},
                        {"round", r.round},
                        {"state", r.state},
                        {"uptime_s", r.uptime_s},
                        {"collectives", std::move(collectives)},
                        {"rss_bytes", r.rss_bytes},
                        {"peak_rss_bytes", r.peak_rss_bytes},
                        {"waits", std::move(waits)},
                        {"stall_warnings", r.stall_warnings}};
  if (r.id) out["id"] = *r.id;
  return out;
}

RankReport reportFromJson(const nlohmann::json& json) {
  if (!json.is_object()) throw std::invalid_argument("a report must be a JSON object, got " + json.dump());
  RankReport r;
  r.rank = field<int>(json, "rank", -1);
  if (r.rank < 0) throw std::invalid_argument("report without a valid 'rank'");
  r.size = field<int>(json, "size", 0);
  r.local_rank = field<int>(json, "local_rank", -1);
  r.host = field<std::string>(json, "host", "");
  r.pid = field<int64_t>(json, "pid", 0);
  if (json.contains("id") && !json["id"].is_null()) r.id = field<int>(json, "id", -1);
  r.round = field<uint64_t>(json, "round", 0);
  r.state = field<std::string>(json, "state", "running");
  if (r.state != "running" && r.state != "shutdown") {
    throw std::invalid_argument("report 'state' must be \"running\" or \"shutdown\", got \"" + r.state + "\"");
  }
  r.uptime_s = field<double>(json, "uptime_s", 0);
  if (auto it = json.find("collectives"); it != json.end() && !it->is_null()) {
    if (!it->is_object()) throw std::invalid_argument("report field 'collectives' must be an object");
    for (const auto& [op, c] : it->items()) {
      if (!c.is_object()) throw std::invalid_argument("report field 'collectives." + op + "' must be an object");
      r.collectives[op] = {field<uint64_t>(c, "count", 0), field<uint64_t>(c, "bytes", 0)};
    }
  }
  r.rss_bytes = field<uint64_t>(json, "rss_bytes", 0);
  r.peak_rss_bytes = field<uint64_t>(json, "peak_rss_bytes", 0);
  if (auto it = json.find("waits"); it != json.end() && !it->is_null()) {
    if (!it->is_array()) throw std::invalid_argument("report field 'waits' must be an array");
    for (const auto& w : *it) {
      if (!w.is_object()) throw std::invalid_argument("report field 'waits' must hold objects");
      r.waits.push_back({field<std::string>(w, "name", ""), field<std::string>(w, "op", ""),
                         field<int>(w, "process_set", 0), field<std::vector<int>>(w, "submitted", {}),
                         field<std::vector<int>>(w, "missing", {}), field<double>(w, "seconds", 0)});
    }
  }
  r.stall_warnings = field<uint64_t>(json, "stall_warnings", 0);
  return r;
}

std::string formatBytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  size_t unit = 0;
  while (bytes >= 1024 && unit + 1 < std::size(kUnits)) {
    bytes /= 1024;
    ++unit;
  }
  char buf[64];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", bytes, kUnits[unit]);
  }
  return buf;
}

}  // namespace hvd
