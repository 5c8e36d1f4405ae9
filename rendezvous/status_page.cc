#include "rendezvous/status_page.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <vector>

#include "base/error.h"
#include "rendezvous/status_page_assets.h"
#include "rendezvous/token.h"

namespace hvd::rendezvous {

namespace http = boost::beast::http;

namespace {

// ---------------------------------------------------------------------------------------------------------
// Text helpers

const char* const kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// The number of bytes of a valid UTF-8 sequence at text[i], or 0 when the bytes there are not one.
size_t utf8SequenceAt(std::string_view text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte (Unicode's table 3-7)
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c == 0xE0) {
    n = 3, lo = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    n = 3;
  } else if (c == 0xED) {
    n = 3, hi = 0x9F;  // no surrogates
  } else if (c == 0xF0) {
    n = 4, lo = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3) {
    n = 4;
  } else if (c == 0xF4) {
    n = 4, hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(k) < 0x80 || b(k) > 0xBF) return 0;
  }
  return n;
}

// Appends `number` as Prometheus and people read it: integers as integers, others in the shortest form
// that reads back as the same double ("0.25", "0.0001", "1e-07").
void appendNumber(std::string& out, double number) {
  if (std::isnan(number)) {
    out += "NaN";
    return;
  }
  if (std::isinf(number)) {
    out += number > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[64];
  if (number == std::floor(number) && std::fabs(number) < 1e18) {
    // Counters and byte counts as integers ("6291456", not "6.291456e+06").
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, static_cast<int64_t>(number));
    out.append(buf, ec == std::errc() ? end : buf);
    return;
  }
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, number, std::chars_format::general);
  out.append(buf, ec == std::errc() ? end : buf);
}

std::string number(double value) {
  std::string out;
  appendNumber(out, value);
  return out;
}

// "12 s", "3 min 4 s", "2 h 5 min" (the page's script formats the same way).
std::string formatDuration(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, std::floor(seconds)));
  if (s < 60) return detail::concat(s, " s");
  if (s < 3600) return detail::concat(s / 60, " min ", s % 60, " s");
  return detail::concat(s / 3600, " h ", (s % 3600) / 60, " min");
}

// "35", "2.5" (rates below 10 with one decimal).
std::string formatRate(double rate) {
  char buf[64];
  std::snprintf(buf, sizeof buf, rate < 10 && rate != std::floor(rate) ? "%.1f" : "%.0f", rate);
  return buf;
}

// "0-3, 5, 7-8": sorted ranks with runs folded.
std::string formatRanks(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += detail::concat(j == i + 1 ? ", " : "-", ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string signalName(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  return abbrev ? std::string("SIG") + abbrev : detail::concat("signal ", signal);
}

// The state as a person reads it: "running", "exited 0", "killed by SIGKILL (9)".
std::string stateText(const WorkerView& w) {
  if (w.state == WorkerState::kExited) {
    if (w.signal) return detail::concat("killed by ", signalName(*w.signal), " (", *w.signal, ")");
    if (w.exit_code) return detail::concat("exited ", *w.exit_code);
    return "exited";
  }
  if (w.state == WorkerState::kRunning && w.report && w.report->state == "shutdown") return "running (shut down)";
  return toString(w.state);
}

bool failed(const WorkerView& w) {
  return w.state == WorkerState::kExited && (w.signal || (w.exit_code && *w.exit_code != 0));
}

// The waits a stuck worker holds up, as the page says them.
std::vector<const CollectiveWait*> holdUps(const JobSnapshot& s, const WorkerView& w) {
  std::vector<const CollectiveWait*> out;
  if (!w.stuck) return out;
  const double stuck_after = std::chrono::duration<double>(Monitor::kStuckAfter).count();
  for (const auto& wait : s.waits) {
    if (wait.seconds >= stuck_after && std::count(wait.missing.begin(), wait.missing.end(), w.rank)) {
      out.push_back(&wait);
    }
  }
  return out;
}

std::string holdUpText(const CollectiveWait& wait) {
  return detail::concat(wait.op, " '", wait.name, "' waits for this rank for ", formatDuration(wait.seconds));
}

int64_t unixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------------------------------------------------
// Requests and access

enum class Access { kFull, kOverview };

struct Judgement {
  Access access = Access::kOverview;
  std::optional<std::string> refusal;  // a wrong credential: the 403's message
  bool credential = false;             // some credential was presented
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

Judgement judge(const Request& req, const ServerOptions& options, const PeerInfo& peer) {
  Judgement j;
  if (!options.token) {
    j.access = Access::kFull;
    return j;
  }
  const std::string& token = *options.token;
  bool right = false;
  if (auto it = req.find(kTokenHeader); it != req.end()) {
    j.credential = true;
    if (tokensEqual(std::string_view(it->value().data(), it->value().size()), token)) {
      right = true;
    } else {
      j.refusal = std::string("wrong ") + kTokenHeader;
    }
  }
  if (auto it = req.find(http::field::authorization); it != req.end()) {
    const std::string_view value = trim(std::string_view(it->value().data(), it->value().size()));
    const auto space = value.find(' ');
    // Other schemes (a proxy's Basic credentials) are not ours: ignored.
    if (space != std::string_view::npos && equalsIgnoreCase(value.substr(0, space), "Bearer")) {
      j.credential = true;
      if (tokensEqual(trim(value.substr(space + 1)), token)) {
        right = true;
      } else if (!j.refusal) {
        j.refusal = "wrong token in Authorization: Bearer";
      }
    }
  }
  bool cookie_wrong = false;
  const auto cookies = req.equal_range(http::field::cookie);
  for (auto field = cookies.first; field != cookies.second; ++field) {
    std::string_view rest(field->value().data(), field->value().size());
    while (!rest.empty()) {
      const auto semi = rest.find(';');
      const std::string_view pair = trim(rest.substr(0, semi));
      rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
      const auto eq = pair.find('=');
      if (eq == std::string_view::npos || trim(pair.substr(0, eq)) != kTokenCookie) continue;
      j.credential = true;
      const auto value = percentDecode(trim(pair.substr(eq + 1)));
      if (value && tokensEqual(*value, token)) {
        right = true;
      } else {
        cookie_wrong = true;
      }
    }
  }
  if (j.refusal) return j;
  if (right || peer.same_user) {
    // A stale cookie (an earlier job on this port) does not lock this user out of their own job.
    j.access = Access::kFull;
    return j;
  }
  if (cookie_wrong) {
    j.refusal = std::string("the ") + kTokenCookie +
                " cookie holds a wrong token (set for another job on this port?): open /?token=TOKEN with this "
                "job's token";
  }
  return j;
}

void setCommonHeaders(Response& res, const Request& req) {
  res.set(http::field::server, "hvd-rendezvous");
  res.set(http::field::cache_control, "no-store");
  res.set("X-Content-Type-Options", "nosniff");
  res.set("Referrer-Policy", "no-referrer");
  res.keep_alive(req.keep_alive());
}

Response makeResponse(const Request& req, http::status status, std::string body, const char* content_type) {
  Response res{status, req.version()};
  setCommonHeaders(res, req);
  res.set(http::field::content_type, content_type);
  res.body() = std::move(body);
  res.prepare_payload();
  if (req.method() == http::verb::head) res.body().clear();  // Content-Length stays the GET's
  return res;
}

// One line, naming what was wrong.
Response textError(const Request& req, http::status status, const std::string& message) {
  return makeResponse(req, status, "status port: " + message + "\n", "text/plain; charset=utf-8");
}

// A request target for a message: at most 200 bytes, valid UTF-8, no control characters.
std::string quoteTarget(std::string_view target) {
  std::string shown = validUtf8(target.substr(0, 200));
  for (char& c : shown) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return "'" + shown + (target.size() > 200 ? "...'" : "'");
}

// ---------------------------------------------------------------------------------------------------------
// JSON

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

std::string validUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8SequenceAt(text, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string htmlEscape(std::string_view text) {
  const std::string valid = validUtf8(text);
  std::string out;
  out.reserve(valid.size() + valid.size() / 8);
  for (char c : valid) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) {
          out += kReplacement;
        } else {
          out += c;
        }
    }
  }
  return out;
}

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

// ---------------------------------------------------------------------------------------------------------
// Prometheus

namespace {

std::string labelValue(std::string_view value) {
  std::string out;
  for (char c : validUtf8(value)) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class Metrics {
 public:
  void family(const char* name, const char* type, const char* help) {
    out_ += detail::concat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  using Labels = std::vector<std::pair<const char*, std::string>>;
  void sample(const std::string& name, const Labels& labels, double value) {
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        out_ += detail::concat(i ? "," : "", labels[i].first, "=\"", labelValue(labels[i].second), "\"");
      }
      out_ += '}';
    }
    out_ += ' ';
    appendNumber(out_, value);
    out_ += '\n';
  }
  void sample(const std::string& name, double value) { sample(name, {}, value); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

Metrics::Labels workerLabels(const WorkerView& w) {
  return {{"rank", std::to_string(w.rank)}, {"worker", std::to_string(w.id)}};
}

}  // namespace

std::string prometheusText(const JobSnapshot& s) {
  Metrics m;
  m.family("hvd_job_uptime_seconds", "gauge", "Seconds since the job's rendezvous server started.");
  m.sample("hvd_job_uptime_seconds", s.uptime_s);
  m.family("hvd_job_size", "gauge", "Ranks the job plans (0: not known, as to hvd-rendezvous).");
  m.sample("hvd_job_size", s.size);

  m.family("hvd_workers", "gauge", "Workers by state (starting, joined, running, exited).");
  for (const auto& [state, n] : s.countByState()) m.sample("hvd_workers", {{"state", toString(state)}}, n);
  m.family("hvd_worker_up", "gauge", "1 while the worker has not been seen to exit, else 0.");
  for (const auto& w : s.workers) {
    auto labels = workerLabels(w);
    labels.emplace_back("host", w.host);
    m.sample("hvd_worker_up", labels, w.state == WorkerState::kExited ? 0 : 1);
  }
  m.family("hvd_worker_exit_code", "gauge", "Exit code of a worker that exited normally.");
  for (const auto& w : s.workers) {
    if (w.state == WorkerState::kExited && w.exit_code) m.sample("hvd_worker_exit_code", workerLabels(w), *w.exit_code);
  }
  m.family("hvd_worker_exit_signal", "gauge", "Signal number that killed a worker.");
  for (const auto& w : s.workers) {
    if (w.state == WorkerState::kExited && w.signal) m.sample("hvd_worker_exit_signal", workerLabels(w), *w.signal);
  }
  m.family("hvd_worker_run_seconds", "gauge", "Seconds from the worker's start to its exit, or to now.");
  for (const auto& w : s.workers) m.sample("hvd_worker_run_seconds", workerLabels(w), w.run_seconds);
  m.family("hvd_worker_stuck", "gauge",
           "1 when a collective has waited for this worker's rank longer than the stuck threshold, else 0.");
  for (const auto& w : s.workers) m.sample("hvd_worker_stuck", workerLabels(w), w.stuck ? 1 : 0);
  m.family("hvd_worker_rss_bytes", "gauge", "Resident set size in the worker's latest report (VmRSS; no sample when unknown).");
  for (const auto& w : s.workers) {
    if (w.report && w.report->rss_bytes) {
      m.sample("hvd_worker_rss_bytes", workerLabels(w), static_cast<double>(w.report->rss_bytes));
    }
  }
  m.family("hvd_worker_peak_rss_bytes", "gauge",
           "Peak resident set size: the launcher's measurement at exit, else the latest report's VmHWM.");
  for (const auto& w : s.workers) {
    if (w.peak_rss_bytes) m.sample("hvd_worker_peak_rss_bytes", workerLabels(w), static_cast<double>(*w.peak_rss_bytes));
  }
  m.family("hvd_worker_restarts_total", "counter", "Workers the elastic driver started again.");
  m.sample("hvd_worker_restarts_total", static_cast<double>(s.restarts));

  m.family("hvd_collectives_total", "counter", "Collectives completed by the worker's runtime, by op.");
  for (const auto& w : s.workers) {
    if (!w.report) continue;
    for (const auto& [op, c] : w.report->collectives) {
      auto labels = workerLabels(w);
      labels.emplace_back("op", op);
      m.sample("hvd_collectives_total", labels, static_cast<double>(c.count));
    }
  }
  m.family("hvd_collective_bytes_total", "counter", "Bytes of the tensors given to completed collectives, by op.");
  for (const auto& w : s.workers) {
    if (!w.report) continue;
    for (const auto& [op, c] : w.report->collectives) {
      auto labels = workerLabels(w);
      labels.emplace_back("op", op);
      m.sample("hvd_collective_bytes_total", labels, static_cast<double>(c.bytes));
    }
  }
  double longest = 0;
  for (const auto& w : s.waits) longest = std::max(longest, w.seconds);
  int stuck = 0;
  for (const auto& w : s.workers) stuck += w.stuck ? 1 : 0;
  m.family("hvd_collective_waits", "gauge", "Collectives some ranks submitted and others have not (rank 0's view).");
  m.sample("hvd_collective_waits", static_cast<double>(s.waits.size()));
  m.family("hvd_collective_wait_seconds", "gauge", "Age of the longest current wait (0 when none).");
  m.sample("hvd_collective_wait_seconds", longest);
  m.family("hvd_stalled_workers", "gauge", "Workers a collective has waited for longer than the stuck threshold.");
  m.sample("hvd_stalled_workers", stuck);
  m.family("hvd_stall_warnings_total", "counter", "Stall warnings rank 0's runtime has logged.");
  m.sample("hvd_stall_warnings_total", static_cast<double>(s.stall_warnings));

  m.family("hvd_elastic_round", "gauge", "The elastic job's current round (no sample when not elastic).");
  if (s.round) m.sample("hvd_elastic_round", static_cast<double>(*s.round));
  m.family("hvd_elastic_rounds_total", "counter", "Elastic rounds begun.");
  m.sample("hvd_elastic_rounds_total", static_cast<double>(s.rounds));

  m.family("hvd_rendezvous_requests_total", "counter", "Requests the rendezvous port answered, by method and status.");
  for (const auto& [key, n] : s.requests.count) {
    m.sample("hvd_rendezvous_requests_total", {{"method", key.first}, {"code", std::to_string(key.second)}},
             static_cast<double>(n));
  }
  m.family("hvd_rendezvous_request_duration_seconds", "histogram",
           "Time to answer a rendezvous request that did not wait for a key.");
  for (size_t i = 0; i < std::size(RequestStats::kBuckets); ++i) {
    m.sample("hvd_rendezvous_request_duration_seconds_bucket", {{"le", number(RequestStats::kBuckets[i])}},
             static_cast<double>(s.requests.latency_buckets.at(i)));
  }
  m.sample("hvd_rendezvous_request_duration_seconds_bucket", {{"le", "+Inf"}},
           static_cast<double>(s.requests.latency_count));
  m.sample("hvd_rendezvous_request_duration_seconds_sum", s.requests.latency_sum);
  m.sample("hvd_rendezvous_request_duration_seconds_count", static_cast<double>(s.requests.latency_count));
  m.family("hvd_rendezvous_long_polls_total", "counter", "Rendezvous requests that waited for a key (long polls).");
  m.sample("hvd_rendezvous_long_polls_total", static_cast<double>(s.requests.long_polls));
  return m.take();
}

// ---------------------------------------------------------------------------------------------------------
// HTML

namespace {

constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
    "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

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

// The token query parameter of "/?...", decoded; nullopt when absent. Throws std::invalid_argument for a
// malformed %-escape.
std::optional<std::string> tokenParameter(std::string_view query) {
  std::optional<std::string> token;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const auto eq = pair.find('=');
    if (pair.substr(0, eq) != "token") continue;
    std::string raw(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    std::replace(raw.begin(), raw.end(), '+', ' ');
    auto decoded = percentDecode(raw);
    if (!decoded) throw std::invalid_argument("malformed %-escape in the token parameter");
    token = std::move(*decoded);
  }
  return token;
}

}  // namespace

Response handleStatus(const Request& req, const Monitor& monitor, const ServerOptions& options,
                      const PeerInfo& peer) {
  const std::string_view target(req.target().data(), req.target().size());
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    Response res = textError(req, http::status::method_not_allowed,
                             "method '" + validUtf8(std::string_view(req.method_string().data(),
                                                                     req.method_string().size())) +
                                 "' not allowed; use GET or HEAD");
    res.set(http::field::allow, "GET, HEAD");
    return res;
  }
  if (target.size() > kMaxStatusTargetBytes) {
    return textError(req, http::status::uri_too_long,
                     detail::concat("request target of ", target.size(), " bytes exceeds the limit of ",
                                    kMaxStatusTargetBytes, " bytes"));
  }
  const auto q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const std::string_view query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  if (path != "/" && path != "/status.json" && path != "/metrics") {
    return textError(req, http::status::not_found,
                     "no page " + quoteTarget(path) + "; there are /, /status.json and /metrics");
  }

  if (path == "/") {
    std::optional<std::string> token;
    try {
      token = tokenParameter(query);
    } catch (const std::invalid_argument& e) {
      return textError(req, http::status::bad_request, e.what());
    }
    if (token) {
      if (options.token && !tokensEqual(*token, *options.token)) {
        return textError(req, http::status::forbidden, "wrong token in /?token=");
      }
      Response res = makeResponse(req, http::status::see_other, "see /\n", "text/plain; charset=utf-8");
      res.set(http::field::location, "/");
      if (options.token) {
        res.set(http::field::set_cookie, detail::concat(kTokenCookie, "=", percentEncode(*token),
                                                        "; Path=/; HttpOnly; SameSite=Strict"));
      }
      return res;
    }
  }

  const Judgement judgement = judge(req, options, peer);
  if (judgement.refusal) return textError(req, http::status::forbidden, *judgement.refusal);
  const bool full = judgement.access == Access::kFull;
  const JobSnapshot snapshot = monitor.snapshot();
  const int64_t now = unixNow();

  if (path == "/metrics") {
    if (!full) {
      Response res = textError(req, http::status::unauthorized,
                               std::string("/metrics needs the job token (") + kTokenHeader +
                                   " or Authorization: Bearer) or a loopback connection of this server's user");
      res.set(http::field::www_authenticate, "Bearer realm=\"hvd\"");
      return res;
    }
    return makeResponse(req, http::status::ok, prometheusText(snapshot), "text/plain; version=0.0.4; charset=utf-8");
  }
  if (path == "/status.json") {
    return makeResponse(req, http::status::ok,
                        statusJson(snapshot, full, now).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                            "\n",
                        "application/json");
  }
  Response res = makeResponse(req, http::status::ok, pageHtml(snapshot, full, now), "text/html; charset=utf-8");
  res.set("Content-Security-Policy", kContentSecurityPolicy);
  return res;
}

}  // namespace hvd::rendezvous
