// Rendezvous scale simulation: N simulated workers doing what Communicator::connect (gloo_backend) does,
// against a real hvd-rendezvous process: each PUTs <r>, its compact Gloo address list (address_list.h,
// built by the real encoder), fetches the values of all N ranks' keys in one multi-key fetch
// (Store::waitAndGet), meets the others at a barrier (Gloo's barrier over the new pairs), then DELETEs <r>.
// Nothing is decoded that the runtime would not decode. Reports time to completion and the server's peak
// RSS (VmHWM), medians over rounds.
//
//   rendezvous_scale [--quick] [--n N[,N...]] [--rounds R] [--shape sequence|ports] [--daemon PATH]
//
// --shape: the address lists a Gloo with a per-device listener publishes (sequence, the default: O(1)
// bytes) or Debian's Gloo, whose pairs listen on a port each (ports: 2 bytes per peer).
// Workers are threads (256 KiB stacks) with one HttpStore (one keep-alive connection) each, exactly what
// the runtime uses; RLIMIT_NOFILE is raised to the hard limit (as root: to fs.nr_open), and the daemon
// runs with --max-connections N + 1024.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <malloc.h>
#include <pthread.h>

#include <functional>

#include <netinet/in.h>

#include "gloo_backend/address_list.h"
#include "rendezvous/http_store.h"

using Clock = std::chrono::steady_clock;
using namespace hvd::rendezvous;

namespace {

struct Daemon {
  pid_t pid = -1;
  uint16_t port = 0;
};

Daemon startDaemon(const std::string& path, int max_connections) {
  int out[2];
  if (::pipe(out) != 0) std::exit(1);
  Daemon d;
  d.pid = ::fork();
  if (d.pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    const std::string max = std::to_string(max_connections);
    ::execl(path.c_str(), path.c_str(), "--no-token", "--threads", "2", "--max-connections", max.c_str(),
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

// The address lists the ranks publish for n ranks: n-1 pairs' addresses each, 127.0.0.1 with either one
// port per rank and consecutive sequence numbers, or a port per pair and no sequence number. Rank 0's is
// built by the runtime's encoder; the others are copies with their own port(s) patched in, which keeps
// the setup of 16384 workers from materializing 16384^2 addresses.
std::vector<Bytes> addressLists(int n, bool ports) {
  std::vector<std::vector<char>> pairs;
  pairs.reserve(n - 1);
  for (int i = 0; i + 1 < n; ++i) {
    std::vector<char> a(hvd::gloo_backend::kGlooAddressBytes, 0);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = htons(static_cast<uint16_t>(ports ? 32768 + i % 28000 : 40000));
    std::memcpy(a.data(), &sin, sizeof sin);
    const int64_t seq = ports ? -1 : i;
    std::memcpy(a.data() + 128, &seq, sizeof seq);
    pairs.push_back(std::move(a));
  }
  const Bytes first = hvd::gloo_backend::encodeAddressList(pairs);
  const hvd::gloo_backend::AddressList check(first.data(), first.size(), "rank 0's list");
  if (check.size() != static_cast<size_t>(n - 1) || check.at(n / 2 - 1) != pairs[n / 2 - 1]) {
    std::fprintf(stderr, "rendezvous_scale: the encoded address list does not decode to its addresses\n");
    std::exit(1);
  }
  // Where the port(s) lie in the encoding: after the 7-byte header and the sockaddr's length byte, at the
  // sockaddr's port (sequence shape), or after the sockaddr and the sequence number, 2 bytes each (ports).
  const size_t sockaddr_length = static_cast<uint8_t>(first[7]);
  std::vector<Bytes> out(n, first);
  for (int r = 1; r < n; ++r) {
    for (int i = 0; i < (ports ? n - 1 : 1); ++i) {
      const uint16_t port = htons(static_cast<uint16_t>(ports ? 32768 + (r * 7919 + i) % 28000 : 40000 + r % 20000));
      std::memcpy(out[r].data() + (ports ? 8 + sockaddr_length + 8 + 2 * i : 8 + 2), &port, 2);
    }
  }
  return out;
}

// Runs fn on a thread with a small stack (16384 default 8 MiB stacks would reserve 128 GiB).
pthread_t startThread(std::function<void()> fn) {
  pthread_attr_t attr;
  ::pthread_attr_init(&attr);
  ::pthread_attr_setstacksize(&attr, 256 * 1024);
  auto* heap = new std::function<void()>(std::move(fn));
  pthread_t thread;
  const int rc = ::pthread_create(
      &thread, &attr,
      [](void* arg) -> void* {
        std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(arg));
        (*f)();
        return nullptr;
      },
      heap);
  ::pthread_attr_destroy(&attr);
  if (rc != 0) {
    std::fprintf(stderr, "rendezvous_scale: pthread_create: %s\n", std::strerror(rc));
    std::exit(1);
  }
  return thread;
}

struct RoundResult {
  double seconds = 0;
  size_t blob_bytes = 0;
  size_t answer_bytes = 0;  // one fetch's answer
  double last_put = 0, last_fetch = 0;  // seconds from the start until the last worker's PUT, fetch ended
};

RoundResult runRound(uint16_t port, int n, int round, bool ports) {
  const std::string scope = "sim" + std::to_string(round);
  // The clock starts when the barrier releases the workers (its completion runs before any is released).
  Clock::time_point t0;
  bool started = false;
  std::barrier start(n + 1, [&]() noexcept {
    if (!started) t0 = Clock::now();
    started = true;
  });
  std::atomic<int> failures{0};
  std::atomic<size_t> blob_bytes{0}, answer_bytes{0};
  std::atomic<int64_t> last_put_ns{0}, last_fetch_ns{0};
  const auto mark = [&](std::atomic<int64_t>& latest) {
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    for (int64_t seen = latest.load(); seen < ns && !latest.compare_exchange_weak(seen, ns);) {
    }
  };
  std::vector<std::string> keys;  // every rank's key, the same list for all (as the runtime asks)
  for (int i = 0; i < n; ++i) keys.push_back(scope + "/" + std::to_string(i));
  const std::vector<Bytes> blobs = addressLists(n, ports);
  std::vector<pthread_t> workers;
  workers.reserve(n);
  for (int r = 0; r < n; ++r) {
    workers.push_back(startThread([&, r] {
      StoreOptions o;
      o.host = "127.0.0.1";
      o.port = port;
      o.request_deadline = std::chrono::seconds(300);
      HttpStore store(o);
      const Bytes& blob = blobs[r];
      if (r == 0) blob_bytes = blob.size();
      start.arrive_and_wait();
      try {
        store.set(keys[r], blob);
        mark(last_put_ns);
        const ValueList values = store.waitAndGet(keys, std::chrono::seconds(300));
        mark(last_fetch_ns);
        if (values.size() != static_cast<size_t>(n) || values[r].size() != blob.size()) {
          throw std::runtime_error("fetch returned " + std::to_string(values.size()) + " values");
        }
        if (r == 0) {
          size_t total = 0;
          for (size_t i = 0; i < values.size(); ++i) total += values[i].size();
          answer_bytes = total;
        }
        start.arrive_and_wait();  // Gloo's barrier over TCP: nobody finalizes before all are connected
        store.deleteKey(keys[r]);
      } catch (const std::exception& e) {
        if (failures++ == 0) std::fprintf(stderr, "worker %d: %s\n", r, e.what());
        start.arrive_and_drop();
      }
    }));
  }
  start.arrive_and_wait();
  start.arrive_and_wait();
  for (auto& w : workers) ::pthread_join(w, nullptr);
  RoundResult result;
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  result.blob_bytes = blob_bytes;
  result.answer_bytes = answer_bytes;
  result.last_put = last_put_ns * 1e-9;
  result.last_fetch = last_fetch_ns * 1e-9;
  if (failures) {
    std::fprintf(stderr, "rendezvous_scale: %d of %d workers failed\n", failures.load(), n);
    std::exit(1);
  }
  return result;
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
  bool ports = false;
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
    } else if (a == "--shape" && has_value) {
      const std::string shape = argv[++i];
      if (shape != "sequence" && shape != "ports") {
        std::fprintf(stderr, "rendezvous_scale: --shape must be sequence or ports, got '%s'\n", shape.c_str());
        return 2;
      }
      ports = shape == "ports";
    } else if (a == "--daemon" && has_value) {
      daemon = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: rendezvous_scale [--quick] [--n N[,N...]] [--rounds R] [--shape sequence|ports] "
                   "[--daemon PATH]\n");
      return 2;
    }
  }
  // The workers stand for separate processes: in one process, every answer buffer above glibc's mmap
  // threshold is an mmap and a munmap, and each munmap interrupts every CPU running one of the thousands of
  // threads to flush its TLB. Keep freed memory in the heap instead.
  ::mallopt(M_MMAP_THRESHOLD, 256 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // Each worker holds a socket, an epoll fd and an eventfd; the daemon (which inherits the limit) a socket
  // per worker. Root may raise the hard limit up to fs.nr_open.
  rlimit nofile{};
  ::getrlimit(RLIMIT_NOFILE, &nofile);
  if (std::ifstream nr_open("/proc/sys/fs/nr_open"); nr_open) {
    rlim_t most = 0;
    if (nr_open >> most && most > nofile.rlim_max) {
      rlimit raised{most, most};
      if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) nofile = raised;
    }
  }
  nofile.rlim_cur = nofile.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &nofile);

  // A worker's HttpStore connection holds a socket, an epoll fd, an eventfd and a timerfd.
  constexpr rlim_t kFilesPerWorker = 4;
  for (int n : sizes) {
    if (static_cast<rlim_t>(n) * kFilesPerWorker + 64 > nofile.rlim_cur) {
      std::fprintf(stderr,
                   "rendezvous_scale: N=%d needs about %llu open files in this process, RLIMIT_NOFILE is %llu "
                   "(raising it needs CAP_SYS_RESOURCE)\n",
                   n, static_cast<unsigned long long>(n * kFilesPerWorker + 64),
                   static_cast<unsigned long long>(nofile.rlim_cur));
      return 1;
    }
    Daemon d = startDaemon(daemon, n + 1024);
    std::vector<double> times;
    RoundResult last;
    for (int r = 0; r < rounds; ++r) {
      last = runRound(d.port, n, r, ports);
      times.push_back(last.seconds);
      std::printf("  N=%d round %d: %.3f s (last PUT done at %.3f s, last fetch at %.3f s)\n", n, r + 1,
                  times.back(), last.last_put, last.last_fetch);
      std::fflush(stdout);
    }
    const long rss = peakRssKiB(d.pid);
    ::kill(d.pid, SIGTERM);
    ::waitpid(d.pid, nullptr, 0);
    std::sort(times.begin(), times.end());
    std::printf("rendezvous_scale: N=%d: median %.3f s (min %.3f, max %.3f) over %d round(s); server peak RSS %.1f MiB; "
                "blob %zu bytes (%s); answer %zu bytes per worker, %.1f MiB sent in all\n",
                n, times[times.size() / 2], times.front(), times.back(), rounds, rss / 1024.0, last.blob_bytes,
                ports ? "ports" : "sequence", last.answer_bytes, last.answer_bytes * double(n) / (1 << 20));
    std::fflush(stdout);
  }
  return 0;
}
