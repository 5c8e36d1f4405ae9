// Elastic data-parallel linear regression with libhvd: training that survives workers dying and hosts
// coming and going (hvd::elastic::run, hvd::elastic::State).
//
//   hvdrun -np 4 --min-np 2 --max-np 8 --host-discovery-script ./hosts.sh build/examples/elastic_train
//   hvdrun -np 4 -H localhost:4 build/examples/elastic_train           (a static job runs it too)
//   build/examples/elastic_train [steps [ms_per_step]]                 (defaults: 300 steps, no delay)
//
// Every rank holds the same synthetic data set. Each step takes the next global batch of kBatch samples;
// rank r computes the gradient of the samples j with j % size == r, and an allreduce sums the parts, so a
// step's update is the same whatever the number of ranks. The parameters and the step are the elastic
// state: committed every kCommitEvery steps; after a lost worker the survivors restore the last commit,
// re-form with the job's new members (which receive rank 0's state) and go on from there. Rank 0 ends
// with one parseable line:
//   elastic_train final: step=300 size=4 loss=0.000102 params=0.49,1.02,...
// Exit status 0, or 1 with a message when training failed or the loss did not fall.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <hvd/hvd.hpp>

#include "linreg.h"

namespace {

using linreg::kFeatures;
using linreg::predict;

constexpr int kSamples = 4096;
constexpr int kBatch = 64;
constexpr int kCommitEvery = 10;
constexpr float kLearningRate = 0.05f;

using linreg::Data;

// The same data set on every rank (any rank may be given any part of it): one generator for the true model
// and the samples.
Data makeData() {
  std::mt19937 gen(42);
  return linreg::makeData(kSamples, gen, gen);
}

// Mean squared error over the whole data set: each rank sums its share, an allreduce adds them.
float loss(const std::vector<float>& params, const Data& d) {
  float sum = 0;
  for (int i = hvd_rank(); i < kSamples; i += hvd_size()) {
    const float e = predict(params, &d.x[i * kFeatures]) - d.y[i];
    sum += e * e;
  }
  hvd::allreduce<float>(std::span<float>(&sum, 1), hvd::ReduceOp::kSum, "loss");
  return sum / kSamples;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 300;
  const int step_ms = argc > 2 ? std::atoi(argv[2]) : 0;
  if (steps < 0 || step_ms < 0) {
    std::fprintf(stderr, "usage: elastic_train [steps >= 0 [ms_per_step >= 0]] (got %s %s)\n", argc > 1 ? argv[1] : "",
                 argc > 2 ? argv[2] : "");
    return 1;
  }
  try {
    hvd::Session session;
    const Data data = makeData();

    // Different starting points on purpose: the first sync gives every rank rank 0's.
    std::vector<float> params = linreg::randomParams(7 + session.rank());
    int64_t step = 0;

    hvd::elastic::State state;
    state.add("params", params);
    state.add("step", step);
    state.onReset([] {
      std::printf("rank %d: reset, now %d ranks (elastic round %lld)\n", hvd_rank(), hvd_size(), hvd::elastic::round());
      std::fflush(stdout);
    });

    float initial = 0;
    std::vector<float> grad(kFeatures + 1);
    hvd::elastic::run(state, [&] {
      if (step == 0) initial = loss(params, data);
      for (; step < steps;) {
        std::fill(grad.begin(), grad.end(), 0.0f);
        const int first = static_cast<int>((step * kBatch) % kSamples);
        for (int j = hvd_rank(); j < kBatch; j += hvd_size()) {
          const int i = (first + j) % kSamples;
          linreg::addGradient(params, &data.x[i * kFeatures], data.y[i], kBatch, grad);
        }
        hvd::allreduce<float>(grad, hvd::ReduceOp::kSum, "gradients");
        for (int f = 0; f <= kFeatures; ++f) params[f] -= kLearningRate * grad[f];
        ++step;
        if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
        if (step % kCommitEvery == 0) state.commit();
      }
    });

    const float final_loss = loss(params, data);
    if (session.rank() == 0) {
      std::string list;
      char value[32];
      for (float p : params) {
        std::snprintf(value, sizeof value, "%s%.9g", list.empty() ? "" : ",", p);
        list += value;
      }
      std::printf("elastic_train final: step=%lld size=%d loss=%.9g params=%s\n", static_cast<long long>(step),
                  session.size(), final_loss, list.c_str());
    }
    // The first loss is measured only by a process that took part from step 0 (a worker that joined later
    // has initial == 0 and skips the check).
    if (initial > 0 && steps >= 100 && !(final_loss < 0.05f * initial)) {
      std::fprintf(stderr, "rank %d: loss did not fall enough (initial %g, final %g)\n", session.rank(), initial,
                   final_loss);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_train: %s\n", e.what());
    return 1;
  }
}
