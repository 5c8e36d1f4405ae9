// Eager broadcast on the shared-memory segment (runtime/shm/transport.h, HVD_SHM_EAGER_BROADCAST): a root
// returns without waiting for its readers, so it runs ahead of them; every write into a slot must then wait
// until the slot's last readers are done, and a reader may take a message its root staged before the
// operation only for the agreed operation it was staged for. Ranks as threads, every collective in random
// order with random lateness on every member, every result checked byte by byte.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/shm/transport.h"
#include "tests/runtime/cluster.h"
#include "tests/runtime/shm_members.h"

using namespace hvd::runtime;
using hvd::runtime::testing::Cluster;
using hvd::runtime::testing::request;
using hvd::runtime::testing::shmMembers;

namespace {

// The byte at i of operation k's message from root: what every reader must end with.
std::byte payload(int k, int root, size_t i) { return std::byte((k * 131 + root * 17 + i * 7 + (i >> 8)) & 0xff); }

enum class Step { kBroadcast, kStagedBroadcast, kRefusedThenBroadcast, kAllreduce, kAllgather, kAlltoall,
                  kReduceScatter, kBarrier };

// Member r's side of operation k (the same kind, root and size on every member: one generator seeded by k).
// Returns an empty string, or what was wrong.
std::string runStep(shm::Transport& t, int r, int n, int k, size_t chunk) {
  std::mt19937 op(static_cast<uint32_t>(k) * 2654435761u);
  const auto kind = static_cast<Step>(op() % 8);
  const int root = static_cast<int>(op() % static_cast<uint32_t>(n));
  switch (kind) {
    case Step::kBroadcast:
    case Step::kStagedBroadcast:
    case Step::kRefusedThenBroadcast: {
      // One chunk or less where the step stages (as the runtime does), up to three chunks and a bit otherwise.
      const size_t bytes = kind == Step::kBroadcast ? 1 + op() % (3 * chunk + 100) : 1 + op() % chunk;
      std::vector<std::byte> buf(bytes, std::byte{0xee});
      if (r == root) {
        for (size_t i = 0; i < bytes; ++i) buf[i] = payload(k, root, i);
      }
      const uint32_t tag = static_cast<uint32_t>(k) + 1;
      if (kind == Step::kRefusedThenBroadcast && r == root) {
        // A message staged for an announcement that was refused: whatever runs next must not deliver it.
        std::vector<std::byte> stale(bytes, std::byte{0x5a});
        t.stageBroadcast(stale.data(), bytes, tag);
        t.unstage();
      }
      if (kind == Step::kStagedBroadcast) {
        if (r == root) t.stageBroadcast(buf.data(), bytes, tag);
        t.expectAgreed(tag);
      }
      t.broadcast(buf.data(), bytes, root);
      t.expectAgreed(std::nullopt);
      for (size_t i = 0; i < bytes; ++i) {
        if (buf[i] != payload(k, root, i)) {
          return "operation " + std::to_string(k) + ": broadcast of " + std::to_string(bytes) + " bytes from " +
                 std::to_string(root) + ", byte " + std::to_string(i) + " wrong";
        }
      }
      return "";
    }
    case Step::kAllreduce: {
      const size_t count = 1 + op() % (chunk / 2);  // int32: up to two chunks
      std::vector<int32_t> v(count);
      for (size_t i = 0; i < count; ++i) v[i] = k + r * static_cast<int32_t>(i % 5);
      t.allreduce(v.data(), count, DataType::kInt32, ReduceOp::kSum);
      for (size_t i = 0; i < count; ++i) {
        if (v[i] != n * k + static_cast<int32_t>(i % 5) * n * (n - 1) / 2)
          return "operation " + std::to_string(k) + ": allreduce element " + std::to_string(i) + " wrong";
      }
      return "";
    }
    case Step::kAllgather: {
      std::vector<size_t> bytes(n);
      size_t total = 0;
      for (int p = 0; p < n; ++p) total += bytes[p] = (op() % (chunk + 50));
      std::vector<std::byte> in(bytes[r]), out(total);
      for (size_t i = 0; i < in.size(); ++i) in[i] = payload(k, r, i);
      t.allgatherv(in.data(), out.data(), bytes);
      size_t at = 0;
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < bytes[p]; ++i) {
          if (out[at + i] != payload(k, p, i)) return "operation " + std::to_string(k) + ": allgather wrong";
        }
        at += bytes[p];
      }
      return "";
    }
    case Step::kAlltoall: {
      const size_t unit = 1 + op() % 300;
      std::vector<size_t> send(n, unit), recv(n, unit);
      std::vector<std::byte> in(unit * n), out(unit * n);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < unit; ++i) in[p * unit + i] = payload(k, r * n + p, i);
      }
      t.alltoallv(in.data(), send, out.data(), recv);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < unit; ++i) {
          if (out[p * unit + i] != payload(k, p * n + r, i))
            return "operation " + std::to_string(k) + ": alltoall wrong";
        }
      }
      return "";
    }
    case Step::kReduceScatter: {
      const size_t per = 1 + op() % 700;
      std::vector<size_t> counts(n, per);
      std::vector<int32_t> v(per * n);
      for (size_t i = 0; i < v.size(); ++i) v[i] = k + r + static_cast<int32_t>(i);
      t.reduceScatter(v.data(), counts, DataType::kInt32, ReduceOp::kSum);
      for (size_t i = 0; i < per; ++i) {
        const int32_t at = static_cast<int32_t>(r * per + i);
        if (v[r * per + i] != n * (k + at) + n * (n - 1) / 2)
          return "operation " + std::to_string(k) + ": reducescatter wrong";
      }
      return "";
    }
    case Step::kBarrier:
      t.barrier();
      return "";
  }
  return "unknown step";
}

}  // namespace

TEST_CASE("an eager broadcast root runs ahead of its readers and no write overtakes a read", "[shm]") {
  const int n = GENERATE(2, 3);
  CAPTURE(n);
  shm::Options base;
  base.eager_broadcast = true;
  base.chunk_bytes = 4096;       // messages across several chunks, cheaply
  base.single_copy_bytes = 2048;  // and the single-copy paths of allgather, alltoall and reducescatter
  base.timeout = std::chrono::seconds(60);
  auto t = shmMembers(n, "eager_test_" + std::to_string(n), base);
  constexpr int kSteps = 3000;
  std::vector<std::string> failures(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937 late(static_cast<uint32_t>(r) + 77);
      try {
        for (int k = 0; k < kSteps && failures[r].empty(); ++k) {
          // Now and then a member is late, so that roots and fast readers run ahead of it.
          if (late() % 6 == 0) std::this_thread::sleep_for(std::chrono::microseconds(late() % 200));
          failures[r] = runStep(*t[r], r, n, k, base.chunk_bytes);
        }
      } catch (const std::exception& e) {
        failures[r] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < n; ++r) {
    INFO("member " << r << ": " << failures[r]);
    CHECK(failures[r].empty());
  }
  uint64_t staged = 0;
  for (int r = 0; r < n; ++r) staged += t[r]->stagedReads();
  INFO("broadcasts read from a staged message: " << staged);
  CHECK(staged > 0);  // the staged path ran, not only the fallback
}

TEST_CASE("a reader takes a staged message only for the agreed round it was staged for", "[shm]") {
  shm::Options base;
  base.eager_broadcast = true;
  auto t = shmMembers(2, "eager_tags_test", base);
  std::vector<std::byte> right(64, std::byte{1}), wrong(64, std::byte{2}), got(64, std::byte{0});
  std::string failure;
  // Root 0 stages `wrong` for announcement round 5, but the round agreed is 6 (5 was refused elsewhere, say):
  // the reader must wait for the root's data round and get `right`.
  std::thread reader([&] {
    try {
      t[1]->expectAgreed(6);
      t[1]->broadcast(got.data(), got.size(), 0);
      t[1]->expectAgreed(std::nullopt);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  REQUIRE(t[0]->stageBroadcast(wrong.data(), wrong.size(), 5));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the reader looks at the word meanwhile
  t[0]->expectAgreed(6);
  t[0]->broadcast(right.data(), right.size(), 0);
  t[0]->expectAgreed(std::nullopt);
  reader.join();
  REQUIRE(failure.empty());
  CHECK(got == right);
  CHECK(t[1]->stagedReads() == 0);
  // A message too long for a chunk, or with eager broadcast off, is not staged.
  std::vector<std::byte> big(base.chunk_bytes + 1);
  CHECK_FALSE(t[0]->stageBroadcast(big.data(), big.size(), 7));
  auto off = shmMembers(2, "eager_off_test", {});
  CHECK_FALSE(off[0]->stageBroadcast(right.data(), right.size(), 1));
}

TEST_CASE("with eager broadcast on, an agreed broadcast reads its root's staged message, with the same results",
          "[inprocess][agreement]") {
  // Lone broadcasts of one name from root 1, then root 0, agreed in the segment; now and then a rank is late,
  // so that some announcements are refused and their staged messages dropped. Agreement needs busy polling:
  // on.
  Cluster cluster(2, [](RuntimeOptions& o) {
    o.busy_poll = RuntimeOptions::kDefaultBusyPoll;
    o.shm_eager_broadcast = true;
  });
  std::string failures[2];  // Catch's assertions are for the test's own thread
  cluster.forEach([&](int r) {
    Runtime& rt = cluster[r];
    for (int root : {1, 0}) {
      for (int k = 0; k < 300 && failures[r].empty(); ++k) {
        if (r != root && k % 25 == 7) std::this_thread::sleep_for(std::chrono::microseconds(400));
        const float want = static_cast<float>(k * 3 + root);
        std::vector<float> b(32, r == root ? want : -1.0f);
        Request q = request(OpType::kBroadcast, "bc" + std::to_string(root), DataType::kFloat32, 32, 1, b.data());
        q.output = b.data();
        q.root = root;
        rt.enqueue(q)->wait();
        for (float x : b) {
          if (x != want) {
            failures[r] = "rank " + std::to_string(r) + ", broadcast " + std::to_string(k) + " from " +
                          std::to_string(root) + ": got " + std::to_string(x) + ", want " + std::to_string(want);
            break;
          }
        }
      }
    }
  });
  CAPTURE(failures[0], failures[1]);
  CHECK(failures[0].empty());
  CHECK(failures[1].empty());
  CHECK(cluster[1].agreedOperations() == cluster[0].agreedOperations());
  const char* shm = std::getenv("HVD_SHARED_MEMORY");
  if (shm && std::strcmp(shm, "0") == 0) return;
  INFO("agreed " << cluster[0].agreedOperations() << " of 600; staged reads on rank 0 "
                 << cluster[0].stagedBroadcastReads() << ", on rank 1 " << cluster[1].stagedBroadcastReads());
  CHECK(cluster[0].agreedOperations() > 0);
  CHECK(cluster[0].stagedBroadcastReads() > 0);  // a reader of root 1's
  CHECK(cluster[1].stagedBroadcastReads() > 0);  // and of root 0's
}
