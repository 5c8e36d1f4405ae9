#include "runtime/autotune.h"

#include <algorithm>

namespace hvd::runtime {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

constexpr size_t kMiB = size_t{1} << 20;
// Fusion thresholds and windows worth trying: from no batching beyond small tensors to Horovod's range.
const size_t kFusionCandidates[] = {256 * 1024, kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB};
const std::chrono::microseconds kCycleCandidates[] = {std::chrono::microseconds(0), std::chrono::microseconds(1000),
                                                      std::chrono::microseconds(2500), std::chrono::microseconds(5000)};

}  // namespace

Autotuner::Autotuner(AutotuneOptions options, TunableParams start)
    : options_(std::move(options)), start_(start), current_(start), best_(start),
      warmup_left_(std::max(0, options_.warmup_samples)) {
  if (options_.log_path) {
    log_.open(*options_.log_path, std::ios::out | std::ios::trunc);
    if (log_) {
      log_ << "hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,"
              "tensor_fusion_threshold,score\n";
      log_.flush();
    }
  }
}

std::optional<TunableParams> Autotuner::record(const std::vector<std::string>& names, size_t bytes,
                                               Clock::time_point now) {
  if (done_) return std::nullopt;
  if (!sampling_) {  // the clock starts at the first allreduce; each sample ends where the next begins
    sampling_ = true;
    sample_start_ = now;
    return std::nullopt;
  }
  sample_bytes_ += bytes;
  for (const auto& name : names) steps_ = std::max(steps_, ++seen_[name]);
  if (steps_ < std::max(1, options_.steps_per_sample)) return std::nullopt;
  const double us = std::chrono::duration<double, std::micro>(now - sample_start_).count();
  const double score = static_cast<double>(sample_bytes_) / std::max(us, 1.0);
  sample_start_ = now;
  sample_bytes_ = 0;
  seen_.clear();
  steps_ = 0;
  const TunableParams before = current_;
  current_ = next(score);
  if (current_ == before) return std::nullopt;
  return current_;
}

std::vector<Autotuner::Candidate> Autotuner::stageCandidates() const {
  std::vector<Candidate> out;
  auto add = [&](TunableParams p) {
    if (!(p == best_)) out.push_back({p, {}});
  };
  if (stage_ == 0 && options_.tune_fusion) {
    for (size_t f : kFusionCandidates) add({f, best_.cycle_time, best_.hierarchical});
  } else if (stage_ == 1 && options_.tune_cycle_time) {
    for (auto c : kCycleCandidates) add({best_.fusion_threshold, c, best_.hierarchical});
  } else if (stage_ == 2 && options_.tune_hierarchical) {
    add({best_.fusion_threshold, best_.cycle_time, !best_.hierarchical});
  }
  return out;
}

TunableParams Autotuner::next(double score) {
  if (warmup_left_ > 0) {
    --warmup_left_;
    return current_;
  }
  ++scored_;
  writeRow(current_, score);
  const int confirm_samples = 2 * kConfirmRounds;
  if (stage_ < 0) {  // the starting values' first score
    best_score_ = score;
    stage_ = 0;
    candidates_ = stageCandidates();
    candidate_ = 0;
  } else if (stage_ <= 2) {
    candidates_[candidate_].scores.push_back(score);
    if (score > best_score_) {
      best_score_ = score;
      best_ = current_;
    }
    ++candidate_;
  } else {
    (current_ == start_ ? start_scores_ : best_scores_).push_back(score);
    ++confirm_turn_;
  }
  // Search stages: the next candidate, else the next stage that has any, while the budget leaves room
  // for the confirmation.
  while (stage_ <= 2) {
    if (scored_ + confirm_samples >= options_.max_samples) {
      stage_ = 3;
      break;
    }
    if (candidate_ < candidates_.size()) return candidates_[candidate_].params;
    ++stage_;
    candidates_ = stageCandidates();
    candidate_ = 0;
  }
  if (best_ == start_ || confirm_turn_ >= confirm_samples) {
    const bool keep = !(best_ == start_) && median(best_scores_) > median(start_scores_);
    const TunableParams final = keep ? best_ : start_;
    done_ = true;
    const double final_score = best_ == start_ ? best_score_ : median(keep ? best_scores_ : start_scores_);
    writeRow(final, final_score);
    summary_ = keep ? "autotune: kept the tuned parameters (median " + std::to_string(median(best_scores_)) +
                          " bytes/us against " + std::to_string(median(start_scores_)) + " at the start)"
                    : "autotune: kept the starting parameters (nothing measured beat them)";
    return final;
  }
  // Confirmation: start and best alternate, the starting values first.
  return confirm_turn_ % 2 == 0 ? start_ : best_;
}

void Autotuner::writeRow(const TunableParams& p, double score) {
  if (!log_) return;
  log_ << (p.hierarchical ? 1 : 0) << ",0,0," << (options_.cache_enabled ? 1 : 0) << "," << std::chrono::duration<double, std::milli>(p.cycle_time).count()
       << "," << static_cast<double>(p.fusion_threshold) / static_cast<double>(kMiB) << "," << score << "\n";
  log_.flush();
}

}  // namespace hvd::runtime
