#include "rendezvous/status_html.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "base/error.h"
#include "rendezvous/status_page.h"
#include "rendezvous/status_page_assets.h"
#include "rendezvous/status_text.h"

namespace hvd::rendezvous {

namespace {

// Chart geometry, the same in the script (assets/status.js).
constexpr double kChartWidth = 1200, kChartLeft = 84, kChartRight = 1190, kPanelTop = 8, kPanelHeight = 90,
                 kPanelGap = 26;

std::string fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

void chartPanel(std::string& out, const JobSnapshot& s, int64_t now, int panel, const char* id, const char* title,
                double HistoryPoint::*field, bool bytes) {
  const double top = kPanelTop + panel * (kPanelHeight + kPanelGap);
  const double bottom = top + kPanelHeight;
  const double start = static_cast<double>(now - Monitor::kHistorySeconds);
  double max = 0;
  for (const auto& p : s.history) max = std::max(max, p.*field);
  const double scale = max > 0 ? max : 1;
  // One bar per second of (now - kHistorySeconds, now], as tall as that second's rate.
  const double bar = (kChartRight - kChartLeft) / Monitor::kHistorySeconds;
  std::string bars;
  size_t n = 0;
  for (const auto& p : s.history) {
    if (static_cast<double>(p.unix_s) <= start || p.unix_s > now) continue;
    const double x = kChartLeft + (static_cast<double>(p.unix_s) - start - 1) * bar;
    const double y = bottom - (p.*field) / scale * kPanelHeight;
    bars += detail::concat(bars.empty() ? "" : " ", "M", fixed1(x), ",", fixed1(bottom), "V", fixed1(y), "h",
                           fixed1(bar), "V", fixed1(bottom), "Z");
    ++n;
  }
  const std::string label = bytes ? formatBytes(max) + "/s" : formatRate(max) + "/s";
  out += detail::concat("<rect class=\"frame\" x=\"", kChartLeft, "\" y=\"", top, "\" width=\"",
                        kChartRight - kChartLeft, "\" height=\"", kPanelHeight, "\"/>");
  out += detail::concat("<text class=\"chart-title\" x=\"", kChartLeft + 8, "\" y=\"", top + 16, "\">", title,
                        "</text>");
  out += detail::concat("<text class=\"ymax\" x=\"", kChartLeft - 6, "\" y=\"", top + 10,
                        "\" text-anchor=\"end\">", htmlEscape(label), "</text>");
  out += detail::concat("<text x=\"", kChartLeft - 6, "\" y=\"", bottom, "\" text-anchor=\"end\">0</text>");
  out += detail::concat("<path class=\"series\" id=\"", id, "\" data-n=\"", n, "\" data-max=\"", number(max),
                        "\" d=\"", bars, "\"/>");
}

std::string chartSvg(const JobSnapshot& s, int64_t now) {
  const double height = kPanelTop + 2 * kPanelHeight + kPanelGap + 22;
  std::string out = detail::concat("<svg id=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 ",
                                   kChartWidth, " ", height, "\" role=\"img\" aria-label=\"throughput\">");
  chartPanel(out, s, now, 0, "chart-allreduce", "allreduce throughput", &HistoryPoint::allreduce_bytes_per_s, true);
  chartPanel(out, s, now, 1, "chart-collectives", "collectives per second", &HistoryPoint::collectives_per_s, false);
  const double axis = kPanelTop + 2 * kPanelHeight + kPanelGap + 16;
  const int minutes = Monitor::kHistorySeconds / 60;
  for (int i = 0; i <= minutes; ++i) {
    const double x = kChartLeft + static_cast<double>(i) / minutes * (kChartRight - kChartLeft);
    out += detail::concat("<text x=\"", fixed1(x), "\" y=\"", axis, "\" text-anchor=\"middle\">",
                          i == minutes ? std::string("now") : detail::concat("-", minutes - i, " min"), "</text>");
  }
  return out + "</svg>";
}

std::string countsHtml(const JobSnapshot& s, bool full) {
  std::string out = "<span id=\"counts\">";
  for (const auto& [state, n] : s.countByState()) {
    out += detail::concat("<span class=\"count\" data-state=\"", toString(state), "\" data-count=\"", n, "\">", n,
                          " ", toString(state), "</span>");
  }
  if (full) {
    int stuck = 0;
    for (const auto& w : s.workers) stuck += w.stuck ? 1 : 0;
    out += detail::concat("<span class=\"count\" data-state=\"stuck\" data-count=\"", stuck, "\">", stuck,
                          " stuck</span>");
  }
  return out + "</span>";
}

std::string workerRow(const JobSnapshot& s, const WorkerView& w) {
  std::string cls = "worker";
  if (w.stuck) cls += " stuck";
  if (failed(w)) cls += " failed";
  std::string out = detail::concat("<tr class=\"", cls, "\" data-id=\"", w.id, "\" data-rank=\"", w.rank,
                                   "\" data-state=\"", toString(w.state), "\" data-stuck=\"",
                                   w.stuck ? "true" : "false", "\"");
  if (w.state == WorkerState::kExited && w.exit_code) out += detail::concat(" data-exit-code=\"", *w.exit_code, "\"");
  if (w.state == WorkerState::kExited && w.signal) out += detail::concat(" data-signal=\"", *w.signal, "\"");
  out += ">";
  out += detail::concat("<td class=\"rank\">", w.rank, "</td>");
  out += "<td class=\"host\">" + htmlEscape(w.host) + "</td>";
  out += "<td class=\"pid\">" + (w.pid ? std::to_string(*w.pid) : std::string()) + "</td>";
  out += "<td class=\"state\"><span class=\"state-text\">" + htmlEscape(stateText(w)) + "</span>";
  for (const auto* wait : holdUps(s, w)) out += "<div class=\"holdup\">" + htmlEscape(holdUpText(*wait)) + "</div>";
  if (!w.exit_detail.empty()) out += "<div class=\"detail\">" + htmlEscape(w.exit_detail) + "</div>";
  if (w.restarts) out += detail::concat("<div class=\"detail\">restarted ", w.restarts, " times</div>");
  out += "</td>";
  out += "<td class=\"run-time\">" + formatDuration(w.run_seconds) + "</td>";
  out += detail::concat("<td class=\"collectives\" data-count=\"", w.collectives(), "\">", w.collectives());
  if (w.report && !w.report->collectives.empty()) {
    std::string ops;
    for (const auto& [op, c] : w.report->collectives) ops += detail::concat(ops.empty() ? "" : " · ", op, " ", c.count);
    out += "<div class=\"ops\">" + htmlEscape(ops) + "</div>";
  }
  out += "</td>";
  out += detail::concat("<td class=\"bytes\" data-bytes=\"", w.bytes(), "\">", formatBytes(static_cast<double>(w.bytes())),
                        "</td>");
  out += "<td class=\"rss\">" +
         (w.peak_rss_bytes ? formatBytes(static_cast<double>(*w.peak_rss_bytes)) : std::string()) + "</td>";
  out += "<td class=\"tail\">";
  for (const auto& line : w.tail) out += "<div class=\"line\">" + htmlEscape(line) + "</div>";
  return out + "</td></tr>";
}

std::string waitsHtml(const JobSnapshot& s) {
  std::string out = detail::concat("<div id=\"waits\" data-count=\"", s.waits.size(), "\">");
  if (s.waits.empty()) return out + "<p class=\"empty\">No collective is waiting for a rank.</p></div>";
  out += "<table><thead><tr><th>collective</th><th>tensor</th><th>process set</th><th>submitted by</th>"
         "<th>waits for</th><th>for</th></tr></thead><tbody>";
  const double stuck_after = std::chrono::duration<double>(Monitor::kStuckAfter).count();
  for (const auto& w : s.waits) {
    out += detail::concat("<tr class=\"wait", w.seconds >= stuck_after ? " stuck" : "", "\" data-op=\"",
                          htmlEscape(w.op), "\" data-name=\"", htmlEscape(w.name), "\" data-missing=\"",
                          htmlEscape(formatRanks(w.missing)), "\">");
    out += "<td class=\"op\">" + htmlEscape(w.op) + "</td><td class=\"name\">" + htmlEscape(w.name) + "</td>";
    out += detail::concat("<td class=\"process-set\">", w.process_set, "</td><td class=\"submitted\">",
                          formatRanks(w.submitted), "</td><td class=\"missing\">", formatRanks(w.missing),
                          "</td><td class=\"seconds\">", formatDuration(w.seconds), "</td></tr>");
  }
  return out + "</tbody></table></div>";
}

}  // namespace

std::string pageHtml(const JobSnapshot& s, bool full, int64_t now) {
  std::string out;
  out.reserve(32 * 1024);
  out += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
         "<link rel=\"icon\" href=\"data:,\">";
  out += "<title>hvd · " + htmlEscape(s.name) + "</title><style>\n" + kStatusPageStyle +
         "\n</style></head>\n";
  out += detail::concat("<body data-access=\"", full ? "full" : "overview", "\"><header><h1><span class=\"brand\">hvd</span>",
                        "<span id=\"job-name\">", htmlEscape(s.name), "</span></h1><div id=\"summary\">");
  out += detail::concat("<span id=\"uptime\" data-seconds=\"", number(s.uptime_s), "\">up ", formatDuration(s.uptime_s),
                        "</span>");
  out += detail::concat("<span id=\"size\" data-size=\"", s.size, "\">",
                        s.size ? detail::concat(s.size, " ranks planned") : std::string("ranks planned: unknown"),
                        "</span>");
  out += "<span id=\"round\">" + (full && s.round ? detail::concat("elastic round ", *s.round) : std::string()) + "</span>";
  out += countsHtml(s, full);
  out += "<span id=\"live\" data-live=\"false\">as served (the page updates itself when scripts run)</span>";
  out += "</div></header>\n<main id=\"details\">";
  if (!full) {
    out += kStatusPageAccessNote;
  } else {
    out += "<section id=\"workers-section\"><h2>Workers</h2><table id=\"workers\"><thead><tr><th>rank</th><th>host</th>"
           "<th>pid</th><th>state</th><th>run time</th><th>collectives</th><th>bytes</th><th>peak RSS</th>"
           "<th>last output</th></tr></thead><tbody>";
    for (const auto& w : s.workers) out += workerRow(s, w);
    out += "</tbody></table></section>";
    out += "<section id=\"waits-section\"><h2>Waits</h2>" + waitsHtml(s) + "</section>";
    out += detail::concat("<section id=\"chart-section\"><h2>Throughput, last ", Monitor::kHistorySeconds / 60,
                          " minutes</h2>", chartSvg(s, now), "</section>");
    uint64_t total = 0;
    for (const auto& [key, n] : s.requests.count) total += n;
    out += detail::concat("<footer id=\"requests\">rendezvous: ", total, " requests, ", s.requests.long_polls,
                          " long polls; stall warnings: ", s.stall_warnings, "; restarts: ", s.restarts,
                          s.rounds ? detail::concat("; elastic rounds: ", s.rounds) : std::string(), "</footer>");
  }
  out += "</main>\n<script>\n";
  out += kStatusPageScript;
  out += "\n</script></body></html>\n";
  return out;
}

}  // namespace hvd::rendezvous
