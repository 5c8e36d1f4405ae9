// Autotune (HOROVOD_AUTOTUNE=1): the coordinator tunes, online and by measurement, what decides the speed
// of this runtime: the fusion threshold, the fusion window (HOROVOD_CYCLE_TIME) and, on jobs that can
// take it, the allreduce path (hierarchical or flat). Pure logic: rank 0's background thread feeds it the
// allreduces it executes and applies what it returns (the fusion settings are the coordinator's alone;
// the path travels to every rank in the response list, so all switch at the same operation).
//
// Scoring, as Horovod's: a sample is steps_per_sample training steps (a step ends when some tensor name
// comes back), its score the allreduced bytes per microsecond over it. The first warmup_samples samples
// are discarded. Then each tunable is searched in turn, over a few candidate values, with the others at
// their best so far (coordinate descent over a grid; Horovod runs a Gaussian-process Bayesian optimiser
// over fusion and cycle time, which needs many more samples than a training job gives it to settle).
//
// Must not lose: the search ends with a confirmation, the best candidate and the starting values
// alternated kConfirmRounds times each, and the best is kept only if its median beats the starting
// values' median; otherwise the job goes back to where it started. At most max_samples samples are
// taken after the warm-up (the search is cut short to leave room for the confirmation).
//
// Log (HOROVOD_AUTOTUNE_LOG, rank 0): Horovod's CSV columns, one row per scored sample, the last row the
// parameters kept. Unlike Horovod's, rows carry no stray space after the torus column.
#pragma once

#include <chrono>
#include <cstddef>
#include <fstream>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace hvd::runtime {

struct TunableParams {
  size_t fusion_threshold = 0;               // bytes
  std::chrono::microseconds cycle_time{0};  // fusion window
  bool hierarchical = false;

  bool operator==(const TunableParams& o) const {
    return fusion_threshold == o.fusion_threshold && cycle_time == o.cycle_time && hierarchical == o.hierarchical;
  }
};

struct AutotuneOptions {
  int warmup_samples = 3;     // HOROVOD_AUTOTUNE_WARMUP_SAMPLES
  int steps_per_sample = 10;  // HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE
  int max_samples = 20;       // HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES: scored samples after the warm-up
  // Which parameters are searched: one set explicitly in the environment stays as set, as in Horovod.
  bool tune_fusion = true;
  bool tune_cycle_time = true;
  bool tune_hierarchical = false;  // only where the job can run hierarchically (several hosts, shm)
  bool cache_enabled = true;       // for the log's cache_enabled column (the response cache is not tuned)
  std::optional<std::string> log_path;
};

class Autotuner {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kConfirmRounds = 2;

  // start: the values the job runs with now (the defaults or the environment's).
  Autotuner(AutotuneOptions options, TunableParams start);

  // Records one executed allreduce response (its tensor names, its bytes) at now. Returns the parameters
  // to run with from now on when they change.
  std::optional<TunableParams> record(const std::vector<std::string>& names, size_t bytes, Clock::time_point now);

  bool done() const { return done_; }
  // False when a log path was given and the file could not be opened.
  bool logOpen() const { return !options_.log_path || log_.is_open(); }
  const TunableParams& current() const { return current_; }
  // Scored samples so far (after the warm-up).
  int samples() const { return scored_; }
  // A line for the log: what was decided once done(), else empty.
  const std::string& summary() const { return summary_; }

 private:
  struct Candidate {
    TunableParams params;
    std::vector<double> scores;
  };
  // Closes the sample that just ended with score; returns the next parameters to run.
  TunableParams next(double score);
  // The candidates of stage stage_ around best_; empty when the stage has nothing to search.
  std::vector<Candidate> stageCandidates() const;
  void writeRow(const TunableParams& p, double score);

  AutotuneOptions options_;
  TunableParams start_, current_, best_;
  double best_score_ = -1;
  bool done_ = false;
  std::string summary_;

  // Sampling.
  bool sampling_ = false;  // the clock runs (from the first allreduce on)
  Clock::time_point sample_start_;
  size_t sample_bytes_ = 0;
  std::unordered_map<std::string, int> seen_;  // per tensor name, in this sample
  int steps_ = 0;
  int warmup_left_;
  int scored_ = 0;

  // Search: stages 0 fusion, 1 cycle time, 2 path, 3 confirmation.
  int stage_ = -1;
  std::vector<Candidate> candidates_;
  size_t candidate_ = 0;
  std::vector<double> start_scores_, best_scores_;  // confirmation
  int confirm_turn_ = 0;

  std::ofstream log_;
};

}  // namespace hvd::runtime
