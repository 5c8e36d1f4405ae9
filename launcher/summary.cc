#include "launcher/summary.h"

#include <string.h>

#include <cerrno>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "base/error.h"

namespace hvd::launcher {

using Phase = hvd::WorkerState;  // the job monitor's, not the launcher's own

std::string describeEnd(const WorkerView& w) {
  if (w.state != Phase::kExited) return "running";
  if (w.signal) {
    const char* name = ::strsignal(*w.signal);
    return detail::concat("signal ", *w.signal, " (", name ? name : "unknown", ")");
  }
  if (w.exit_code) return detail::concat("exit ", *w.exit_code);
  return w.exit_detail.empty() ? std::string("lost") : w.exit_detail;
}

namespace {

std::string formatCount(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::vector<const WorkerView*> byRank(const JobSnapshot& job) {
  std::vector<const WorkerView*> rows;
  for (const auto& w : job.workers) rows.push_back(&w);
  std::stable_sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->rank < b->rank; });
  return rows;
}

}  // namespace

std::string summaryTable(const JobSnapshot& job, double seconds, int exit_code) {
  const auto rows = byRank(job);
  const std::vector<std::string> header = {"rank", "host", "end", "wall s", "peak RSS", "collectives", "bytes"};
  std::vector<std::vector<std::string>> cells;
  int failed = 0;
  for (const auto* w : rows) {
    const bool reported = w->report.has_value();
    char wall[32];
    std::snprintf(wall, sizeof wall, "%.2f", w->run_seconds);
    cells.push_back({std::to_string(w->rank), w->host.empty() ? "-" : w->host, describeEnd(*w), wall,
                     w->peak_rss_bytes ? formatBytes(static_cast<double>(*w->peak_rss_bytes)) : "-",
                     reported ? formatCount(w->collectives()) : "-", reported ? formatBytes(static_cast<double>(w->bytes())) : "-"});
    if (w->state == Phase::kExited && !(w->exit_code && *w->exit_code == 0)) ++failed;
  }
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  // Text columns (host, end) align left, numbers right.
  auto line = [&](const std::vector<std::string>& row) {
    std::string out;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      out += "  ";
      out += (c == 1 || c == 2) ? row[c] + pad : pad + row[c];
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  char wall[32];
  std::snprintf(wall, sizeof wall, "%.1f", seconds);
  std::ostringstream out;
  out << "hvdrun: job summary: " << rows.size() << (rows.size() == 1 ? " rank" : " ranks") << " in " << wall
      << " s, exit code " << exit_code;
  if (failed > 0) out << ", " << failed << (failed == 1 ? " rank" : " ranks") << " did not exit 0";
  out << "\n" << line(header);
  for (const auto& row : cells) out << line(row);
  return out.str();
}

nlohmann::json summaryJson(const JobSnapshot& job, double seconds, int exit_code) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto* w : byRank(job)) {
    nlohmann::json by_op = nlohmann::json::object();
    if (w->report) {
      for (const auto& [op, c] : w->report->collectives) by_op[op] = {{"count", c.count}, {"bytes", c.bytes}};
    }
    const bool reported = w->report.has_value();
    ranks.push_back({{"rank", w->rank},
                     {"worker", w->id},
                     {"host", w->host},
                     {"pid", w->pid ? nlohmann::json(*w->pid) : nlohmann::json()},
                     {"state", hvd::toString(w->state)},
                     {"exit_code", w->exit_code ? nlohmann::json(*w->exit_code) : nlohmann::json()},
                     {"signal", w->signal ? nlohmann::json(*w->signal) : nlohmann::json()},
                     {"end", describeEnd(*w)},
                     {"seconds", w->run_seconds},
                     {"peak_rss_bytes", w->peak_rss_bytes ? nlohmann::json(*w->peak_rss_bytes) : nlohmann::json()},
                     {"collectives", reported ? nlohmann::json(w->collectives()) : nlohmann::json()},
                     {"bytes", reported ? nlohmann::json(w->bytes()) : nlohmann::json()},
                     {"by_op", reported ? by_op : nlohmann::json()}});
  }
  return {{"exit_code", exit_code}, {"seconds", seconds}, {"ranks", std::move(ranks)}};
}

void recordExit(Monitor& monitor, int id, const ExitStatus& status) {
  std::optional<int> code, signal;
  if (status.kind == ExitStatus::Kind::kExited) code = status.code;
  if (status.kind == ExitStatus::Kind::kSignaled) signal = status.signal;
  monitor.workerExited(id, code, signal, status.kind == ExitStatus::Kind::kLost ? status.describe() : status.detail,
                       status.peak_rss_bytes);
}

void JobSummary::open(const HvdrunOptions& options) {
  table_ = options.summary_table;
  path_ = options.summary_json;
  if (!path_) return;
  file_.open(*path_, std::ios::out | std::ios::trunc);
  if (!file_) {
    throw UsageError(detail::concat("argument --summary: cannot write '", *path_, "': ", ::strerror(errno)));
  }
}

void JobSummary::write(const JobSnapshot& job, std::chrono::steady_clock::time_point started, int exit_code,
                       OutputForwarder& output) {
  if (written_) return;
  written_ = true;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (table_) output.message(Stream::kStderr, summaryTable(job, seconds, exit_code));
  if (path_ && file_) {
    file_ << summaryJson(job, seconds, exit_code).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
          << "\n";
    file_.close();
    if (!file_) output.message(Stream::kStderr, "hvdrun: warning: could not write the summary to " + *path_ + "\n");
  }
}

}  // namespace hvd::launcher
