// Memory-bandwidth ceiling for bench/compare: single-threaded memcpy of a 64 MiB buffer, and the
// float sum a[i] += b[i] that an allreduce does per byte received (the reduce ceiling).
// Usage: memcpy_bw [REPS]   Prints one JSON line per measure: median and min seconds per pass,
// and GB/s (10^9 bytes moved per second, counting the buffer size once, as busbw does).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBytes = 64u << 20;

template <typename F>
void measure(const char* name, int reps, F&& pass) {
  std::vector<double> t;
  pass();  // warm-up: faults the pages in and warms the caches/TLB
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    pass();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  const double med = t[t.size() / 2];
  std::printf("{\"op\":\"%s\",\"bytes\":%zu,\"iters\":%d,\"median_us\":%.3f,\"min_us\":%.3f,"
              "\"gbps\":%.3f}\n",
              name, kBytes, reps, med * 1e6, t[0] * 1e6, kBytes / med / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  if (reps < 1) {
    std::fprintf(stderr, "bad REPS '%s'\n", argv[1]);
    return 2;
  }
  std::vector<float> a(kBytes / 4, 1.0f), b(kBytes / 4, 0.0f);
  measure("memcpy_64m", reps, [&] {
    std::memcpy(b.data(), a.data(), kBytes);
    asm volatile("" : : "r"(b.data()) : "memory");  // the copy must happen
  });
  measure("reduce_sum_64m", reps, [&] {
    float* __restrict x = a.data();
    const float* __restrict y = b.data();
    for (size_t i = 0; i < a.size(); ++i) x[i] += y[i];
    asm volatile("" : : "r"(x) : "memory");
  });
  return 0;
}
