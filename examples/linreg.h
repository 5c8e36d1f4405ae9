// The synthetic linear-regression problem that train_linreg and elastic_train solve: y = x . w_true + b_true
// plus a little noise, with kFeatures weights and a bias as the parameters.
#pragma once

#include <random>
#include <vector>

namespace linreg {

constexpr int kFeatures = 8;

struct Data {
  std::vector<float> x;  // samples x kFeatures
  std::vector<float> y;
};

// w_true is drawn from `truth`, then the samples from `gen`; the two may be one engine.
inline Data makeData(int samples, std::mt19937& truth, std::mt19937& gen) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w_true(kFeatures);
  for (auto& w : w_true) w = normal(truth);
  const float b_true = 0.5f;
  Data d;
  d.x.resize(samples * kFeatures);
  d.y.resize(samples);
  for (int i = 0; i < samples; ++i) {
    float y = b_true;
    for (int j = 0; j < kFeatures; ++j) {
      const float v = normal(gen);
      d.x[i * kFeatures + j] = v;
      y += v * w_true[j];
    }
    d.y[i] = y + 0.01f * normal(gen);
  }
  return d;
}

// kFeatures weights, then the bias, uniform in [-1, 1) from a generator seeded with `seed`.
inline std::vector<float> randomParams(unsigned seed) {
  std::mt19937 init(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> params(kFeatures + 1);
  for (auto& p : params) p = uniform(init);
  return params;
}

inline float predict(const std::vector<float>& params, const float* x) {
  float p = params[kFeatures];
  for (int j = 0; j < kFeatures; ++j) p += params[j] * x[j];
  return p;
}

// Adds the gradient of (predict(x) - y)^2, divided by `batch`, to `grad`.
inline void addGradient(const std::vector<float>& params, const float* x, float y, int batch,
                        std::vector<float>& grad) {
  const float e = predict(params, x) - y;
  for (int j = 0; j < kFeatures; ++j) grad[j] += 2.0f * e * x[j] / batch;
  grad[kFeatures] += 2.0f * e / batch;
}

}  // namespace linreg
