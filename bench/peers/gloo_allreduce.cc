// Raw Gloo allreduce peer for bench/compare: float32 sum, in place, gloo::allreduce() with its
// default (ring) algorithm, on a loopback full mesh built through a FileStore.
//
// Usage: gloo_allreduce RANK SIZE STORE_DIR BYTES:ITERS[,...] [FUSION_REPS]
// Same method and JSON lines as mpi_allreduce.c: per-iteration times, max over ranks, stats on
// rank 0, warm-up 10 % (at least 3). FUSION_REPS > 0 adds 100 x 4 KiB one by one (Gloo has no
// asynchronous collectives) and one 400 KiB allreduce, the lower bound a fusing runtime can reach.
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <sstream>
#include <vector>

#include "gloo_common.h"

namespace {

using Clock = std::chrono::steady_clock;

void allreduceSum(const std::shared_ptr<gloo::Context>& ctx, float* data, size_t count) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(data, count);
  opts.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  gloo::allreduce(opts);
}

// Max over ranks of every iteration's time, then one JSON line from rank 0.
void report(const std::shared_ptr<gloo::Context>& ctx, const char* op, long bytes,
            std::vector<double>& t) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(t.data(), t.size());
  opts.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<double>));
  gloo::allreduce(opts);
  if (ctx->rank != 0) return;
  const size_t n = t.size();
  const double mean = std::accumulate(t.begin(), t.end(), 0.0) / n;
  std::sort(t.begin(), t.end());
  std::printf(
      "{\"op\":\"%s\",\"bytes\":%ld,\"iters\":%zu,\"median_us\":%.3f,\"min_us\":%.3f,"
      "\"p90_us\":%.3f,\"mean_us\":%.3f}\n",
      op, bytes, n, t[n / 2] * 1e6, t[0] * 1e6, t[n * 9 / 10] * 1e6, mean * 1e6);
  std::fflush(stdout);
}

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  auto args = hvd_bench::parseGlooArgs(argc, argv, 1,
                                       "RANK SIZE STORE_DIR BYTES:ITERS[,...] [FUSION_REPS]");
  if (argc < 5) {
    std::fprintf(stderr, "missing BYTES:ITERS list\n");
    return 2;
  }
  auto ctx = hvd_bench::connectLoopback(args);
  std::stringstream spec(argv[4]);
  for (std::string tok; std::getline(spec, tok, ',');) {
    long bytes = 0;
    int iters = 0;
    if (std::sscanf(tok.c_str(), "%ld:%d", &bytes, &iters) != 2 || bytes < 4 || iters < 1) {
      std::fprintf(stderr, "bad size spec '%s' (want BYTES:ITERS)\n", tok.c_str());
      return 2;
    }
    const size_t count = bytes / 4;
    std::vector<float> buf(count, float(args.rank + 1));
    allreduceSum(ctx, buf.data(), count);
    const float want = float(args.size * (args.size + 1) / 2);
    for (size_t i = 0; i < count; i += 1 + count / 97) {
      if (buf[i] != want) {
        std::fprintf(stderr, "rank %d: allreduce result %g at %zu, want %g\n", args.rank,
                     buf[i], i, want);
        return 3;
      }
    }
    std::fill(buf.begin(), buf.end(), 0.0f);  // zeros stay zero: no overflow while timing
    const int warm = std::max(3, iters / 10);
    for (int i = 0; i < warm; ++i) allreduceSum(ctx, buf.data(), count);
    std::vector<double> t(iters);
    for (int i = 0; i < iters; ++i) {
      auto t0 = Clock::now();
      allreduceSum(ctx, buf.data(), count);
      t[i] = seconds(t0, Clock::now());
    }
    report(ctx, "allreduce", bytes, t);
  }
  const int reps = argc > 5 ? std::atoi(argv[5]) : 0;
  if (reps > 0) {
    constexpr size_t kTensors = 100, kCount = 1024;
    std::vector<float> bufs(kTensors * kCount, 0.0f);
    std::vector<double> t(reps);
    for (int mode = 0; mode < 2; ++mode) {
      for (int r = -3; r < reps; ++r) {  // 3 warm-up batches
        auto t0 = Clock::now();
        if (mode == 0) {
          for (size_t k = 0; k < kTensors; ++k) allreduceSum(ctx, &bufs[k * kCount], kCount);
        } else {
          allreduceSum(ctx, bufs.data(), bufs.size());
        }
        if (r >= 0) t[r] = seconds(t0, Clock::now());
      }
      report(ctx, mode == 0 ? "fusion_one_by_one" : "fusion_single_400k", long(kTensors * 4096),
             t);
    }
  }
  // Keep both ranks alive until all traffic is done, so neither sees its peer close early.
  gloo::BarrierOptions done(ctx);
  gloo::barrier(done);
  return 0;
}
