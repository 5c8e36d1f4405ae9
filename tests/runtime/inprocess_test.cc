// Collectives with ranks as threads over a MemoryStore: every op, type and size that matters.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>

#include <sys/socket.h>

#include "gloo_backend/types.h"
#include "tests/runtime/cluster.h"

using namespace hvd::runtime;
using hvd::runtime::testing::Cluster;
using hvd::runtime::testing::request;
using hvd::gloo_backend::elementSize;

namespace {

const DataType kAllTypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt16, DataType::kInt32,
                              DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                              DataType::kFloat32, DataType::kFloat64, DataType::kBool};

// Value of element i on rank r, small enough to be exact in every type; product inputs are 1 or 2.
double inputValue(DataType t, ReduceOp op, int r, size_t i) {
  if (t == DataType::kBool) return static_cast<double>((r + i) % 2);
  if (op == ReduceOp::kProduct) return 1.0 + static_cast<double>((r + i) % 2);
  return static_cast<double>((r * 3 + i) % 7);
}

uint16_t halfBits(float f) {  // exact for the small integers used here
  if (f == 0) return 0;
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  return static_cast<uint16_t>(sign | (exp << 10) | ((x >> 13) & 0x3ffu));
}
float halfValue(uint16_t h) {
  if ((h & 0x7fff) == 0) return 0;
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = ((h >> 10) & 0x1f) - 15 + 127;
  const uint32_t bits = sign | (exp << 23) | (static_cast<uint32_t>(h & 0x3ff) << 13);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void store(DataType t, void* base, size_t i, double v) {
  switch (t) {
    case DataType::kUInt8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt8: static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v); break;
    case DataType::kInt16: static_cast<int16_t*>(base)[i] = static_cast<int16_t>(v); break;
    case DataType::kInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case DataType::kFloat16: static_cast<uint16_t*>(base)[i] = halfBits(static_cast<float>(v)); break;
    case DataType::kBFloat16: {
      const float f = static_cast<float>(v);
      uint32_t x;
      std::memcpy(&x, &f, 4);
      static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(x >> 16);
      break;
    }
    case DataType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(base)[i] = v; break;
    case DataType::kBool: static_cast<uint8_t*>(base)[i] = v != 0; break;
  }
}

double load(DataType t, const void* base, size_t i) {
  switch (t) {
    case DataType::kUInt8: return static_cast<const uint8_t*>(base)[i];
    case DataType::kInt8: return static_cast<const int8_t*>(base)[i];
    case DataType::kInt16: return static_cast<const int16_t*>(base)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(base)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DataType::kFloat16: return halfValue(static_cast<const uint16_t*>(base)[i]);
    case DataType::kBFloat16: {
      const uint32_t x = static_cast<uint32_t>(static_cast<const uint16_t*>(base)[i]) << 16;
      float f;
      std::memcpy(&f, &x, 4);
      return f;
    }
    case DataType::kFloat32: return static_cast<const float*>(base)[i];
    case DataType::kFloat64: return static_cast<const double*>(base)[i];
    case DataType::kBool: return static_cast<const uint8_t*>(base)[i];
  }
  return 0;
}

bool isFloat(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 || t == DataType::kFloat64;
}

double expected(DataType t, ReduceOp op, int n, size_t i) {
  double acc = inputValue(t, op, 0, i);
  for (int r = 1; r < n; ++r) {
    const double v = inputValue(t, op, r, i);
    switch (op) {
      case ReduceOp::kAverage:
      case ReduceOp::kSum: acc += v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kProduct: acc *= v; break;
    }
  }
  if (t == DataType::kBool) return acc != 0 ? 1 : 0;
  if (op == ReduceOp::kAverage) return isFloat(t) ? acc / n : std::trunc(acc / n);  // Horovod's rule
  return acc;
}

bool close(DataType t, double got, double want) {
  const double tol = (t == DataType::kFloat16 || t == DataType::kBFloat16) ? 1e-2 : 1e-6;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

// Runs `q` as a reducescatter on rank r of `cluster` and waits for it. Checks that the result holds this
// rank's share of q.rows (the first rows % n ranks take one more); `first` is the share's first row.
struct Reducescatter {
  std::shared_ptr<Work> work;
  int64_t rows = 0, first = 0;
};
Reducescatter reducescatter(Cluster& cluster, int r, Request q) {
  q.type = OpType::kReducescatter;
  const int64_t rows = q.rows;
  Reducescatter out;
  out.work = cluster[r].enqueue(std::move(q));
  out.work->wait();
  const int n = cluster.size();
  const int64_t base = rows / n, extra = rows % n;
  out.rows = base + (r < extra);
  out.first = r * base + std::min<int64_t>(r, extra);
  REQUIRE(out.work->result_rows == out.rows);
  return out;
}

}  // namespace

TEST_CASE("allreduce: every type, op and count on 1-8 ranks, fused and unfused", "[inprocess]") {
  const int n = GENERATE(1, 2, 3, 5, 8);
  Cluster cluster(n);
  const size_t counts[] = {0, 1, 7, 1001};
  cluster.forEach([&](int r) {
    struct Case {
      DataType t;
      ReduceOp op;
      size_t count;
      std::vector<std::byte> in, out;
      std::shared_ptr<Work> work;
    };
    std::vector<Case> cases;
    for (DataType t : kAllTypes) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
        if (t == DataType::kBool && op == ReduceOp::kAverage) continue;
        for (size_t count : counts) cases.push_back({t, op, count, {}, {}, nullptr});
      }
    }
    // All submitted before any wait: the coordinator fuses what is ready together.
    for (size_t c = 0; c < cases.size(); ++c) {
      auto& k = cases[c];
      k.in.resize(k.count * elementSize(k.t) + 1);
      k.out.resize(k.count * elementSize(k.t) + 1);
      for (size_t i = 0; i < k.count; ++i) store(k.t, k.in.data(), i, inputValue(k.t, k.op, r, i));
      Request q;
      q.type = OpType::kAllreduce;
      q.name = "case" + std::to_string(c);
      q.dtype = k.t;
      q.op = k.op;
      q.rows = static_cast<int64_t>(k.count);
      q.input = k.in.data();
      // Half the cases in place.
      q.output = c % 2 ? k.in.data() : k.out.data();
      k.work = cluster[r].enqueue(q);
    }
    for (size_t c = 0; c < cases.size(); ++c) {
      auto& k = cases[c];
      k.work->wait();
      const void* result = c % 2 ? k.in.data() : k.out.data();
      for (size_t i = 0; i < k.count; ++i) {
        const double got = load(k.t, result, i), want = expected(k.t, k.op, n, i);
        if (!close(k.t, got, want)) {
          FAIL("rank " << r << " size " << n << " " << hvd::gloo_backend::name(k.t) << " "
                       << hvd::gloo_backend::name(k.op) << " count " << k.count << " element " << i << ": got "
                       << got << ", want " << want);
        }
      }
    }
  });
}

TEST_CASE("allreduce prescale and postscale", "[inprocess]") {
  Cluster cluster(3);
  cluster.forEach([&](int r) {
    std::vector<double> v(5, r + 1.0);  // sum over ranks: 6
    Request q;
    q.name = "scaled";
    q.dtype = DataType::kFloat64;
    q.op = ReduceOp::kAverage;
    q.prescale = 2.0;
    q.postscale = 0.5;
    q.rows = 5;
    q.input = q.output = v.data();
    cluster[r].enqueue(q)->wait();
    for (double x : v) REQUIRE(x == Approx(6.0 * 2.0 * 0.5 / 3));
  });
}

TEST_CASE("broadcast from every root", "[inprocess]") {
  const int n = GENERATE(1, 2, 4, 7);
  Cluster cluster(n);
  cluster.forEach([&](int r) {
    for (int root = 0; root < n; ++root) {
      for (DataType t : kAllTypes) {
        const size_t count = 33;
        std::vector<std::byte> buf(count * elementSize(t));
        for (size_t i = 0; i < count; ++i) store(t, buf.data(), i, r == root ? static_cast<double>((i + root) % 2) : 0);
        Request q;
        q.type = OpType::kBroadcast;
        q.name = "b" + std::to_string(root) + hvd::gloo_backend::name(t);
        q.dtype = t;
        q.root = root;
        q.rows = count;
        q.input = q.output = buf.data();
        cluster[r].enqueue(q)->wait();
        for (size_t i = 0; i < count; ++i) REQUIRE(load(t, buf.data(), i) == static_cast<double>((i + root) % 2));
      }
    }
  });
}

TEST_CASE("allgather with a different first dimension on every rank (including 0 rows)", "[inprocess]") {
  const int n = GENERATE(1, 2, 3, 6);
  Cluster cluster(n);
  cluster.forEach([&](int r) {
    const int64_t rows = r % 3;  // 0, 1, 2, 0, ...
    const int64_t width = 3;
    std::vector<int32_t> in(rows * width);
    for (int64_t i = 0; i < rows * width; ++i) in[i] = r * 100 + static_cast<int32_t>(i);
    auto w =
        cluster[r].enqueue(request(OpType::kAllgather, "gather", DataType::kInt32, rows, width, in.data()));
    w->wait();
    std::vector<int32_t> want;
    for (int p = 0; p < n; ++p) {
      for (int64_t i = 0; i < (p % 3) * width; ++i) want.push_back(p * 100 + static_cast<int32_t>(i));
    }
    REQUIRE(w->result_rows * width == static_cast<int64_t>(want.size()));
    REQUIRE((want.empty() || std::memcmp(w->result.data(), want.data(), want.size() * 4) == 0));
  });
}

TEST_CASE("alltoall with explicit and even splits", "[inprocess]") {
  const int n = GENERATE(1, 2, 4);
  Cluster cluster(n);
  cluster.forEach([&](int r) {
    // Explicit: rank r sends (p + r) % 3 rows to rank p; row value = 1000 * r + p.
    std::vector<int64_t> splits(n);
    std::vector<float> in;
    for (int p = 0; p < n; ++p) {
      splits[p] = (p + r) % 3;
      for (int64_t k = 0; k < splits[p] * 2; ++k) in.push_back(1000.0f * r + p);
    }
    Request q = request(OpType::kAlltoall, "a2a", DataType::kFloat32, static_cast<int64_t>(in.size() / 2), 2,
                        in.data());
    q.splits = splits;
    auto w = cluster[r].enqueue(q);
    w->wait();
    std::vector<float> want;
    for (int p = 0; p < n; ++p) {
      REQUIRE(w->received_splits[p] == (r + p) % 3);
      for (int64_t k = 0; k < ((r + p) % 3) * 2; ++k) want.push_back(1000.0f * p + r);
    }
    REQUIRE(w->result.size() == want.size() * 4);
    REQUIRE((want.empty() || std::memcmp(w->result.data(), want.data(), want.size() * 4) == 0));

    // Even: n rows, one to each rank.
    std::vector<int64_t> even(n);
    for (int p = 0; p < n; ++p) even[p] = r * 10 + p;
    auto we = cluster[r].enqueue(request(OpType::kAlltoall, "a2a_even", DataType::kInt64, n, 1, even.data()));
    we->wait();
    const auto* got = reinterpret_cast<const int64_t*>(we->result.data());
    for (int p = 0; p < n; ++p) REQUIRE(got[p] == p * 10 + r);
  });
}

TEST_CASE("reducescatter with uneven rows, sum and average", "[inprocess]") {
  // The ring sends block by block: rows < ranks gives empty blocks, 0 rows nothing at all.
  const int n = GENERATE(1, 2, 3, 5, 8);
  const int64_t rows = GENERATE(0, 3, 7, 1001);
  CAPTURE(n, rows);
  Cluster cluster(n);
  cluster.forEach([&](int r) {
    const int64_t width = 2;
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      std::vector<double> in(rows * width);
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<double>(i) + r;
      Request q;
      q.name = std::string("rs") + hvd::gloo_backend::name(op);
      q.dtype = DataType::kFloat64;
      q.op = op;
      q.rows = rows;
      q.row_elements = width;
      q.input = in.data();
      const auto rs = reducescatter(cluster, r, q);
      const auto* got = reinterpret_cast<const double*>(rs.work->result.data());
      for (int64_t i = 0; i < rs.rows * width; ++i) {
        const double idx = static_cast<double>(rs.first * width + i);
        double want = idx * n + n * (n - 1) / 2.0;
        if (op == ReduceOp::kAverage) want /= n;
        REQUIRE(got[i] == Approx(want));
      }
    }
  });
}

TEST_CASE("large allreduce and reducescatter: the segmented ring's blocks of several segments, uneven, exact",
          "[inprocess]") {
  // Over Gloo (HVD_SHARED_MEMORY=0: test_runtime_inprocess_tcp), messages above 256 KiB take the ring of
  // 1 MiB segments with 4 received ahead: counts that leave blocks of 0 to 7 segments, none a multiple.
  const int n = GENERATE(2, 3, 5);
  const int64_t rows = GENERATE(int64_t{3} << 20 | 12345, int64_t{700001});
  CAPTURE(n, rows);
  Cluster cluster(n);
  cluster.forEach([&](int r) {
    // Small integers in float32: every order of summation gives the same exact result.
    std::vector<float> v(rows);
    for (int64_t i = 0; i < rows; ++i) v[i] = static_cast<float>((i * 7 + r) % 13);
    Request a;
    a.name = "big_allreduce";
    a.dtype = DataType::kFloat32;
    a.op = ReduceOp::kSum;
    a.rows = rows;
    a.input = a.output = v.data();
    cluster[r].enqueue(a)->wait();
    for (int64_t i = 0; i < rows; ++i) {
      float want = 0;
      for (int p = 0; p < n; ++p) want += static_cast<float>((i * 7 + p) % 13);
      if (v[i] != want) FAIL("rank " << r << " element " << i << ": got " << v[i] << ", want " << want);
    }
    std::vector<int32_t> in(rows);
    for (int64_t i = 0; i < rows; ++i) in[i] = static_cast<int32_t>(i % 1000 + r);
    Request q;
    q.name = "big_reducescatter";
    q.dtype = DataType::kInt32;
    q.op = ReduceOp::kSum;
    q.rows = rows;
    q.input = in.data();
    const auto rs = reducescatter(cluster, r, q);
    const auto* got = reinterpret_cast<const int32_t*>(rs.work->result.data());
    for (int64_t i = 0; i < rs.rows; ++i) {
      const int64_t idx = rs.first + i;
      const int32_t want = static_cast<int32_t>((idx % 1000) * n + n * (n - 1) / 2);
      if (got[i] != want) FAIL("rank " << r << " reducescatter element " << i << ": got " << got[i] << ", want " << want);
    }
  });
}

TEST_CASE("ranks submitting in different orders agree on one order", "[inprocess]") {
  Cluster cluster(4);
  cluster.forEach([&](int r) {
    constexpr int kOps = 20;
    std::vector<std::vector<float>> bufs(kOps, std::vector<float>(10, 1.0f));
    std::vector<std::shared_ptr<Work>> works(kOps);
    for (int k = 0; k < kOps; ++k) {
      const int i = (k + r * 7) % kOps;  // a different rotation per rank
      Request q;
      q.name = "t" + std::to_string(i);
      q.op = ReduceOp::kSum;
      q.rows = 10;
      q.input = q.output = bufs[i].data();
      works[i] = cluster[r].enqueue(q);
    }
    for (int i = 0; i < kOps; ++i) {
      works[i]->wait();
      for (float x : bufs[i]) REQUIRE(x == 4.0f);
    }
  });
}

TEST_CASE("barrier and join", "[inprocess]") {
  Cluster cluster(3);
  cluster.forEach([&](int r) {
    Request b;
    b.type = OpType::kBarrier;
    cluster[r].enqueue(b)->wait();
    // Rank 2 joins at once; ranks 0 and 1 still allreduce, rank 2 contributes zeros.
    if (r != 2) {
      std::vector<float> v(4, 1.0f);
      Request q;
      q.name = "after_join";
      q.op = ReduceOp::kSum;
      q.rows = 4;
      q.input = q.output = v.data();
      cluster[r].enqueue(q)->wait();
      for (float x : v) REQUIRE(x == 2.0f);
    }
    Request j;
    j.type = OpType::kJoin;
    auto w = cluster[r].enqueue(j);
    w->wait();
    REQUIRE(w->result_int >= 0);
    REQUIRE(w->result_int != 2);  // rank 2 joined first
  });
}

TEST_CASE("mismatches fail the operation on every rank with the tensor, values and ranks", "[inprocess]") {
  Cluster cluster(3);
  struct Variant {
    const char* what;
    std::function<void(Request&, int)> apply;
    const char* expect;
  };
  const std::vector<Variant> variants = {
      {"dtype", [](Request& q, int r) { if (r == 1) q.dtype = DataType::kInt32; },
       "Mismatched allreduce data types for tensor 'm_dtype': float32 on ranks [0, 2], int32 on ranks [1]"},
      {"shape", [](Request& q, int r) { if (r == 2) q.rows = 3; },
       "Mismatched allreduce shapes for tensor 'm_shape': 3 elements on ranks [2], 4 elements on ranks [0, 1]"},
      {"op", [](Request& q, int r) { if (r == 0) q.op = ReduceOp::kMax; },
       "Mismatched allreduce reduce operations for tensor 'm_op': max on ranks [0], sum on ranks [1, 2]"},
      {"prescale", [](Request& q, int r) { if (r == 1) q.prescale = 2.0; },
       "Mismatched allreduce prescale factors for tensor 'm_prescale': 1 on ranks [0, 2], 2 on ranks [1]"},
      {"type", [](Request& q, int r) { if (r == 2) { q.type = OpType::kBroadcast; q.root = 0; } },
       "Mismatched operations for tensor 'm_type': allreduce on ranks [0, 1], broadcast on ranks [2]"},
      {"device", [](Request& q, int r) { q.device = r == 1 ? 0 : -1; },
       "Mismatched allreduce CPU/GPU device selection for tensor 'm_device': CPU on ranks [0, 2], GPU on ranks [1]"},
  };
  cluster.forEach([&](int r) {
    for (const auto& v : variants) {
      std::vector<float> buf(4, 1.0f);
      Request q;
      q.name = std::string("m_") + v.what;
      q.op = ReduceOp::kSum;
      q.rows = 4;
      q.input = q.output = buf.data();
      v.apply(q, r);
      auto w = cluster[r].enqueue(q);
      try {
        w->wait();
        FAIL("rank " << r << ": mismatched " << v.what << " succeeded");
      } catch (const MismatchError& e) {
        REQUIRE(std::string(e.what()) == v.expect);
      }
    }
    // The runtime keeps working after mismatches; GPUs of different ordinals on different ranks agree
    // (each rank drives its own device).
    std::vector<float> ok(2, 1.0f);
    Request q;
    q.name = "after_mismatch";
    q.op = ReduceOp::kSum;
    q.rows = 2;
    q.device = r;
    q.input = q.output = ok.data();
    cluster[r].enqueue(q)->wait();
    REQUIRE(ok[0] == 3.0f);
  });
}

TEST_CASE("bad arguments are rejected at once with the offending value", "[inprocess]") {
  Cluster cluster(2);
  std::atomic<int> checked{0};
  cluster.forEach([&](int r) {
    std::vector<float> buf(4), other(4);
    // The same name twice in flight on one rank. Each rank's name is one the other rank submits only after
    // this check: otherwise the first operation could complete before the second enqueue, and nothing would
    // throw.
    const std::string mine = "dup" + std::to_string(r), theirs = "dup" + std::to_string(1 - r);
    Request q;
    q.name = mine;
    q.rows = 4;
    q.input = q.output = buf.data();
    auto first = cluster[r].enqueue(q);
    REQUIRE_THROWS_WITH(cluster[r].enqueue(q),
                        Catch::Contains("same name as another tensor") && Catch::Contains("'" + mine + "'"));
    ++checked;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (checked.load() < 2) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);  // the other rank's check failed
      std::this_thread::yield();
    }
    Request o = q;
    o.name = theirs;
    o.input = o.output = other.data();
    auto second = cluster[r].enqueue(o);
    first->wait();
    second->wait();

    Request b;
    b.type = OpType::kBroadcast;
    b.name = "badroot";
    b.root = 5;
    b.rows = 4;
    b.input = b.output = buf.data();
    REQUIRE_THROWS_WITH(cluster[r].enqueue(b), Catch::Contains("invalid root rank 5"));

    Request s;
    s.type = OpType::kReducescatter;
    s.name = "rsmax";
    s.op = ReduceOp::kMax;
    s.rows = 4;
    s.input = buf.data();
    REQUIRE_THROWS_WITH(cluster[r].enqueue(s), Catch::Contains("reducescatter supports sum and average only, got max"));

    Request a;
    a.type = OpType::kAlltoall;
    a.name = "a2a_bad";
    a.rows = 3;
    a.input = buf.data();
    REQUIRE_THROWS_WITH(cluster[r].enqueue(a), Catch::Contains("(3) is not an even multiple of the number of workers (2)"));
  });
}

TEST_CASE("after shutdown, pending and new operations fail with ShutDownError", "[inprocess]") {
  Cluster cluster(2);
  // Rank 0 submits an op rank 1 never submits, then rank 1 shuts the job down.
  std::vector<float> buf(2, 1.0f);
  Request q;
  q.name = "orphan";
  q.rows = 2;
  q.input = q.output = buf.data();
  auto w = cluster[0].enqueue(q);
  cluster[1].shutdown();
  REQUIRE_THROWS_AS(w->wait(), ShutDownError);
  REQUIRE_THROWS_AS(cluster[0].enqueue(q), ShutDownError);
  cluster[0].shutdown();
  REQUIRE(cluster[0].stopped());
}

TEST_CASE("no CUDA runtime here: the CPU is used without error", "[inprocess]") {
  Cluster cluster(1);
  REQUIRE(cluster[0].device() == -1);
  Cluster disabled(1, [](RuntimeOptions& o) { o.gpu_pinning = false; });
  REQUIRE(disabled[0].device() == -1);
}

TEST_CASE("response cache: steady-state steps, a changed shape, a mismatch under a cached name", "[inprocess]") {
  const size_t capacity = GENERATE(size_t{0}, size_t{1024});
  Cluster cluster(3, [&](RuntimeOptions& o) { o.cache_capacity = capacity; });
  cluster.forEach([&](int r) {
    auto step = [&](int64_t count) {
      std::vector<float> v(static_cast<size_t>(count), 1.0f);
      Request q;
      q.name = "w";
      q.op = ReduceOp::kSum;
      q.rows = count;
      q.input = q.output = v.data();
      cluster[r].enqueue(q)->wait();
      for (float x : v) REQUIRE(x == 3.0f);
    };
    step(4);
    step(4);  // a cache hit on ranks 1 and 2
    step(4);
    // Rank 1 changes the shape under the cached name: every rank gets the mismatch.
    {
      std::vector<float> v(5, 1.0f);
      Request q;
      q.name = "w";
      q.op = ReduceOp::kSum;
      q.rows = r == 1 ? 5 : 4;
      q.input = q.output = v.data();
      REQUIRE_THROWS_WITH(cluster[r].enqueue(q)->wait(),
                          "Mismatched allreduce shapes for tensor 'w': 4 elements on ranks [0, 2], 5 elements on ranks [1]");
    }
    step(5);  // everyone changes: resubmitted in full, the cache entry is refreshed
    step(5);
    step(4);
  });
}

TEST_CASE("response cache: allgather and alltoall keep each rank's rows, and a rank that changes them",
          "[inprocess]") {
  const size_t capacity = GENERATE(size_t{0}, size_t{1024});
  const int n = 3;
  Cluster cluster(n, [&](RuntimeOptions& o) { o.cache_capacity = capacity; });
  cluster.forEach([&](int r) {
    // Step k: rank p gathers p + 1 rows (rank 1: 4 from step 3 on, back to 2 at step 5), value 100 p + i;
    // and sends (p + q + k) % 3 rows to rank q in an alltoall, row value 10 p + q (rank 2's splits change
    // with k, the others' only through q).
    for (int k = 0; k < 7; ++k) {
      auto rowsOf = [&](int p) -> int64_t { return p == 1 && k >= 3 && k < 5 ? 4 : p + 1; };
      std::vector<int32_t> in(static_cast<size_t>(rowsOf(r)));
      for (size_t i = 0; i < in.size(); ++i) in[i] = 100 * r + static_cast<int32_t>(i);
      auto ag =
          cluster[r].enqueue(request(OpType::kAllgather, "ag", DataType::kInt32, rowsOf(r), 1, in.data()));
      ag->wait();
      std::vector<int32_t> want;
      for (int p = 0; p < n; ++p) {
        for (int64_t i = 0; i < rowsOf(p); ++i) want.push_back(100 * p + static_cast<int32_t>(i));
      }
      REQUIRE(ag->result_rows == static_cast<int64_t>(want.size()));
      REQUIRE(std::memcmp(ag->result.data(), want.data(), want.size() * 4) == 0);

      auto splitOf = [&](int p, int q) -> int64_t { return p == 2 ? (p + q + k) % 3 : (p + q) % 3; };
      std::vector<int64_t> splits(n);
      std::vector<int32_t> out;
      for (int q = 0; q < n; ++q) {
        splits[q] = splitOf(r, q);
        for (int64_t i = 0; i < splits[q]; ++i) out.push_back(10 * r + q);
      }
      Request a2a = request(OpType::kAlltoall, "a2a", DataType::kInt32, static_cast<int64_t>(out.size()), 1,
                            out.data());
      a2a.splits = splits;
      auto w = cluster[r].enqueue(a2a);
      w->wait();
      std::vector<int32_t> got_want;
      for (int p = 0; p < n; ++p) {
        for (int64_t i = 0; i < splitOf(p, r); ++i) got_want.push_back(10 * p + r);
      }
      REQUIRE(w->result_rows == static_cast<int64_t>(got_want.size()));
      REQUIRE((got_want.empty() || std::memcmp(w->result.data(), got_want.data(), got_want.size() * 4) == 0));
    }
    // One name for an allreduce, then for an allgather whose rows differ by rank, twice (the second a cache
    // hit of each rank's own rows), then for the allreduce again.
    for (int k = 0; k < 4; ++k) {
      const bool gather = k == 1 || k == 2;
      const int64_t rows = gather ? r + 1 : 2;
      std::vector<int32_t> in(static_cast<size_t>(rows), r + 1);
      Request q = request(gather ? OpType::kAllgather : OpType::kAllreduce, "reused", DataType::kInt32, rows,
                          1, in.data());
      if (!gather) q.output = in.data();
      auto w = cluster[r].enqueue(q);
      w->wait();
      if (gather) {
        std::vector<int32_t> want;
        for (int p = 0; p < n; ++p) want.insert(want.end(), static_cast<size_t>(p + 1), p + 1);
        REQUIRE(w->result_rows == static_cast<int64_t>(want.size()));
        REQUIRE(std::memcmp(w->result.data(), want.data(), want.size() * 4) == 0);
      } else {
        REQUIRE(in == std::vector<int32_t>(2, 1 + 2 + 3));
      }
    }
  });
}

TEST_CASE("large allreduce (ring algorithm) and fusion in several groups", "[inprocess]") {
  const size_t threshold = GENERATE(size_t{0}, size_t{4096}, size_t{128} << 20);
  Cluster cluster(3, [&](RuntimeOptions& o) { o.fusion_threshold = threshold; });
  cluster.forEach([&](int r) {
    // One tensor above the small-message limit (ring), then 40 small ones submitted together: with a
    // 4 KiB threshold they are fused in several groups, with 0 each runs alone.
    std::vector<float> big(300001);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>((i + r) % 5);
    Request q;
    q.name = "big";
    q.op = ReduceOp::kAverage;
    q.rows = static_cast<int64_t>(big.size());
    q.input = q.output = big.data();
    auto w = cluster[r].enqueue(q);
    std::vector<std::vector<int64_t>> small(40, std::vector<int64_t>(300));
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 40; ++k) {
      for (auto& x : small[k]) x = r + k;
      Request s;
      s.name = "small" + std::to_string(k);
      s.dtype = DataType::kInt64;
      s.op = ReduceOp::kMax;
      s.rows = 300;
      s.input = s.output = small[k].data();
      works.push_back(cluster[r].enqueue(s));
    }
    w->wait();
    for (size_t i = 0; i < big.size(); ++i) {
      const float want = static_cast<float>((i % 5 + (i + 1) % 5 + (i + 2) % 5)) / 3.0f;
      if (std::fabs(big[i] - want) > 1e-5f) FAIL("element " << i << ": " << big[i] << " want " << want);
    }
    for (int k = 0; k < 40; ++k) {
      works[k]->wait();
      for (auto x : small[k]) REQUIRE(x == 2 + k);
    }
  });
}

TEST_CASE("floating-point allreduce results are bit-identical on every rank", "[inprocess]") {
  const int n = GENERATE(2, 3, 4, 5);
  Cluster cluster(n);
  std::vector<std::vector<float>> results(n);
  cluster.forEach([&](int r) {
    for (size_t count : {size_t{7}, size_t{1000}, size_t{100000}, size_t{300000}}) {
      std::vector<float> v(count);
      uint32_t x = 12345u + static_cast<uint32_t>(r) * 7919u;
      for (auto& f : v) {
        x = x * 1664525u + 1013904223u;
        f = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;  // values whose sum depends on the order
      }
      Request q;
      q.name = "bits" + std::to_string(count);
      q.op = ReduceOp::kSum;
      q.rows = static_cast<int64_t>(count);
      q.input = q.output = v.data();
      cluster[r].enqueue(q)->wait();
      results[r].insert(results[r].end(), v.begin(), v.end());
    }
  });
  for (int r = 1; r < n; ++r) {
    REQUIRE(results[r].size() == results[0].size());
    REQUIRE(std::memcmp(results[r].data(), results[0].data(), results[0].size() * sizeof(float)) == 0);
  }
}

namespace {

Request sumOf(const std::string& name, std::vector<float>& buf, int32_t set = 0) {
  Request q;
  q.name = name;
  q.op = ReduceOp::kSum;
  q.rows = static_cast<int64_t>(buf.size());
  q.input = q.output = buf.data();
  q.process_set = set;
  return q;
}

}  // namespace

TEST_CASE("process sets: collectives among a subset, scoped names, add and remove", "[inprocess][process_set]") {
  Cluster cluster(4, [](RuntimeOptions& o) { o.dynamic_process_sets = true; });
  cluster.forEach([&](int r) {
    auto add = cluster[r].addProcessSet({3, 1});  // unsorted on purpose
    add->wait();
    const int32_t odd = static_cast<int32_t>(add->result_int);
    REQUIRE(odd == 1);
    REQUIRE(cluster[r].processSetRanks(odd) == std::vector<int>{1, 3});
    REQUIRE(cluster[r].processSetIds() == std::vector<int32_t>{0, 1});
    const bool member = r == 1 || r == 3;
    std::vector<float> v(5, static_cast<float>(r));
    if (member) {
      // The same name on the global set at the same time: names are scoped per set.
      std::vector<float> g(5, 1.0f);
      auto global = cluster[r].enqueue(sumOf("x", g));
      auto sub = cluster[r].enqueue(sumOf("x", v, odd));
      sub->wait();
      global->wait();
      for (float x : v) REQUIRE(x == 4.0f);  // 1 + 3
      for (float x : g) REQUIRE(x == 4.0f);  // four ranks
      // Average divides by the set's size; broadcast's root is a global rank; allgather by set rank.
      std::vector<float> a(3, static_cast<float>(r));
      Request avg = sumOf("avg", a, odd);
      avg.op = ReduceOp::kAverage;
      cluster[r].enqueue(avg)->wait();
      for (float x : a) REQUIRE(x == 2.0f);
      std::vector<int32_t> b(2, r);
      Request bc;
      bc.type = OpType::kBroadcast;
      bc.name = "b";
      bc.dtype = DataType::kInt32;
      bc.rows = 2;
      bc.root = 3;
      bc.input = bc.output = b.data();
      bc.process_set = odd;
      cluster[r].enqueue(bc)->wait();
      REQUIRE(b == std::vector<int32_t>{3, 3});
      std::vector<int32_t> mine(static_cast<size_t>(r), r);  // rank 1: one row, rank 3: three
      Request ag = request(OpType::kAllgather, "ag", DataType::kInt32, r, 1, mine.data());
      ag.process_set = odd;
      auto w = cluster[r].enqueue(ag);
      w->wait();
      REQUIRE(w->result_rows == 4);
      std::vector<int32_t> got(4);
      std::memcpy(got.data(), w->result.data(), 16);
      REQUIRE(got == std::vector<int32_t>{1, 3, 3, 3});
      // A root outside the set is refused at once.
      bc.root = 0;
      REQUIRE_THROWS_WITH(cluster[r].enqueue(bc), Catch::Contains("is not a member of process set 1"));
    } else {
      REQUIRE_THROWS_WITH(cluster[r].enqueue(sumOf("x", v, odd)),
                          Catch::Contains("rank " + std::to_string(r) + " is not a member of the provided process set 1"));
      std::vector<float> g(5, 1.0f);
      cluster[r].enqueue(sumOf("x", g))->wait();
      for (float x : g) REQUIRE(x == 4.0f);
    }
    // A duplicate fails on every rank; the job goes on.
    auto dup = cluster[r].addProcessSet({1, 3});
    REQUIRE_THROWS_WITH(dup->wait(), Catch::Contains("Attempted to add a duplicate process set"));
    REQUIRE_THROWS_AS(cluster[r].addProcessSet({0, 1, 2, 3})->wait(), hvd::UsageError);  // the global set
    REQUIRE_THROWS_WITH(cluster[r].addProcessSet({0, 4}), Catch::Contains("rank 4 is out of range"));
    REQUIRE_THROWS_WITH(cluster[r].addProcessSet({2, 2}), Catch::Contains("rank 2 appears twice"));
    REQUIRE_THROWS_WITH(cluster[r].removeProcessSet(0), Catch::Contains("global process set"));
    // Different sets on different ranks: a mismatch on every rank.
    auto odd_one = cluster[r].addProcessSet(r == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 2});
    REQUIRE_THROWS_WITH(odd_one->wait(), Catch::Contains("Mismatched process set registrations"));
    // Remove, then the id is unknown; a new set gets a fresh id.
    auto rm = cluster[r].removeProcessSet(odd);
    rm->wait();
    REQUIRE_FALSE(cluster[r].processSetRanks(odd));
    REQUIRE_THROWS_WITH(cluster[r].enqueue(sumOf("y", v, odd)), Catch::Contains("process set 1 is not registered"));
    auto again = cluster[r].addProcessSet({0, 1, 2});
    again->wait();
    REQUIRE(again->result_int == 2);
    if (r < 3) {
      std::vector<float> t(2, 1.0f);
      cluster[r].enqueue(sumOf("t", t, 2))->wait();
      for (float x : t) REQUIRE(x == 3.0f);
    }
  });
}

TEST_CASE("process sets need HOROVOD_DYNAMIC_PROCESS_SETS unless static", "[inprocess][process_set]") {
  Cluster cluster(2);
  cluster.forEach([&](int r) {
    REQUIRE_THROWS_WITH(cluster[r].addProcessSet({0}), Catch::Contains("HOROVOD_DYNAMIC_PROCESS_SETS=1"));
    auto s = cluster[r].addProcessSet({r == 0 ? 0 : 0}, /*is_static=*/true);
    s->wait();
    REQUIRE(s->result_int == 1);
    REQUIRE_THROWS_WITH(cluster[r].removeProcessSet(1), Catch::Contains("HOROVOD_DYNAMIC_PROCESS_SETS=1"));
    if (r == 0) {
      std::vector<float> v(3, 5.0f);
      cluster[r].enqueue(sumOf("solo", v, 1))->wait();  // a set of one rank
      for (float x : v) REQUIRE(x == 5.0f);
    }
  });
}

TEST_CASE("groups: members negotiated as a unit, fused, all-or-nothing", "[inprocess][group]") {
  Cluster cluster(3);
  cluster.forEach([&](int r) {
    std::vector<std::vector<float>> bufs(4, std::vector<float>(7, 1.0f));
    std::vector<Request> group;
    for (int i = 0; i < 4; ++i) group.push_back(sumOf("g" + std::to_string(i), bufs[i]));
    // Rank 1 submits the members in reverse: the group is still released together.
    if (r == 1) std::reverse(group.begin(), group.end());
    auto works = cluster[r].enqueueGroup(group);
    REQUIRE(works.size() == 4);
    for (auto& w : works) w->wait();
    for (const auto& b : bufs) {
      for (float x : b) REQUIRE(x == 3.0f);
    }
    // Mixed operations, or a name already in flight: nothing is queued.
    std::vector<float> a(2, 1.0f), b(2, 1.0f);
    std::vector<Request> mixed = {sumOf("m0", a), sumOf("m1", b)};
    mixed[1].type = OpType::kBroadcast;
    REQUIRE_THROWS_WITH(cluster[r].enqueueGroup(mixed), Catch::Contains("a group's operations must all be allreduce"));
    std::vector<Request> twice = {sumOf("same", a), sumOf("same", b)};
    REQUIRE_THROWS_WITH(cluster[r].enqueueGroup(twice), Catch::Contains("same name"));
    auto after = cluster[r].enqueue(sumOf("m0", a));  // m0 was not queued by the failed group
    after->wait();
    for (float x : a) REQUIRE(x == 3.0f);
  });
}

namespace {

// The send buffer (SO_SNDBUF) of every connected TCP socket of this process, by fd.
std::map<int, int> tcpSendBuffers() {
  std::map<int, int> out;
  for (int fd = 0; fd < 4096; ++fd) {
    int type = 0;
    socklen_t len = sizeof type;
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    sockaddr_storage peer;
    socklen_t plen = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;  // listening
    if (peer.ss_family != AF_INET && peer.ss_family != AF_INET6) continue;
    int bytes = 0;
    len = sizeof bytes;
    ::getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, &len);
    out[fd] = bytes;
  }
  return out;
}

}  // namespace

// Gloo's tcp::Pair fixes a socket's SO_SNDBUF at the size of the first legacy-buffer message it sends
// on it. A first message of a few bytes pins the kernel's minimum (4.5 KiB) and every later large
// transfer on that pair crawls (a 16 MiB allreduce took 320 ms instead of 14). Small allreduces of
// every kind must leave every socket's send buffer at least at the kernel's default.
TEST_CASE("small allreduces never pin a socket's send buffer below the kernel default", "[inprocess]") {
  if (const char* shm = std::getenv("HVD_SHARED_MEMORY"); !shm || std::strcmp(shm, "0") != 0) {
    SUCCEED("the shared-memory path has no Gloo pairs within a host; test_runtime_inprocess_tcp runs this");
    return;
  }
  const int n = GENERATE(2, 3);
  Cluster cluster(n);
  cluster.forEach([&](int r) {
    int k = 0;
    for (DataType t : {DataType::kFloat64, DataType::kInt32, DataType::kFloat32, DataType::kInt64}) {
      for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kSum}) {
        std::vector<char> one(elementSize(t));
        store(t, one.data(), 0, r + 1);
        Request q;
        q.name = "small" + std::to_string(k++);
        q.dtype = t;
        q.op = op;
        q.rows = 1;
        q.input = q.output = one.data();
        cluster[r].enqueue(q)->wait();
        REQUIRE(load(t, one.data(), 0) == (op == ReduceOp::kSum ? n * (n + 1) / 2 : n));
      }
    }
  });
  std::ifstream wmem("/proc/sys/net/ipv4/tcp_wmem");
  int minimum = 0, initial = 0;
  REQUIRE(wmem >> minimum >> initial);
  const auto buffers = tcpSendBuffers();
  REQUIRE(!buffers.empty());
  for (const auto& [fd, bytes] : buffers) {
    INFO("fd " << fd << " SO_SNDBUF " << bytes << ", kernel default " << initial);
    CHECK(bytes >= initial);
  }
}

TEST_CASE("result buffers: released blocks are reused, within the pool's limits", "[inprocess]") {
  auto pool = std::make_shared<BufferPool>(size_t{64} << 20);
  const std::byte* first = nullptr;
  {
    ResultBuffer a;
    a.allocate(pool, size_t{32} << 20);
    first = a.data();
  }
  REQUIRE(pool->freeBytes() == size_t{32} << 20);
  ResultBuffer b;
  b.allocate(pool, (size_t{32} << 20) - 100);  // fits the released block without wasting half of it
  CHECK(b.data() == first);
  CHECK(b.size() == (size_t{32} << 20) - 100);
  CHECK(pool->freeBytes() == 0);
  ResultBuffer c;
  c.allocate(pool, 1024);  // nothing free: a new block
  CHECK(c.data() != first);
  b.reset();
  ResultBuffer d;
  d.allocate(pool, 1024);  // the 32 MiB block is far too large for 1 KiB: not handed out
  CHECK(d.data() != first);
  {
    ResultBuffer huge;
    huge.allocate(pool, size_t{65} << 20);
  }
  CHECK(pool->freeBytes() == size_t{32} << 20);  // a block above the pool's limit is freed, not kept

  // Eviction: only blocks no larger than the one given back make room, and only when that suffices.
  auto block = [](size_t bytes) { return BufferPool::Block{std::make_unique<std::byte[]>(bytes), bytes}; };
  BufferPool small(10000);
  for (size_t bytes : {1000, 3000, 5000}) small.give(block(bytes));
  REQUIRE(small.freeBytes() == 9000);
  small.give(block(2500));  // would need the 1000 and the 3000 block: kept as they are, 2500 freed
  CHECK(small.freeBytes() == 9000);
  small.give(block(3500));  // freeing the 1000 and 3000 blocks makes room
  CHECK(small.freeBytes() == 8500);
  BufferPool many(size_t{1} << 20);
  for (size_t i = 0; i < BufferPool::kMaxBlocks; ++i) many.give(block(1024));
  REQUIRE(many.freeBytes() == BufferPool::kMaxBlocks * 1024);
  many.give(block(512));  // at the block limit, smaller than everything held: freed
  CHECK(many.freeBytes() == BufferPool::kMaxBlocks * 1024);
  many.give(block(4096));  // takes the place of one 1 KiB block
  CHECK(many.freeBytes() == (BufferPool::kMaxBlocks - 1) * 1024 + 4096);

  // Through the runtime: a gathered result released before the next one of the same size lends it its memory.
  Cluster cluster(2);
  std::vector<const std::byte*> seen(2);
  cluster.forEach([&](int r) {
    std::vector<float> in(1 << 20, static_cast<float>(r));
    for (int step = 0; step < 2; ++step) {
      auto w = cluster[r].enqueue(request(OpType::kAllgather, "gather", DataType::kFloat32,
                                          static_cast<int64_t>(in.size()), 1, in.data()));
      w->wait();
      REQUIRE(w->result.size() == 2 * in.size() * sizeof(float));
      const auto* got = reinterpret_cast<const float*>(w->result.data());
      REQUIRE(got[0] == 0.0f);
      REQUIRE(got[in.size()] == 1.0f);
      if (step == 0) seen[r] = w->result.data();
      else CHECK(w->result.data() == seen[r]);
    }
  });
}
