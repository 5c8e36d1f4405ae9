// Negotiation-free cached operations (runtime/agreement.cc): ranks as threads of one host agree on a lone
// response cache hit in the shared-memory segment. What must hold whatever the timing: every result is the
// coordinator's, every operation agreed is agreed by every rank (the counts are equal), and an announcement
// that cannot agree (another operation, a rank late or busy at the coordinator, a changed shape, a joined
// rank) leaves the operation to the coordinator. Over TCP (test_runtime_inprocess_tcp) nothing is agreed.
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/common/cpus.h"
#include "tests/runtime/cluster.h"

using namespace hvd::runtime;
using hvd::runtime::testing::Cluster;
using hvd::runtime::testing::request;

namespace {

bool sharedMemory() {
  const char* shm = std::getenv("HVD_SHARED_MEMORY");
  return !(shm && std::strcmp(shm, "0") == 0);
}

// Agreement needs busy polling, which is off where ranks outnumber cores: on, so that these cases agree
// anywhere.
void busyPolling(RuntimeOptions& o) { o.busy_poll = RuntimeOptions::kDefaultBusyPoll; }

// One step of every cached operation type on rank r of 2, each submitted alone and waited for, with its
// result checked: allreduce, allgather (rank p gives p + 1 rows), broadcast from rank 1, alltoall (rank p
// sends q + p + 1 rows to rank q), reducescatter.
void step(Runtime& rt, int r, int k) {
  std::vector<float> v(16, static_cast<float>(r + 1 + k));
  Request ar = request(OpType::kAllreduce, "ar", DataType::kFloat32, 16, 1, v.data());
  ar.output = v.data();
  rt.enqueue(ar)->wait();
  for (float x : v) REQUIRE(x == static_cast<float>(3 + 2 * k));

  std::vector<int32_t> in(static_cast<size_t>(r + 1));
  for (size_t i = 0; i < in.size(); ++i) in[i] = 100 * r + k + static_cast<int32_t>(i);
  auto ag = rt.enqueue(request(OpType::kAllgather, "ag", DataType::kInt32, r + 1, 1, in.data()));
  ag->wait();
  std::vector<int32_t> want;
  for (int p = 0; p < 2; ++p) {
    for (int i = 0; i <= p; ++i) want.push_back(100 * p + k + i);
  }
  REQUIRE(ag->result_rows == static_cast<int64_t>(want.size()));
  REQUIRE(std::memcmp(ag->result.data(), want.data(), want.size() * 4) == 0);

  std::vector<float> b(8, r == 1 ? static_cast<float>(k) : -1.0f);
  Request bc = request(OpType::kBroadcast, "bc", DataType::kFloat32, 8, 1, b.data());
  bc.output = b.data();
  bc.root = 1;
  rt.enqueue(bc)->wait();
  for (float x : b) REQUIRE(x == static_cast<float>(k));

  std::vector<int32_t> out;
  std::vector<int64_t> splits(2);
  for (int q = 0; q < 2; ++q) {
    splits[q] = q + r + 1;
    for (int i = 0; i < q + r + 1; ++i) out.push_back(10 * r + q + k);
  }
  Request a2a =
      request(OpType::kAlltoall, "a2a", DataType::kInt32, static_cast<int64_t>(out.size()), 1, out.data());
  a2a.splits = splits;
  auto w = rt.enqueue(a2a);
  w->wait();
  std::vector<int32_t> got;
  for (int p = 0; p < 2; ++p) {
    for (int i = 0; i < r + p + 1; ++i) got.push_back(10 * p + r + k);
  }
  REQUIRE(w->result_rows == static_cast<int64_t>(got.size()));
  REQUIRE(std::memcmp(w->result.data(), got.data(), got.size() * 4) == 0);

  std::vector<float> rs(8);
  for (size_t i = 0; i < rs.size(); ++i) rs[i] = static_cast<float>(r * 10 + static_cast<int>(i) + k);
  auto s = rt.enqueue(request(OpType::kReducescatter, "rs", DataType::kFloat32, 8, 1, rs.data()));
  s->wait();
  REQUIRE(s->result_rows == 4);
  const float* mine = reinterpret_cast<const float*>(s->result.data());
  for (int i = 0; i < 4; ++i) REQUIRE(mine[i] == static_cast<float>(10 + 2 * (4 * r + i) + 2 * k));
}

std::vector<float> allreduce(Runtime& rt, const std::string& name, int64_t count, float value) {
  std::vector<float> v(static_cast<size_t>(count), value);
  Request q = request(OpType::kAllreduce, name, DataType::kFloat32, count, 1, v.data());
  q.output = v.data();
  rt.enqueue(q)->wait();
  return v;
}

}  // namespace

TEST_CASE(
    "lone response cache hits of a one-host job are agreed in shared memory, with the coordinator's results",
    "[inprocess][agreement]") {
  const bool agreement = GENERATE(true, false);
  Cluster cluster(2, [&](RuntimeOptions& o) {
    busyPolling(o);
    o.shm_agreement = agreement;
  });
  cluster.forEach([&](int r) {
    for (int k = 0; k < 200; ++k) step(cluster[r], r, k);
  });
  const uint64_t agreed = cluster[0].agreedOperations();
  INFO("agreed without the coordinator: " << agreed << " of 1000 operations");
  CHECK(cluster[1].agreedOperations() == agreed);  // an operation is agreed by every rank or by none
  if (agreement && sharedMemory()) {
    CHECK(agreed > 0);
  } else {
    CHECK(agreed == 0);
  }
}

TEST_CASE("announcements that cannot agree leave the operation to the coordinator",
          "[inprocess][agreement]") {
  Cluster cluster(2, busyPolling);
  cluster.forEach([&](int r) {
    Runtime& rt = cluster[r];
    for (int k = 0; k < 5; ++k) step(rt, r, k);  // every name cached, and remembered alone
    // A late rank: rank 1 comes after rank 0 gave up waiting for it (the grace is 200 us), which refuses rank
    // 0's announcement.
    const uint64_t refused = rt.refusedAnnouncements();
    for (int k = 0; k < 40; ++k) {
      if (r == 1 && k % 2 == 1) std::this_thread::sleep_for(std::chrono::microseconds(400));
      REQUIRE(allreduce(rt, "ar", 16, 1.0f) == std::vector<float>(16, 2.0f));
    }
    if (r == 0 && sharedMemory()) CHECK(rt.refusedAnnouncements() > refused);
    // Different lone operations announced at once, and a burst in different orders.
    for (int k = 0; k < 20; ++k) {
      if (r == 0) {
        REQUIRE(allreduce(rt, "p", 4, 1.0f) == std::vector<float>(4, 2.0f));
        REQUIRE(allreduce(rt, "q", 8, 1.0f) == std::vector<float>(8, 2.0f));
      } else {
        std::vector<float> q(8, 1.0f), p(4, 1.0f);
        Request rq = request(OpType::kAllreduce, "q", DataType::kFloat32, 8, 1, q.data());
        rq.output = q.data();
        auto wq = rt.enqueue(rq);
        std::this_thread::sleep_for(std::chrono::microseconds(k % 3 * 100));
        Request rp = request(OpType::kAllreduce, "p", DataType::kFloat32, 4, 1, p.data());
        rp.output = p.data();
        auto wp = rt.enqueue(rp);
        wp->wait();
        wq->wait();
        REQUIRE(p == std::vector<float>(4, 2.0f));
        REQUIRE(q == std::vector<float>(8, 2.0f));
      }
    }
    // A shape changed on one rank under a cached name: the mismatch, on both ranks, then the steady state
    // again.
    for (int k = 0; k < 10; ++k) REQUIRE(allreduce(rt, "w", 4, 1.0f) == std::vector<float>(4, 2.0f));
    std::vector<float> v(5, 1.0f);
    Request q = request(OpType::kAllreduce, "w", DataType::kFloat32, r == 1 ? 5 : 4, 1, v.data());
    q.output = v.data();
    REQUIRE_THROWS_WITH(
        rt.enqueue(q)->wait(),
        "Mismatched allreduce shapes for tensor 'w': 4 elements on ranks [0], 5 elements on ranks [1]");
    for (int k = 0; k < 10; ++k) REQUIRE(allreduce(rt, "w", 4, 1.0f) == std::vector<float>(4, 2.0f));
    for (int k = 5; k < 25; ++k) step(rt, r, k);
  });
  CHECK(cluster[1].agreedOperations() == cluster[0].agreedOperations());
  if (sharedMemory()) CHECK(cluster[0].agreedOperations() > 0);
}

TEST_CASE(
    "while a rank has joined, the others' cached allreduces go through the coordinator and get its zeros",
    "[inprocess][agreement]") {
  // Three ranks on this machine's cores would turn busy polling, and with it agreement, off: forced on.
  Cluster cluster(3, busyPolling);
  cluster.forEach([&](int r) {
    for (int k = 0; k < 10; ++k) REQUIRE(allreduce(cluster[r], "aj", 4, 1.0f) == std::vector<float>(4, 3.0f));
    if (r != 2) {
      for (int k = 0; k < 20; ++k)
        REQUIRE(allreduce(cluster[r], "aj", 4, 1.0f) == std::vector<float>(4, 2.0f));
    }
    Request j;
    j.type = OpType::kJoin;
    auto w = cluster[r].enqueue(j);
    w->wait();
    REQUIRE(w->result_int != 2);  // rank 2 joined first
  });
  CHECK(cluster[1].agreedOperations() == cluster[0].agreedOperations());
  CHECK(cluster[2].agreedOperations() == cluster[0].agreedOperations());
}

TEST_CASE(
    "a rank that changes its rows under a cached name: every rank runs the response with everyone's rows",
    "[inprocess][agreement]") {
  Cluster cluster(2, busyPolling);
  cluster.forEach([&](int r) {
    // Rank 1 gathers 1 row, then 3 from step 10 on, then 1 again from step 20 on; rank 0 always 1. The steps
    // where rank 1 changes go through the coordinator; the ones after may be agreed, and must then run the
    // response with rank 1's new rows on both ranks, though rank 0's part of it did not change.
    for (int k = 0; k < 30; ++k) {
      auto rowsOf = [&](int p) -> int64_t { return p == 1 && k >= 10 && k < 20 ? 3 : 1; };
      std::vector<int32_t> in(static_cast<size_t>(rowsOf(r)), 100 * r + k);
      auto ag =
          cluster[r].enqueue(request(OpType::kAllgather, "rows", DataType::kInt32, rowsOf(r), 1, in.data()));
      ag->wait();
      std::vector<int32_t> want;
      for (int p = 0; p < 2; ++p) want.insert(want.end(), static_cast<size_t>(rowsOf(p)), 100 * p + k);
      REQUIRE(ag->result_rows == static_cast<int64_t>(want.size()));
      REQUIRE(std::memcmp(ag->result.data(), want.data(), want.size() * 4) == 0);
    }
  });
  CHECK(cluster[1].agreedOperations() == cluster[0].agreedOperations());
  if (sharedMemory()) CHECK(cluster[0].agreedOperations() > 0);
}

TEST_CASE("a name that ran fused in between: its agreed runs leave rank 0's record of the name as it was",
          "[inprocess][agreement]") {
  // x runs alone with 4 elements (remembered), then fused with y at 8 elements (rank 0's response cache and
  // the workers' copy of it now hold 8), then alone with 4 again, agreed from the remembered response, then
  // alone with 4 through the coordinator (rank 1 late). The agreed run must not make rank 1 believe that rank
  // 0 holds 4 for x: it would send the cache id, and rank 0 would read it as 8 elements (a false mismatch).
  // Between the fused run and the agreed one, z runs alone through the coordinator: the first operation after
  // a batch is never announced (it usually begins the next batch), and x must be the second so that its run
  // right after the fused one can agree. Without z no run of a cycle could, and the case rested on the five
  // runs before the cycles agreeing at least once.
  Cluster cluster(2, busyPolling);
  std::array<int, 2> agreed_after_fused{};  // x's agreed runs right after a fused one, each rank's count
  cluster.forEach([&](int r) {
    Runtime& rt = cluster[r];
    for (int k = 0; k < 5; ++k) REQUIRE(allreduce(rt, "x", 4, 1.0f) == std::vector<float>(4, 2.0f));
    for (int cycle = 0; cycle < 20; ++cycle) {
      std::vector<float> x8(8, 1.0f), y8(8, 1.0f);
      Request qx = request(OpType::kAllreduce, "x", DataType::kFloat32, 8, 1, x8.data());
      qx.output = x8.data();
      Request qy = request(OpType::kAllreduce, "y", DataType::kFloat32, 8, 1, y8.data());
      qy.output = y8.data();
      for (auto& w : rt.enqueueGroup({qx, qy})) w->wait();
      REQUIRE(x8 == std::vector<float>(8, 2.0f));
      REQUIRE(allreduce(rt, "z", 1, 1.0f) == std::vector<float>(1, 2.0f));
      const uint64_t agreed = rt.agreedOperations();
      REQUIRE(allreduce(rt, "x", 4, 1.0f) == std::vector<float>(4, 2.0f));
      if (rt.agreedOperations() > agreed) ++agreed_after_fused[static_cast<size_t>(r)];
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      REQUIRE(allreduce(rt, "x", 4, 1.0f) == std::vector<float>(4, 2.0f));
    }
  });
  CHECK(cluster[1].agreedOperations() == cluster[0].agreedOperations());
  CHECK(agreed_after_fused[0] == agreed_after_fused[1]);
  if (sharedMemory()) CHECK(agreed_after_fused[0] > 0);
}

TEST_CASE(
    "ranks bound to a core each count as a core each and agree; ranks bound to one CPU together do not poll",
    "[inprocess][agreement]") {
  // The busy-poll period is left to the runtime here: it polls only where the host's ranks have a core
  // each, counted over the union of their affinity masks (runtime/host_cores.h). Each rank's mask is set on
  // the thread that initializes it, which its background thread inherits.
  const std::vector<int> cpus = hvd::test::allowedCpus();
  if (cpus.size() < 2) {
    WARN("one CPU here: binding 2 ranks to a core each was not checked");
    return;
  }
  const bool apart = GENERATE(true, false);
  Cluster cluster(2, [&](RuntimeOptions& o) { REQUIRE(hvd::test::pinTo(cpus[apart ? o.rank : 0])); });
  cluster.forEach([&](int r) {
    for (int k = 0; k < 100; ++k) step(cluster[r], r, k);
  });
  const uint64_t agreed = cluster[0].agreedOperations();
  INFO((apart ? "bound apart" : "bound together")
       << "; agreed without the coordinator: " << agreed << " of 500 operations");
  CHECK(cluster[1].agreedOperations() == agreed);
  if (apart && sharedMemory()) {
    CHECK(agreed > 0);  // polling: each rank's own mask holds one CPU, but the two have a core each
  } else {
    CHECK(agreed == 0);  // together on one CPU, nothing polls (and over TCP nothing is agreed)
  }
}
