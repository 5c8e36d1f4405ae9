// Rendezvous scale simulation: N simulated workers doing Gloo's full-mesh pattern against a real
// hvd-rendezvous process: each PUTs rank_<r> (its hostname) and <r> (an address blob of (N-1)*100 bytes),
// waits for every other rank's <i>, then DELETEs <r>. Reports time to completion and the server's peak RSS
// (VmHWM), medians over rounds.
//
//   rendezvous_scale [--quick] [--n N[,N...]] [--rounds R] [--daemon PATH]
//
// Workers are threads with one HttpStore (one keep-alive connection) each, exactly what the runtime
// uses. Gloo's GET of every peer's blob is not simulated (see docs/rendezvous.md for its cost).
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/http_store.h"

using Clock = std::chrono::steady_clock;
using namespace hvd::rendezvous;

namespace {

struct Daemon {
  pid_t pid = -1;
  uint16_t port = 0;
};

Daemon startDaemon(const std::string& path) {
  int out[2];
  if (::pipe(out) != 0) std::exit(1);
  Daemon d;
  d.pid = ::fork();
  if (d.pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::execl(path.c_str(), path.c_str(), "--no-token", "--threads", "2", "--max-connections", "20000",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  std::string line;
  char c;
  while (::read(out[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(out[0]);
  std::smatch m;
  if (!std::regex_search(line, m, std::regex(R"(:(\d+)$)"))) {
    std::fprintf(stderr, "rendezvous_scale: cannot start %s (printed '%s')\n", path.c_str(), line.c_str());
    std::exit(1);
  }
  d.port = static_cast<uint16_t>(std::stoi(m[1]));
  return d;
}

long peakRssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

double runRound(uint16_t port, int n, int round) {
  const std::string scope = "sim" + std::to_string(round);
  std::barrier start(n + 1);
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  workers.reserve(n);
  for (int r = 0; r < n; ++r) {
    workers.emplace_back([&, r] {
      StoreOptions o;
      o.host = "127.0.0.1";
      o.port = port;
      o.request_deadline = std::chrono::seconds(120);
      HttpStore store(o);
      const Bytes blob(static_cast<size_t>(n - 1) * 100, static_cast<char>(r));
      std::vector<std::string> others;
      for (int i = 0; i < n; ++i) {
        if (i != r) others.push_back(scope + "/" + std::to_string(i));
      }
      start.arrive_and_wait();
      try {
        store.set(scope + "/rank_" + std::to_string(r), Bytes{'h', 'o', 's', 't'});
        store.set(scope + "/" + std::to_string(r), blob);
        store.wait(others, std::chrono::seconds(120));
        start.arrive_and_wait();  // Gloo's barrier over TCP: nobody finalizes before all are connected
        store.deleteKey(scope + "/" + std::to_string(r));
      } catch (const std::exception& e) {
        if (failures++ == 0) std::fprintf(stderr, "worker %d: %s\n", r, e.what());
        start.arrive_and_drop();
      }
    });
  }
  start.arrive_and_wait();
  const auto t0 = Clock::now();
  start.arrive_and_wait();
  for (auto& w : workers) w.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (failures) {
    std::fprintf(stderr, "rendezvous_scale: %d of %d workers failed\n", failures.load(), n);
    std::exit(1);
  }
  return seconds;
}

std::string defaultDaemon() {
  const auto self = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  for (auto candidate : {self / "../../hvd-rendezvous", self / "../../cmd/hvd-rendezvous"}) {
    if (std::filesystem::exists(candidate)) return candidate.lexically_normal().string();
  }
  return "hvd-rendezvous";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {64, 256, 1024, 4096};
  int rounds = 3;
  std::string daemon = defaultDaemon();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--quick") {
      sizes = {64, 256, 1024};
      rounds = 1;
    } else if (a == "--n" && has_value) {
      sizes.clear();
      std::string list = argv[++i];
      for (size_t p = 0; p < list.size();) {
        size_t q = list.find(',', p);
        sizes.push_back(std::stoi(list.substr(p, q - p)));
        p = q == std::string::npos ? list.size() : q + 1;
      }
    } else if (a == "--rounds" && has_value) {
      rounds = std::stoi(argv[++i]);
    } else if (a == "--daemon" && has_value) {
      daemon = argv[++i];
    } else {
      std::fprintf(stderr, "usage: rendezvous_scale [--quick] [--n N[,N...]] [--rounds R] [--daemon PATH]\n");
      return 2;
    }
  }
  // Each worker holds a socket, an epoll fd and an eventfd.
  rlimit nofile{};
  ::getrlimit(RLIMIT_NOFILE, &nofile);
  nofile.rlim_cur = nofile.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &nofile);

  for (int n : sizes) {
    Daemon d = startDaemon(daemon);
    std::vector<double> times;
    for (int r = 0; r < rounds; ++r) {
      times.push_back(runRound(d.port, n, r));
      std::printf("  N=%d round %d: %.3f s\n", n, r + 1, times.back());
      std::fflush(stdout);
    }
    const long rss = peakRssKiB(d.pid);
    ::kill(d.pid, SIGTERM);
    ::waitpid(d.pid, nullptr, 0);
    std::sort(times.begin(), times.end());
    std::printf("rendezvous_scale: N=%d: median %.3f s (min %.3f, max %.3f) over %d round(s); server peak RSS %.1f MiB; "
                "blob %d bytes\n",
                n, times[times.size() / 2], times.front(), times.back(), rounds, rss / 1024.0, (n - 1) * 100);
    std::fflush(stdout);
  }
  return 0;
}
