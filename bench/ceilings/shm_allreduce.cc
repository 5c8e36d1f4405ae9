// Shared-memory allreduce ceiling for an intra-host data path: two processes (fork) on one memfd
// mapping, float32 sum, bit-identical results on both ranks. Not libhvd code: a measurement of what
// the design choices cost on this machine, before the transport is written.
//
// Two algorithms (--algo):
//   split:  each rank copies its input into its slot of the segment and publishes a sequence number;
//           once the peer's is there, rank r adds the two slots' half r into a result area (each element is
//           added once, so both ranks hold the same bits) and publishes again; each copies the whole result
//           out, and a third publish lets the slots be reused. 3 waits, each rank adds half the bytes.
//   direct: slots are double-buffered by operation parity; each rank copies its input into its slot,
//           publishes, waits for the peer's, and adds both slots straight into its output (slot 0 + slot 1;
//           at np=2 a + b == b + a, so both ranks hold the same bits; more ranks would need one order).
//           1 wait; each rank adds all the bytes. A slot is rewritten two operations later, after the
//           peer has published once more, i.e. after it finished reading it. With --chunk, the same
//           chunk by chunk through the first BYTES of the slots (one wait per chunk; the data stays in
//           cache between the writer and the reader).
// Waiting for the peer: spin for up to --spin polls of its sequence number, then
// sleep on it with FUTEX_WAIT (shared futex); a publisher calls FUTEX_WAKE only when the peer said it
// sleeps. --spin 0 is sleep only (every wait is a futex round trip); a large value is pure polling.
//
// Usage: shm_allreduce [--algo split|direct] [--chunk BYTES] [--spin N] [--sizes B,B,...] [--iters N]
// Prints one JSON line per size: {"op":"shm_allreduce","algo","bytes","spin","iters","chunk","median_us","min_us"}
// (rank 0's time per operation; the two ranks are in lock step).
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <immintrin.h>

namespace {

using Clock = std::chrono::steady_clock;

struct alignas(64) Flag {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> sleeping{0};
};

struct Header {
  Flag flag[2];
};

long futex(std::atomic<uint32_t>* addr, int op, uint32_t value, const timespec* timeout = nullptr) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, value, timeout, nullptr, 0);
}

pid_t g_peer = 0;  // the other process: the child for the parent, the parent for the child

// A peer that died (a failed result check, a crash) must not leave this one waiting forever.
void exitIfPeerGone() {
  if (g_peer > 0 && kill(g_peer, 0) != 0) {
    std::fprintf(stderr, "shm_allreduce: the other process (pid %d) is gone\n", static_cast<int>(g_peer));
    std::exit(1);
  }
}

class Peer {
 public:
  Peer(Header* h, int rank, long spin) : h_(h), rank_(rank), spin_(spin) {}

  void publish() {
    Flag& mine = h_->flag[rank_];
    mine.seq.fetch_add(1, std::memory_order_seq_cst);
    if (mine.sleeping.load(std::memory_order_seq_cst)) futex(&mine.seq, FUTEX_WAKE, INT32_MAX);
  }

  // Waits until the peer has published `target` times.
  void await(uint32_t target) {
    Flag& theirs = h_->flag[1 - rank_];
    for (long i = 0; i < spin_; ++i) {
      if (theirs.seq.load(std::memory_order_acquire) >= target) return;
      _mm_pause();
    }
    for (;;) {
      const uint32_t seen = theirs.seq.load(std::memory_order_acquire);
      if (seen >= target) return;
      theirs.sleeping.store(1, std::memory_order_seq_cst);
      const timespec tick{0, 100 * 1000 * 1000};
      if (theirs.seq.load(std::memory_order_seq_cst) < target) futex(&theirs.seq, FUTEX_WAIT, seen, &tick);
      theirs.sleeping.store(0, std::memory_order_relaxed);
      exitIfPeerGone();
    }
  }

 private:
  Header* h_;
  int rank_;
  long spin_;
};

struct Segment {
  Header* header;
  float* slot[2][2];  // [parity][rank]
  float* result;
};

Segment layout(char* base, size_t max_bytes) {
  Segment g{};
  g.header = reinterpret_cast<Header*>(base);
  char* at = base + 4096;
  for (auto& parity : g.slot) {
    for (auto& slot : parity) {
      slot = reinterpret_cast<float*>(at);
      at += max_bytes;
    }
  }
  g.result = reinterpret_cast<float*>(at);
  return g;
}

void run(int rank, char* base, size_t max_bytes, const std::vector<size_t>& sizes, long spin, int iters,
         bool direct, size_t chunk) {
  const Segment g = layout(base, max_bytes);
  Peer peer(g.header, rank, spin);
  uint32_t published = 0;
  std::vector<float> in(max_bytes / 4), out(max_bytes / 4);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(rank + 1) * 0.5f + static_cast<float>(i % 7);
  for (size_t bytes : sizes) {
    const size_t n = bytes / 4, half = n / 2;
    const size_t lo = rank == 0 ? 0 : half, hi = rank == 0 ? half : n;
    std::vector<double> t;
    const int reps = bytes >= (16u << 20) ? std::max(iters / 50, 10) : iters;
    for (int it = 0; it < reps + reps / 10 + 1; ++it) {
      const auto t0 = Clock::now();
      if (direct) {
        // Chunk by chunk through the first `chunk` bytes of the slots, so that what one rank wrote is
        // still in cache when the other reads it.
        const size_t per = std::min(n, chunk / 4);
        for (size_t at = 0; at < n; at += per) {
          const size_t m = std::min(per, n - at);
          float* const* slots = g.slot[published & 1];
          std::memcpy(slots[rank], in.data() + at, m * 4);
          peer.publish();
          peer.await(++published);
          const float* a = slots[0];
          const float* b = slots[1];
          float* o = out.data() + at;
          for (size_t i = 0; i < m; ++i) o[i] = a[i] + b[i];
        }
      } else {
        float* const* slots = g.slot[0];
        std::memcpy(slots[rank], in.data(), bytes);
        peer.publish();
        peer.await(++published);
        const float* a = slots[0];
        const float* b = slots[1];
        for (size_t i = lo; i < hi; ++i) g.result[i] = a[i] + b[i];
        peer.publish();
        peer.await(++published);
        std::memcpy(out.data(), g.result, bytes);
        // Nobody may overwrite its slot or the result before both have copied out.
        peer.publish();
        peer.await(++published);
      }
      if (it > reps / 10) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    for (size_t i = 0; i < n; i += 97) {
      const float want = (0.5f + static_cast<float>(i % 7)) + (1.0f + static_cast<float>(i % 7));
      if (out[i] != want) {
        std::fprintf(stderr, "rank %d: wrong result at %zu: %g, want %g\n", rank, i, out[i], want);
        std::exit(1);
      }
    }
    std::sort(t.begin(), t.end());
    if (rank == 0) {
      std::printf("{\"op\":\"shm_allreduce\",\"algo\":\"%s\",\"bytes\":%zu,\"spin\":%ld,\"iters\":%zu,"
                  "\"chunk\":%zu,\"median_us\":%.3f,\"min_us\":%.3f}\n",
                  direct ? "direct" : "split", bytes, spin, t.size(), direct ? std::min(chunk, bytes) : bytes,
                  t[t.size() / 2] * 1e6, t[0] * 1e6);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  long spin = 20000;
  bool direct = false;
  size_t chunk = SIZE_MAX;
  int iters = 2000;
  std::vector<size_t> sizes = {4096, 65536, 1u << 20, 16u << 20, 64u << 20};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--algo") {
      direct = std::string(argv[i + 1]) == "direct";
      if (!direct && std::string(argv[i + 1]) != "split") {
        std::fprintf(stderr, "shm_allreduce: --algo is split or direct, got %s\n", argv[i + 1]);
        return 2;
      }
    } else if (flag == "--chunk") {
      chunk = std::stoull(argv[i + 1]);
      if (chunk < 4) {
        std::fprintf(stderr, "shm_allreduce: --chunk must be at least 4 bytes (one float), got %s\n", argv[i + 1]);
        return 2;
      }
    } else if (flag == "--spin") {
      spin = std::atol(argv[i + 1]);
    } else if (flag == "--iters") {
      iters = std::atoi(argv[i + 1]);
    } else if (flag == "--sizes") {
      sizes.clear();
      std::string list = argv[i + 1];
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        sizes.push_back(std::stoull(list.substr(at, comma - at)));
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr, "shm_allreduce: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  const size_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  const size_t total = 4096 + 5 * max_bytes;
  const int fd = memfd_create("hvd-shm-probe", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(total)) != 0) {
    std::perror("shm_allreduce: memfd");
    return 1;
  }
  auto* base = static_cast<char*>(mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (base == MAP_FAILED) {
    std::perror("shm_allreduce: mmap");
    return 1;
  }
  new (base) Header();
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) {
    std::perror("shm_allreduce: fork");
    return 1;
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);  // the parent died before the line above
  }
  g_peer = child == 0 ? parent : child;
  run(child == 0 ? 1 : 0, base, max_bytes, sizes, spin, iters, direct, chunk);
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
