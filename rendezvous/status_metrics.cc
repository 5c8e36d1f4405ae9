// /metrics' body in Prometheus' text format 0.0.4 (prometheusText, declared in status_page.h).
#include "rendezvous/status_page.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "rendezvous/status_text.h"

namespace hvd::rendezvous {

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

// A counter family with one sample per worker and op: `field` of the worker's last report's counts.
void perOpCounter(Metrics& m, const JobSnapshot& s, const char* name, const char* help,
                  uint64_t CollectiveCount::*field) {
  m.family(name, "counter", help);
  for (const auto& w : s.workers) {
    if (!w.report) continue;
    for (const auto& [op, c] : w.report->collectives) {
      auto labels = workerLabels(w);
      labels.emplace_back("op", op);
      m.sample(name, labels, static_cast<double>(c.*field));
    }
  }
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

  perOpCounter(m, s, "hvd_collectives_total", "Collectives completed by the worker's runtime, by op.",
               &CollectiveCount::count);
  perOpCounter(m, s, "hvd_collective_bytes_total",
               "Bytes of the tensors given to completed collectives, by op.", &CollectiveCount::bytes);
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

}  // namespace hvd::rendezvous
