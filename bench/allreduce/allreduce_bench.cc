// Allreduce benchmark, np ranks on localhost, in one run: libhvd (public C API, as users call it)
// against raw Gloo (the same libgloo, gloo::allreduce() with its default ring algorithm, on a full
// mesh built through a FileStore) in the same processes, interleaved round by round.
//
//   allreduce_bench [--np 2] [--rounds 3] [--sizes 4096,65536,...] [--fused-reps 30]
//
// Per size: synchronous float32 sum, each iteration timed on every rank, the maximum over ranks taken
// (as bench/peers do), warm-up 10 % (>= 3); the median per round, then the median over rounds with
// the min-max of round medians. busbw = 2(n-1)/n * bytes / t. Also 100 x 4 KiB submitted
// asynchronously then waited (fused by libhvd). The parent process runs the rendezvous server and
// re-executes itself as the ranks (--worker); rank 0 prints the table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <hvd/hvd.h>

#include "rendezvous/server.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int np = 2;
  int rounds = 3;
  std::vector<long> sizes = {4096, 65536, 1 << 20, 16 << 20, 64 << 20};
  int fused_reps = 30;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--np") {
      o.np = std::atoi(next().c_str());
    } else if (a == "--rounds") {
      o.rounds = std::atoi(next().c_str());
    } else if (a == "--fused-reps") {
      o.fused_reps = std::atoi(next().c_str());
    } else if (a == "--sizes") {
      o.sizes.clear();
      const std::string v = next();
      for (size_t p = 0; p < v.size();) {
        const size_t q = v.find(',', p);
        o.sizes.push_back(std::atol(v.substr(p, q - p).c_str()));
        p = q == std::string::npos ? v.size() : q + 1;
      }
    } else if (a == "--worker") {
    } else if (a == "--help" || a == "-h") {
      std::printf("usage: %s [--np N] [--rounds R] [--sizes B1,B2,...] [--fused-reps K]\n", argv[0]);
      std::exit(0);
    } else {
      std::fprintf(stderr, "unknown argument '%s' (see --help)\n", a.c_str());
      std::exit(2);
    }
  }
  if (o.np < 2 || o.rounds < 1 || o.sizes.empty()) {
    std::fprintf(stderr, "need --np >= 2, --rounds >= 1 and at least one size\n");
    std::exit(2);
  }
  return o;
}

int iterationsFor(long bytes) {
  const long budget = 512L << 20;  // bytes reduced per size and round
  return static_cast<int>(std::clamp(budget / bytes, 5L, 1000L));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void check(int status, const char* what) {
  if (status != HVD_SUCCESS) {
    std::fprintf(stderr, "rank %d: %s failed (%d): %s\n", hvd_rank(), what, status, hvd_error_text());
    std::exit(3);
  }
}

void hvdAllreduce(const char* name, void* buf, size_t count, hvd_dtype dtype, hvd_reduce_op op) {
  const int h = hvd_allreduce_async(name, buf, buf, count, dtype, op, 1.0, 1.0);
  check(h < 0 ? h : hvd_wait(h), name);
}

void glooAllreduce(const std::shared_ptr<gloo::Context>& ctx, float* data, size_t count) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(data, count);
  opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  gloo::allreduce(opts);
}

// Median over iterations of the per-iteration maximum over ranks (the max taken through libhvd).
double timed(int iters, const std::function<void()>& op) {
  const int warm = std::max(3, iters / 10);
  for (int i = 0; i < warm; ++i) op();
  std::vector<double> t(iters);
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    op();
    t[i] = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  hvdAllreduce("bench.times", t.data(), t.size(), HVD_FLOAT64, HVD_MAX);
  return median(t);
}

int worker(const Options& o) {
  check(hvd_init(), "hvd_init");
  const int rank = hvd_rank(), n = hvd_size();

  gloo::rendezvous::FileStore store(std::getenv("HVD_BENCH_STORE_DIR"));
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, n);
  ctx->connectFullMesh(store, device);

  // results[label][size] = round medians
  std::map<std::string, std::map<long, std::vector<double>>> results;
  const long max_bytes = *std::max_element(o.sizes.begin(), o.sizes.end());
  std::vector<float> buf(static_cast<size_t>(max_bytes / 4));
  for (int round = 0; round < o.rounds; ++round) {
    for (long bytes : o.sizes) {
      const size_t count = static_cast<size_t>(bytes / 4);
      const int iters = iterationsFor(bytes);
      // Correctness first, then zeros (stay zero: no overflow while timing).
      std::fill(buf.begin(), buf.begin() + count, static_cast<float>(rank + 1));
      hvdAllreduce("bench.check", buf.data(), count, HVD_FLOAT32, HVD_SUM);
      if (buf[count - 1] != static_cast<float>(n * (n + 1) / 2)) {
        std::fprintf(stderr, "wrong allreduce result %g\n", buf[count - 1]);
        return 3;
      }
      std::fill(buf.begin(), buf.begin() + count, 0.0f);
      results["hvd"][bytes].push_back(
          timed(iters, [&] { hvdAllreduce("bench.ar", buf.data(), count, HVD_FLOAT32, HVD_SUM); }));
      results["gloo"][bytes].push_back(timed(iters, [&] { glooAllreduce(ctx, buf.data(), count); }));
    }
    // 100 x 4 KiB: all submitted, then all waited (libhvd fuses them).
    constexpr int kTensors = 100, kCount = 1024;
    std::vector<float> many(static_cast<size_t>(kTensors) * kCount, 0.0f);
    std::vector<std::string> names;
    for (int k = 0; k < kTensors; ++k) names.push_back("bench.f" + std::to_string(k));
    results["fused"][0].push_back(timed(o.fused_reps, [&] {
      int handles[kTensors];
      for (int k = 0; k < kTensors; ++k) {
        float* b = many.data() + static_cast<size_t>(k) * kCount;
        handles[k] = hvd_allreduce_async(names[k].c_str(), b, b, kCount, HVD_FLOAT32, HVD_SUM, 1.0, 1.0);
        check(handles[k] < 0 ? handles[k] : HVD_SUCCESS, "fused enqueue");
      }
      for (int k = 0; k < kTensors; ++k) check(hvd_wait(handles[k]), "fused wait");
    }));
    results["gloo_one_by_one"][0].push_back(timed(std::max(3, o.fused_reps / 3), [&] {
      for (int k = 0; k < kTensors; ++k) glooAllreduce(ctx, many.data() + static_cast<size_t>(k) * kCount, kCount);
    }));
  }

  if (rank == 0) {
    auto stat = [](const std::vector<double>& v) {
      char s[96];
      std::snprintf(s, sizeof s, "%9.1f [%.1f-%.1f]", median(v) * 1e6, *std::min_element(v.begin(), v.end()) * 1e6,
                    *std::max_element(v.begin(), v.end()) * 1e6);
      return std::string(s);
    };
    std::printf("allreduce float32 sum, np=%d, %d rounds; median of round medians [min-max], us\n", n, o.rounds);
    std::printf("%10s %28s %28s %7s %10s %10s\n", "bytes", "libhvd", "raw gloo ring", "ratio", "hvd GB/s",
                "gloo GB/s");
    for (long bytes : o.sizes) {
      const auto& h = results["hvd"][bytes];
      const auto& g = results["gloo"][bytes];
      const double bus = 2.0 * (n - 1) / n * bytes;
      std::printf("%10ld %28s %28s %7.2f %10.3f %10.3f\n", bytes, stat(h).c_str(), stat(g).c_str(),
                  median(h) / median(g), bus / median(h) / 1e9, bus / median(g) / 1e9);
    }
    std::printf("100 x 4 KiB async then wait (libhvd, fused): %s\n", stat(results["fused"][0]).c_str());
    std::printf("100 x 4 KiB one by one (raw gloo ring):       %s\n", stat(results["gloo_one_by_one"][0]).c_str());
    std::fflush(stdout);
  }
  gloo::BarrierOptions barrier(ctx);
  gloo::barrier(barrier);  // nobody closes the raw mesh while a peer still uses it
  ctx.reset();
  hvd_shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--worker") == 0) return worker(o);
  }

  boost::asio::io_context ioc;
  hvd::rendezvous::ServerOptions so;
  so.token = "bench-token";
  hvd::rendezvous::Server server(ioc, so);
  std::map<std::string, int> sizes{{"global", o.np}, {"local_localhost", o.np}};
  for (int r = 0; r < o.np; ++r) sizes["cross_" + std::to_string(r)] = 1;
  server.setScopeSizes(sizes);
  std::thread server_thread([&] { ioc.run(); });

  char dir[] = "/tmp/hvd_allreduce_bench_XXXXXX";
  if (!::mkdtemp(dir)) {
    std::perror("mkdtemp");
    return 1;
  }
  std::vector<pid_t> pids;
  for (int rank = 0; rank < o.np; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const std::map<std::string, std::string> env = {
          {"HOROVOD_RANK", std::to_string(rank)}, {"HOROVOD_SIZE", std::to_string(o.np)},
          {"HOROVOD_LOCAL_RANK", std::to_string(rank)}, {"HOROVOD_LOCAL_SIZE", std::to_string(o.np)},
          {"HOROVOD_CROSS_RANK", "0"}, {"HOROVOD_CROSS_SIZE", "1"}, {"HOROVOD_HOSTNAME", "localhost"},
          {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1"},
          {"HOROVOD_GLOO_RENDEZVOUS_PORT", std::to_string(server.port())},
          {"HVD_RENDEZVOUS_TOKEN", "bench-token"}, {"HVD_BENCH_STORE_DIR", dir}};
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> args(argv, argv + argc);
      args.push_back(const_cast<char*>("--worker"));
      args.push_back(nullptr);
      ::execv("/proc/self/exe", args.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  server.stop();
  ioc.stop();
  server_thread.join();
  std::system((std::string("rm -rf ") + dir).c_str());
  if (failed) std::fprintf(stderr, "%d rank(s) failed\n", failed);
  return failed ? 1 : 0;
}
