// Data-parallel linear regression with libhvd: the "hello world" of distributed training.
//
//   hvdrun -np 4 -H localhost:4 build/examples/train_linreg
//
// Each rank owns a shard of synthetic data (deterministic per rank), starts from its own random
// parameters, receives rank 0's parameters by broadcast, averages its gradients with every other rank
// on each step (allreduce), and at the end proves with a collective that its parameters are
// bit-identical to everyone else's. Rank 0 prints the loss once per epoch. Exit status 0 on success,
// 1 with a message when the loss did not fall or the parameters diverged.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include <hvd/hvd.hpp>

namespace {

constexpr int kFeatures = 8;
constexpr int kSamplesPerRank = 2048;
constexpr int kBatch = 64;
constexpr int kEpochs = 10;
constexpr float kLearningRate = 0.005f;

struct Shard {
  std::vector<float> x;  // kSamplesPerRank x kFeatures
  std::vector<float> y;
};

// y = x . w_true + b_true + noise; the true model is the same on every rank, the samples are not.
Shard makeShard(int rank) {
  std::mt19937 truth(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w_true(kFeatures);
  for (auto& w : w_true) w = normal(truth);
  const float b_true = 0.5f;

  std::mt19937 gen(1000 + rank);
  Shard s;
  s.x.resize(kSamplesPerRank * kFeatures);
  s.y.resize(kSamplesPerRank);
  for (int i = 0; i < kSamplesPerRank; ++i) {
    float y = b_true;
    for (int j = 0; j < kFeatures; ++j) {
      const float v = normal(gen);
      s.x[i * kFeatures + j] = v;
      y += v * w_true[j];
    }
    s.y[i] = y + 0.01f * normal(gen);
  }
  return s;
}

// Parameters: kFeatures weights, then the bias.
float predict(const std::vector<float>& params, const float* x) {
  float p = params[kFeatures];
  for (int j = 0; j < kFeatures; ++j) p += params[j] * x[j];
  return p;
}

float localLoss(const std::vector<float>& params, const Shard& s) {
  double sum = 0;
  for (int i = 0; i < kSamplesPerRank; ++i) {
    const float e = predict(params, &s.x[i * kFeatures]) - s.y[i];
    sum += static_cast<double>(e) * e;
  }
  return static_cast<float>(sum / kSamplesPerRank);
}

}  // namespace

int main() {
  try {
    hvd::Session session;
    const int rank = session.rank();
    const Shard shard = makeShard(rank);

    // Different starting points on purpose: the broadcast must make them equal.
    std::mt19937 init(7 + rank);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> params(kFeatures + 1);
    for (auto& p : params) p = uniform(init);
    hvd::broadcast<float>(params, 0, "initial_params");

    float initial = localLoss(params, shard);
    hvd::allreduce<float>(std::span<float>(&initial, 1), hvd::ReduceOp::kAverage, "loss");
    if (rank == 0) std::printf("initial loss %.6f\n", initial);

    std::vector<float> grad(kFeatures + 1);
    float loss = initial;
    for (int epoch = 0; epoch < kEpochs; ++epoch) {
      for (int start = 0; start < kSamplesPerRank; start += kBatch) {
        std::fill(grad.begin(), grad.end(), 0.0f);
        for (int i = start; i < start + kBatch; ++i) {
          const float* x = &shard.x[i * kFeatures];
          const float e = predict(params, x) - shard.y[i];
          for (int j = 0; j < kFeatures; ++j) grad[j] += 2.0f * e * x[j] / kBatch;
          grad[kFeatures] += 2.0f * e / kBatch;
        }
        hvd::allreduce<float>(grad, hvd::ReduceOp::kAverage, "gradients");
        for (int j = 0; j <= kFeatures; ++j) params[j] -= kLearningRate * grad[j];
      }
      float l = localLoss(params, shard);
      hvd::allreduce<float>(std::span<float>(&l, 1), hvd::ReduceOp::kAverage, "loss");
      loss = l;
      if (rank == 0) std::printf("epoch %d loss %.6f\n", epoch, l);
      std::fflush(stdout);
    }

    // Bit-identical parameters on every rank: the elementwise min and max over ranks equal our own.
    std::vector<float> lo(params), hi(params);
    hvd::allreduceAsync<float>(params, lo, hvd::ReduceOp::kMin, "check_min").wait();
    hvd::allreduceAsync<float>(params, hi, hvd::ReduceOp::kMax, "check_max").wait();
    const size_t bytes = params.size() * sizeof(float);
    if (std::memcmp(lo.data(), params.data(), bytes) != 0 || std::memcmp(hi.data(), params.data(), bytes) != 0) {
      std::fprintf(stderr, "rank %d: parameters differ from the other ranks' after training\n", rank);
      return 1;
    }
    if (!(loss < 0.05f * initial)) {
      std::fprintf(stderr, "rank %d: loss did not fall enough (initial %g, final %g)\n", rank, initial, loss);
      return 1;
    }
    if (rank == 0) std::printf("parameters identical on all %d ranks; final loss %.6f\n", session.size(), loss);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_linreg: %s\n", e.what());
    return 1;
  }
}
