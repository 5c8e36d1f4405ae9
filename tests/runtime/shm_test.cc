// The shared-memory data path against the TCP one: the same inputs through both give the same bytes,
// for every collective and type, at sizes that span several of the segment's chunks (ranks as threads),
// with large messages read from the peers' buffers (single copy; memcpy between threads) and copied
// through the segment (HVD_SHM_SINGLE_COPY=0).
#include <catch2/catch.hpp>

#include <time.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gloo_backend/types.h"
#include "rendezvous/memory_store.h"
#include "runtime/shm/transport.h"
#include "tests/common/cpus.h"
#include "tests/runtime/cluster.h"
#include "tests/runtime/shm_members.h"

using namespace hvd::runtime;
using hvd::gloo_backend::elementSize;
using hvd::runtime::testing::Cluster;
using hvd::runtime::testing::request;
using hvd::runtime::testing::shmMembers;

namespace {

const DataType kAllTypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt16, DataType::kInt32,
                              DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                              DataType::kFloat32, DataType::kFloat64, DataType::kBool};

// Bytes that are a valid value of every type and stay finite under every op: small integers, written in
// the type (float16/bfloat16 through their float bits).
void fill(DataType t, std::vector<std::byte>& buf, size_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  buf.resize(count * elementSize(t));
  for (size_t i = 0; i < count; ++i) {
    const int v = static_cast<int>(gen() % 3);  // 0, 1, 2: products stay small, sums exact
    std::byte* at = buf.data() + i * elementSize(t);
    switch (t) {
      case DataType::kFloat16: {
        const uint16_t h = v == 0 ? 0 : v == 1 ? 0x3c00 : 0x4000;
        std::memcpy(at, &h, 2);
        break;
      }
      case DataType::kBFloat16: {
        const uint16_t b = v == 0 ? 0 : v == 1 ? 0x3f80 : 0x4000;
        std::memcpy(at, &b, 2);
        break;
      }
      case DataType::kFloat32: {
        const float f = static_cast<float>(v) * 0.75f;
        std::memcpy(at, &f, 4);
        break;
      }
      case DataType::kFloat64: {
        const double d = static_cast<double>(v) * 0.375;
        std::memcpy(at, &d, 8);
        break;
      }
      case DataType::kBool: *at = std::byte(v != 0); break;
      default: {
        const int64_t x = v;
        std::memcpy(at, &x, elementSize(t));  // little endian: the low bytes
      }
    }
  }
}

// What one job computes on each rank: every collective's output bytes, in order.
std::vector<std::vector<std::vector<std::byte>>> runAll(int n, bool shared_memory, bool single_copy = true) {
  std::vector<std::vector<std::vector<std::byte>>> outputs(n);
  Cluster cluster(n, [&](RuntimeOptions& o) {
    o.shared_memory = shared_memory;
    o.shm_single_copy = single_copy;
    o.fusion_threshold = 64 * 1024;  // small ones fused, large ones alone
  });
  cluster.forEach([&](int r) {
    auto& out = outputs[r];
    int seq = 0;
    auto name = [&] { return "op" + std::to_string(seq++); };
    // Runs q and keeps the bytes of its result.
    auto keepResult = [&](const Request& q) {
      auto w = cluster[r].enqueue(q);
      w->wait();
      out.emplace_back(w->result.begin(), w->result.end());
    };
    // allreduce: every type and op; counts within a chunk and across several (256 KiB chunks).
    for (DataType t : kAllTypes) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
        if (t == DataType::kBool && op == ReduceOp::kAverage) continue;
        std::vector<std::vector<std::byte>> bufs;
        std::vector<std::shared_ptr<Work>> works;
        for (size_t count : {size_t{1}, size_t{1000}, size_t{150001}}) {
          std::vector<std::byte> buf;
          fill(t, buf, count, static_cast<uint32_t>(r * 7919 + seq));
          bufs.push_back(std::move(buf));
        }
        for (auto& buf : bufs) {
          Request q;
          q.type = OpType::kAllreduce;
          q.name = name();
          q.dtype = t;
          q.op = op;
          q.rows = static_cast<int64_t>(buf.size() / elementSize(t));
          q.input = q.output = buf.data();
          works.push_back(cluster[r].enqueue(q));
        }
        for (auto& w : works) w->wait();
        for (auto& buf : bufs) out.push_back(std::move(buf));
      }
    }
    // broadcast from every root, across chunks.
    for (int root = 0; root < n; ++root) {
      std::vector<std::byte> buf;
      fill(DataType::kUInt8, buf, 700001, static_cast<uint32_t>(r == root ? 99 + root : r));
      Request q;
      q.type = OpType::kBroadcast;
      q.name = name();
      q.dtype = DataType::kUInt8;
      q.root = root;
      q.rows = static_cast<int64_t>(buf.size());
      q.input = q.output = buf.data();
      cluster[r].enqueue(q)->wait();
      out.push_back(std::move(buf));
    }
    // allgather: a different number of rows on every rank, some far larger than a chunk.
    for (DataType t : {DataType::kFloat32, DataType::kInt8}) {
      std::vector<std::byte> in;
      const int64_t rows = r == 1 ? 0 : (r + 1) * 40000;
      fill(t, in, static_cast<size_t>(rows) * 3, static_cast<uint32_t>(r));
      keepResult(request(OpType::kAllgather, name(), t, rows, 3, in.data()));
    }
    // alltoall: uneven splits, some messages across several sub-slots; then small ones, which travel with
    // the first round's header.
    for (const int64_t unit : {50000, 7}) {
      std::vector<int64_t> splits(n);
      int64_t rows = 0;
      for (int p = 0; p < n; ++p) rows += splits[p] = (p + r) % 3 == 0 ? 0 : unit * ((p + r) % 3);
      std::vector<std::byte> in;
      fill(DataType::kInt32, in, static_cast<size_t>(rows) * 2, static_cast<uint32_t>(r + 5));
      Request q = request(OpType::kAlltoall, name(), DataType::kInt32, rows, 2, in.data());
      q.splits = splits;
      keepResult(q);
    }
    // reducescatter: uneven blocks, every reducible type.
    for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kFloat16}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        std::vector<std::byte> in;
        const int64_t rows = 100003;
        fill(t, in, static_cast<size_t>(rows) * 2, static_cast<uint32_t>(r * 31 + seq));
        Request q = request(OpType::kReducescatter, name(), t, rows, 2, in.data());
        q.op = op;
        keepResult(q);
      }
    }
  });
  return outputs;
}

}  // namespace

TEST_CASE("shared memory and TCP give the same bytes for every collective and type", "[inprocess][shm]") {
  const int n = GENERATE(2, 3, 4);
  CAPTURE(n);
  const bool single_copy = GENERATE(true, false);
  CAPTURE(n, single_copy);
  const auto shm = runAll(n, true, single_copy);
  const auto tcp = runAll(n, false);
  // The last outputs (two alltoalls, eight reducescatters) differ by rank by design; the others (allreduce,
  // broadcast, allgather) must be the same on every rank.
  const size_t per_rank = 10;
  for (int r = 0; r < n; ++r) {
    REQUIRE(shm[r].size() == tcp[r].size());
    for (size_t k = 0; k < shm[r].size(); ++k) {
      INFO("rank " << r << ", operation " << k);
      REQUIRE(shm[r][k].size() == tcp[r][k].size());
      REQUIRE(shm[r][k] == tcp[r][k]);
      if (k + per_rank < shm[r].size()) REQUIRE(shm[r][k] == shm[0][k]);
    }
  }
}

TEST_CASE("a fused allreduce reduced where its tensors are equals one over their concatenation", "[shm]") {
  using hvd::runtime::shm::Transport;
  const std::vector<size_t> counts = {0, 5, 300, 0, 1, 1000, 64};  // float32; spans many 256-byte chunks
  size_t total = 0;
  for (size_t c : counts) total += c;
  for (int n : {2, 3}) {
    INFO(n << " ranks");
    auto store = std::make_shared<hvd::rendezvous::MemoryStore>();
    std::vector<std::vector<float>> by_parts(n), concatenated(n);
    std::vector<int> answers(n, -1);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        hvd::runtime::shm::Options o;
        o.scope = "parts_test";
        o.rank = r;
        o.size = n;
        o.chunk_bytes = 256;
        auto t = Transport::connect(store, o);
        std::mt19937 gen(static_cast<uint32_t>(r + 1));
        std::vector<float> in(total);
        for (auto& x : in) x = static_cast<float>(gen() % 100);
        // Even parts out of place, odd ones in place.
        std::vector<float> out(total, -1.0f), inplace = in;
        std::vector<Transport::Part> parts;
        size_t at = 0;
        for (size_t i = 0; i < counts.size(); ++i) {
          if (i % 2 == 0) {
            parts.push_back({in.data() + at, out.data() + at, counts[i]});
          } else {
            parts.push_back({inplace.data() + at, inplace.data() + at, counts[i]});
          }
          at += counts[i];
        }
        answers[r] = t->allreduceParts(parts, DataType::kFloat32, ReduceOp::kSum) ? 1 : 0;
        at = 0;
        for (size_t i = 0; i < counts.size(); ++i) {
          if (i % 2 == 1) std::copy(inplace.begin() + at, inplace.begin() + at + counts[i], out.begin() + at);
          at += counts[i];
        }
        by_parts[r] = out;
        std::vector<float> whole = in;
        t->allreduce(whole.data(), whole.size(), DataType::kFloat32, ReduceOp::kSum);
        concatenated[r] = whole;
        // Above kDirectBytes with more than two ranks: not done, the same answer everywhere, nothing written.
        std::vector<float> big(hvd::runtime::shm::kDirectBytes / sizeof(float) + 1, 1.0f), untouched = big;
        const bool done =
            t->allreduceParts({{big.data(), big.data(), big.size()}}, DataType::kFloat32, ReduceOp::kSum);
        if (n > 2 && (done || big != untouched)) answers[r] = 2;
      });
    }
    for (auto& th : threads) th.join();
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      CHECK(answers[r] == 1);
      CHECK(by_parts[r] == concatenated[r]);
      CHECK(by_parts[r] == by_parts[0]);
    }
  }
}

TEST_CASE("rank 0 stops waiting for local peers once the segment's key is deleted (an elastic round ended)",
          "[shm]") {
  auto store = std::make_shared<hvd::rendezvous::MemoryStore>();
  hvd::runtime::shm::SegmentOptions o;
  o.scope = "ended_round";
  o.rank = 0;
  o.size = 3;
  o.bytes = 4096;
  o.timeout = std::chrono::seconds(60);
  // No peer comes; what the driver does when it begins a later round: the ended round's keys go.
  std::thread driver([&] {
    while (!store->check({"ended_round/shm"})) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    store->deleteKey("ended_round/shm");
  });
  const auto start = std::chrono::steady_clock::now();
  std::string what;
  try {
    hvd::runtime::shm::Segment::share(store, o);
  } catch (const hvd::StoreError& e) {
    what = e.what();
  }
  const auto took = std::chrono::steady_clock::now() - start;
  driver.join();
  INFO(what);
  REQUIRE(what.find("shared memory of scope 'ended_round': its key 'shm' was deleted") != std::string::npos);
  REQUIRE(what.find("2 of 2 local peers had not fetched the segment") != std::string::npos);
  REQUIRE(took < std::chrono::seconds(5));  // a key check a second, not the 60 s timeout
}

TEST_CASE("announcements: one word per member and round, written once, and kept until every member read it",
          "[shm]") {
  auto t = shmMembers(2, "announce_test");
  // Round 1: both announce 7; nothing else lands in it.
  CHECK(!t[1]->announcements().announced(0, 1));
  CHECK(t[0]->announcements().announce(0, 1, 7));
  CHECK(!t[0]->announcements().announce(0, 1, 8));  // once per round
  CHECK(!t[0]->announcements().announcedAll(1));
  CHECK(t[1]->announcements().announce(1, 1, 7));
  CHECK(t[0]->announcements().announcedAll(1));
  CHECK(t[1]->announcements().announced(0, 1) == 7u);
  CHECK(!t[0]->announcements().announce(0, 3, 9));  // it would replace round 1, which no one has said it is done reading
  // Round 2: rank 0 announces and answers for rank 1, which then cannot announce in it.
  t[0]->announcements().read(1);
  CHECK(t[0]->announcements().announce(0, 2, 5));
  CHECK(t[0]->announcements().announce(1, 2, 0));
  CHECK(!t[1]->announcements().announce(1, 2, 5));
  CHECK(t[1]->announcements().announced(1, 2) == 0u);
  CHECK(t[0]->announcements().announcedAll(2));
  // Round 3 replaces round 1's words, which rank 1 has not said it is done reading.
  t[0]->announcements().read(2);
  CHECK(!t[0]->announcements().announce(0, 3, 9));
  CHECK(t[1]->announcements().announced(0, 1) == 7u);
  t[1]->announcements().read(2);
  CHECK(t[0]->announcements().announce(0, 3, 9));
  CHECK(!t[1]->announcements().announced(0, 1));
  CHECK(t[1]->announcements().announced(0, 3) == 9u);
  // The busy hint.
  CHECK(!t[0]->announcements().busy(1));
  t[1]->announcements().setBusy(true);
  CHECK(t[0]->announcements().busy(1));
}

TEST_CASE(
    "announcements: a member's own announcement and an answer given for it at the same moment, one lands",
    "[shm]") {
  auto t = shmMembers(2, "announce_race_test");
  std::vector<std::thread> threads;
  // Each round, rank 0 announces 7 for itself while rank 1 answers 0 for it (and announces for itself): of
  // the two writes to rank 0's word exactly one succeeds, and both see the value that did.
  constexpr uint32_t kRounds = 20000;
  std::atomic<uint32_t> go{0}, done{0};
  std::atomic<uint32_t> own_wins{0}, answer_wins{0}, disagreements{0};
  auto member = [&](int r) {
    for (uint32_t n = 1; n <= kRounds; ++n) {
      done.fetch_add(1);
      while (done.load() < 2 * n) {
      }
      const bool landed = r == 0 ? t[0]->announcements().announce(0, n, 7) : t[1]->announcements().announce(0, n, 0);
      if (r == 1 && !t[1]->announcements().announce(1, n, 7)) ++disagreements;  // nobody else writes rank 1's word
      while (!t[r]->announcements().announcedAll(n)) {
      }
      const auto value = t[r]->announcements().announced(0, n);
      if (landed) ++(r == 0 ? own_wins : answer_wins);
      if (!value || (landed && *value != (r == 0 ? 7u : 0u))) ++disagreements;
      t[r]->announcements().read(n);
      go.fetch_add(1);
      while (go.load() < 2 * n) {
      }
    }
  };
  threads.emplace_back(member, 0);
  threads.emplace_back(member, 1);
  for (auto& th : threads) th.join();
  INFO(own_wins.load() << " own announcements and " << answer_wins.load() << " answers landed");
  CHECK(own_wins.load() + answer_wins.load() == kRounds);
  CHECK(disagreements.load() == 0);
}

namespace {

double threadSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Catch's assertions are for the test's own thread: the threads below report pinning through a flag.
using hvd::test::pinTo;

// Member 0 waits in 200 barriers for member 1, which arrives 300 us late each time, while a thread with work
// of its own shares member 0's core. Returns the CPU time member 0 used while waiting over the CPU time that
// working thread got: a ratio that other load on the machine leaves alone, since it takes from both.
double waitingOverWorking(const hvd::runtime::shm::Options& waiting, int cpu, int other_cpu) {
  auto t = shmMembers(2, "waiting_share_test", waiting);
  constexpr int kRounds = 200;
  std::atomic<bool> done{false}, unpinned{false};
  double work_cpu = 0, wait_cpu = 0;
  std::string failures[2];  // a barrier's error on member 0 / 1 (a timeout, a lost peer)
  std::thread worker([&] {
    if (!pinTo(cpu)) unpinned = true;
    const double cpu0 = threadSeconds();
    volatile uint64_t spins = 0;
    while (!done.load(std::memory_order_relaxed)) spins = spins + 1;
    work_cpu = threadSeconds() - cpu0;
  });
  std::thread late([&] {
    if (!pinTo(other_cpu)) unpinned = true;
    try {
      for (int i = 0; i < kRounds; ++i) {
        std::this_thread::sleep_for(std::chrono::microseconds(300));
        t[1]->barrier();
      }
    } catch (const std::exception& e) {
      failures[1] = e.what();
    }
  });
  std::thread waiter([&] {
    if (!pinTo(cpu)) unpinned = true;
    const double cpu0 = threadSeconds();
    try {
      for (int i = 0; i < kRounds; ++i) t[0]->barrier();
    } catch (const std::exception& e) {
      failures[0] = e.what();
    }
    wait_cpu = threadSeconds() - cpu0;
  });
  waiter.join();
  late.join();
  done = true;
  worker.join();
  REQUIRE_FALSE(unpinned);
  INFO("member 0: " << failures[0] << "; member 1: " << failures[1]);
  REQUIRE((failures[0].empty() && failures[1].empty()));
  return wait_cpu / work_cpu;
}

}  // namespace

TEST_CASE("a member waiting for a late peer leaves its core to the work beside it", "[shm]") {
  // A late peer is usually one that is not running (in training: its rounds share a core with the
  // backward pass). Polling with CPU pauses throughout the wait takes half the core from the thread that
  // shares it; the default waiting pauses briefly, then yields the core between polls, then sleeps.
  const std::vector<int> cpus = hvd::test::allowedCpus();
  if (cpus.size() < 2) {
    WARN("one CPU in this process's affinity mask: the late member needs a core of its own");
    return;
  }
  // Polling with pauses for the whole of every wait, never yielding: the measure's control. 1,000,000 paused
  // polls last 10 ms or more, beyond any wait here; with 20,000 (about 0.5 ms) the waiter went to sleep
  // whenever the late member's 300 us sleep overran by 0.2 ms on a busy machine, and the control read 0.49.
  hvd::runtime::shm::Options pausing;
  pausing.spin = 1000000;
  pausing.yielding = std::chrono::microseconds(0);
  const double with_pauses = waitingOverWorking(pausing, cpus[0], cpus[1]);
  const double with_defaults = waitingOverWorking({}, cpus[0], cpus[1]);
  INFO("CPU time of the waiting member over that of the work beside it: "
       << with_pauses << " pausing throughout, " << with_defaults << " with the default waiting");
  CHECK(with_pauses > 0.5);  // the measure sees a wait that takes the core
  CHECK(with_defaults < 0.2);
}

TEST_CASE("a member that waits for a peer which last published from its own CPU moves off that CPU",
          "[shm][placement]") {
  // Two members on one CPU take turns at it: the waiter cannot see the peer's round before it gives the CPU
  // up. With Options::move_off_peers the waiter moves to another CPU it may run on; without, it stays. Each
  // of the waiter's rounds begins on the CPU its peer (bound there) published from; the kernel may still move
  // a waiter that is not running before it looks (other load on the machine), hence several rounds, of which
  // at least one must move and, without the option, none.
  const std::vector<int> cpus = hvd::test::allowedCpus();
  if (cpus.size() < 2) {
    WARN("one CPU in this process's affinity mask: nowhere to move to");
    return;
  }
  const bool move = GENERATE(true, false);
  hvd::runtime::shm::Options o;
  o.move_off_peers = move;
  o.oversubscribed = false;
  auto t = shmMembers(2, "move_off_test", o);
  // Connecting may have moved a member already (its rounds wait too): count from here.
  const uint64_t moved_before[2] = {t[0]->threadMoves(), t[1]->threadMoves()};
  constexpr int kRounds = 5;
  std::atomic<bool> unpinned{false};
  std::string failures[2];
  std::thread peer([&] {
    try {
      if (!hvd::test::pinTo(cpus[0])) unpinned = true;
      for (int k = 0; k < kRounds; ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // longer than the moves' pacing
        t[1]->barrier();
      }
    } catch (const std::exception& e) {
      failures[1] = e.what();
    }
  });
  std::thread waiter([&] {
    try {
      for (int k = 0; k < kRounds; ++k) {
        // Onto the peer's CPU, free to run on both.
        if (!hvd::test::pinTo(cpus[0]) || !hvd::test::setCpus({cpus[0], cpus[1]})) unpinned = true;
        t[0]->barrier();
      }
    } catch (const std::exception& e) {
      failures[0] = e.what();
    }
  });
  waiter.join();
  peer.join();
  REQUIRE_FALSE(unpinned);
  INFO("member 0: " << failures[0] << "; member 1: " << failures[1]);
  REQUIRE((failures[0].empty() && failures[1].empty()));
  const uint64_t moves = t[0]->threadMoves() - moved_before[0];
  INFO(moves << " of " << kRounds << " waits moved off the peer's CPU");
  if (move) {
    CHECK(moves >= 1);
  } else {
    CHECK(moves == 0);
  }
  CHECK(t[1]->threadMoves() - moved_before[1] == 0u);  // bound to one CPU
}
