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

#include "linreg.h"

namespace {

using linreg::kFeatures;
using linreg::predict;

constexpr int kSamplesPerRank = 2048;
constexpr int kBatch = 64;
constexpr int kEpochs = 10;
constexpr float kLearningRate = 0.005f;

using Shard = linreg::Data;

// The true model is the same on every rank, the samples are not.
Shard makeShard(int rank) {
  std::mt19937 truth(42);
  std::mt19937 gen(1000 + rank);
  return linreg::makeData(kSamplesPerRank, truth, gen);
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
    std::vector<float> params = linreg::randomParams(7 + rank);
    hvd::broadcast<float>(params, 0, "initial_params");

    float initial = localLoss(params, shard);
    hvd::allreduce<float>(std::span<float>(&initial, 1), hvd::ReduceOp::kAverage, "loss");
    if (rank == 0) std::printf("initial loss %.6f\n", initial);

    std::vector<float> grad(kFeatures + 1);
    float loss = initial;
    for (int epoch = 0; epoch < kEpochs; ++epoch) {
      for (int start = 0; start < kSamplesPerRank; start += kBatch) {
        std::fill(grad.begin(), grad.end(), 0.0f);
        for (int i = start; i < start + kBatch; ++i)
          linreg::addGradient(params, &shard.x[i * kFeatures], shard.y[i], kBatch, grad);
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
