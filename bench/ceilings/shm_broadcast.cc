// Shared-memory broadcast ceiling: what a 4 KiB broadcast between two processes (fork) on one shared mapping
// can cost per operation under each way of synchronising it. Not libhvd code: a measurement of the floor each
// protocol puts under the runtime, with none of the runtime's submission, completion or bookkeeping.
//
// Protocols (--protocol), rank 0 the root, rank 1 the reader, operation i:
//   cells:          MPICH's way. The root copies its buffer into cell i % 8 of a ring, marks it full and returns;
//                   the reader waits for the mark, copies the cell out and marks it consumed. The root waits
//                   only when the ring is full: nothing is agreed and nothing goes from the reader to the root
//                   per operation, so in a loop an operation costs about one copy on each side.
//   round:          the data round of libhvd's segment alone: the root copies into its slot of parity i % 2;
//                   both publish round i and wait for each other; the reader copies out. A two-way exchange.
//   agreed-round:   libhvd's agreed operation: first an announcement round (each writes its word for i and
//                   waits for the other's: a two-way exchange), then the data round above.
//   agreed-eager:   the announcement round, then a root that copies, publishes and returns without waiting for
//                   the reader (the reader announcing i + 1 tells the root that it read i).
//   agreed-prewritten: the floor of any protocol in which both ranks agree on every operation: the root writes
//                   its data before it announces, and the reader copies it out once it sees the announcement.
//                   One two-way exchange per operation and nothing else.
// A two-way exchange makes each side wait for a cache line written by the other after that side's own write,
// so in a loop it costs at least two transfers of a line between cores; the cells cost none on the critical
// path while the ring has room. The reader checks every operation's stamp (the operation's number at both ends
// of the message), so a protocol that let it read a stale or half-written message fails the run.
//
// Waiting is polling with a CPU pause (both ranks have a core); a peer that is gone, or no progress for 30 s,
// ends the run with a message and exit status 1.
//
// Usage: shm_broadcast [--protocol P] [--bytes B] [--iters N]
// Prints one JSON line: {"op":"shm_broadcast","protocol","bytes","iters","median_us","min_us","root_us",
// "reader_us"}: time per operation over blocks of 250, median and fastest block, of the slower rank (the loop's
// throughput), and each rank's median.
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <immintrin.h>

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kCells = 8;
constexpr int kBlock = 250;
constexpr size_t kLine = 64;

struct alignas(kLine) Word {
  std::atomic<uint32_t> v{0};
};

struct Header {
  Word seq[2];           // data rounds published (round, agreed-*)
  Word announced[2];     // announcement rounds (agreed-*)
  Word full[kCells];     // cells: the operation whose message the cell holds, + 1
  Word consumed;         // cells: operations the reader has copied out
  double median_us[2];   // each rank's median block, for rank 0's line
  double min_us[2];
};

enum class Protocol { kCells, kRound, kAgreedRound, kAgreedEager, kAgreedPrewritten };

pid_t g_peer = 0;
bool g_peer_is_child = false;

// The other process has ended: the parent reaps its child (a zombie still answers kill(pid, 0)).
bool peerGone() {
  if (g_peer_is_child) {
    int status = 0;
    return waitpid(g_peer, &status, WNOHANG) == g_peer;
  }
  return kill(g_peer, 0) != 0;
}

// Polls until word reaches target; a peer that is gone or a stall of 30 s ends the process.
void await(const Word& w, uint32_t target, const char* what) {
  if (w.v.load(std::memory_order_acquire) >= target) return;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (uint64_t polls = 1;; ++polls) {
    _mm_pause();
    if (w.v.load(std::memory_order_acquire) >= target) return;
    if (polls % (1u << 16) == 0) {
      if (peerGone()) {
        std::fprintf(stderr, "shm_broadcast: the other process (pid %d) is gone while waiting for %s %u\n",
                     static_cast<int>(g_peer), what, target);
        std::exit(1);
      }
      if (Clock::now() > deadline) {
        std::fprintf(stderr, "shm_broadcast: no progress in 30 s waiting for %s %u (at %u)\n", what, target,
                     w.v.load());
        std::exit(1);
      }
    }
  }
}

void stamp(std::vector<uint8_t>& msg, uint32_t i) {
  std::memcpy(msg.data(), &i, sizeof i);
  std::memcpy(msg.data() + msg.size() - sizeof i, &i, sizeof i);
}

void check(const std::vector<uint8_t>& msg, uint32_t i) {
  uint32_t head, tail;
  std::memcpy(&head, msg.data(), sizeof head);
  std::memcpy(&tail, msg.data() + msg.size() - sizeof tail, sizeof tail);
  if (head != i || tail != i) {
    std::fprintf(stderr, "shm_broadcast: the reader got message %u/%u for operation %u\n", head, tail, i);
    std::exit(1);
  }
}

// Both ranks run this; rank 0 is the root. Returns this rank's seconds per block.
std::vector<double> run(int rank, Header* h, uint8_t* data, size_t bytes, Protocol p, uint32_t iters) {
  const int peer = 1 - rank;
  const bool root = rank == 0;
  uint8_t* slot[2] = {data, data + bytes};  // the root's slot by parity
  uint8_t* cell = data + 2 * bytes;         // kCells cells of `bytes`
  std::vector<uint8_t> msg(bytes, static_cast<uint8_t>(0x5a));
  std::vector<double> blocks;
  auto t0 = Clock::now();
  const uint32_t warm = iters / 10;
  for (uint32_t i = 0; i < warm + iters; ++i) {
    if (i >= warm && (i - warm) % kBlock == 0) {
      const auto now = Clock::now();
      if (i > warm) blocks.push_back(std::chrono::duration<double>(now - t0).count());
      t0 = now;
    }
    if (root) stamp(msg, i);
    const uint32_t n = i + 1;
    switch (p) {
      case Protocol::kCells: {
        uint8_t* c = cell + (i % kCells) * bytes;
        if (root) {
          if (i >= static_cast<uint32_t>(kCells)) await(h->consumed, n - kCells, "cell consumed");
          std::memcpy(c, msg.data(), bytes);
          h->full[i % kCells].v.store(n, std::memory_order_release);
        } else {
          await(h->full[i % kCells], n, "cell full");
          std::memcpy(msg.data(), c, bytes);
          h->consumed.v.store(n, std::memory_order_release);
        }
        break;
      }
      case Protocol::kAgreedRound:
      case Protocol::kRound:
        if (p == Protocol::kAgreedRound) {
          h->announced[rank].v.store(n, std::memory_order_release);
          await(h->announced[peer], n, "announcement");
        }
        if (root) std::memcpy(slot[i & 1], msg.data(), bytes);
        h->seq[rank].v.store(n, std::memory_order_release);
        await(h->seq[peer], n, "data round");
        if (!root) std::memcpy(msg.data(), slot[i & 1], bytes);
        break;
      case Protocol::kAgreedEager:
        // The reader announces i only after it read i - 1, so the root's slot of parity i % 2 (read in i - 2)
        // is free once the announcement round is complete.
        h->announced[rank].v.store(n, std::memory_order_release);
        await(h->announced[peer], n, "announcement");
        if (root) {
          std::memcpy(slot[i & 1], msg.data(), bytes);
          h->seq[rank].v.store(n, std::memory_order_release);
        } else {
          await(h->seq[peer], n, "data round");
          std::memcpy(msg.data(), slot[i & 1], bytes);
        }
        break;
      case Protocol::kAgreedPrewritten:
        // The root's announcement of i follows the reader's of i - 1, which follows its read of i - 2.
        if (root) std::memcpy(slot[i & 1], msg.data(), bytes);
        h->announced[rank].v.store(n, std::memory_order_release);
        await(h->announced[peer], n, "announcement");
        if (!root) std::memcpy(msg.data(), slot[i & 1], bytes);
        break;
    }
    if (!root) check(msg, i);
  }
  blocks.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  return blocks;
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "shm_broadcast: %s\nusage: shm_broadcast [--protocol cells|round|agreed-round|agreed-eager|"
               "agreed-prewritten] [--bytes B (8..1048576)] [--iters N (>= 1000)]\n",
               why.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  Protocol p = Protocol::kAgreedRound;
  std::string name = "agreed-round";
  size_t bytes = 4096;
  long iters = 20000;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage("missing value after " + flag);
    const std::string v = argv[i + 1];
    if (flag == "--protocol") {
      name = v;
      if (v == "cells") p = Protocol::kCells;
      else if (v == "round") p = Protocol::kRound;
      else if (v == "agreed-round") p = Protocol::kAgreedRound;
      else if (v == "agreed-eager") p = Protocol::kAgreedEager;
      else if (v == "agreed-prewritten") p = Protocol::kAgreedPrewritten;
      else usage("unknown protocol '" + v + "'");
    } else if (flag == "--bytes") {
      bytes = std::strtoul(v.c_str(), nullptr, 10);
      if (bytes < 8 || bytes > (1u << 20)) usage("bad --bytes '" + v + "'");
    } else if (flag == "--iters") {
      iters = std::strtol(v.c_str(), nullptr, 10);
      if (iters < 1000 || iters > 100000000) usage("bad --iters '" + v + "'");
    } else {
      usage("unknown flag '" + flag + "'");
    }
  }
  iters = (iters + kBlock - 1) / kBlock * kBlock;  // whole blocks
  const size_t total = 4096 + (2 + kCells) * bytes;
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    std::perror("shm_broadcast: mmap");
    return 1;
  }
  auto* h = new (base) Header();
  auto* data = static_cast<uint8_t*>(base) + 4096;
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) {
    std::perror("shm_broadcast: fork");
    return 1;
  }
  const int rank = child == 0 ? 1 : 0;
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
  }
  g_peer = child == 0 ? parent : child;
  g_peer_is_child = child != 0;
  std::vector<double> blocks = run(rank, h, data, bytes, p, static_cast<uint32_t>(iters));
  std::sort(blocks.begin(), blocks.end());
  h->median_us[rank] = blocks[blocks.size() / 2] / kBlock * 1e6;
  h->min_us[rank] = blocks.front() / kBlock * 1e6;
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "shm_broadcast: the reader failed (status %d)\n", status);
    return 1;
  }
  const int slower = h->median_us[1] > h->median_us[0] ? 1 : 0;
  std::printf("{\"op\":\"shm_broadcast\",\"protocol\":\"%s\",\"bytes\":%zu,\"iters\":%ld,\"median_us\":%.3f,"
              "\"min_us\":%.3f,\"root_us\":%.3f,\"reader_us\":%.3f}\n",
              name.c_str(), bytes, iters, h->median_us[slower], h->min_us[slower], h->median_us[0],
              h->median_us[1]);
  return 0;
}
