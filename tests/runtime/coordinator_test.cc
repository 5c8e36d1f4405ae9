// The coordinator's bookkeeping, driven directly: the steady state's response cache hits against the general
// path they stand for. A name every member submits unchanged is answered from its cache entry; these tests
// check that the answers, the errors, the waits and the stall handling are the ones the requests would get.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "base/error.h"
#include "runtime/coordinator.h"

using namespace hvd::runtime;
using namespace std::chrono_literals;
using Clock = Coordinator::Clock;

namespace {

Request allreduce(const std::string& name, int64_t elements, DataType dtype = DataType::kFloat32) {
  Request q;
  q.type = OpType::kAllreduce;
  q.name = name;
  q.dtype = dtype;
  q.rows = elements;
  return q;
}

Request broadcast(const std::string& name, int64_t elements, int root) {
  Request q = allreduce(name, elements);
  q.type = OpType::kBroadcast;
  q.root = root;
  return q;
}

Request allgather(const std::string& name, int64_t rows) {
  Request q = allreduce(name, rows);
  q.type = OpType::kAllgather;
  q.row_elements = 4;
  return q;
}

Request alltoall(const std::string& name, std::vector<int64_t> splits) {
  Request q = allreduce(name, 0);
  q.type = OpType::kAlltoall;
  for (int64_t s : splits) q.rows += s;
  q.splits = std::move(splits);
  return q;
}

CoordinatorOptions options(int size) {
  CoordinatorOptions o;
  o.size = size;
  o.fusion_threshold = 64 << 20;
  return o;
}

// The cache id of every name in a list, by name.
std::map<std::string, uint32_t> cacheIds(const ResponseList& list) {
  std::map<std::string, uint32_t> ids;
  for (const auto& s : list.responses) {
    for (size_t i = 0; i < s.names.size(); ++i) ids[s.names[i]] = s.cache_ids.at(i);
  }
  return ids;
}

}  // namespace

TEST_CASE("names that every member submits unchanged are answered as their requests were", "[coordinator]") {
  Coordinator c(options(2));
  const auto now = Clock::now();
  // Rank 0's and rank 1's parts: allgather and alltoall differ by rank.
  const std::vector<std::vector<Request>> step = {
      {allreduce("grad.a", 1024), allreduce("grad.b", 10), broadcast("state", 7, 1), allgather("rows", 2),
       alltoall("route", {1, 3}), allreduce("loss", 1, DataType::kFloat64)},
      {allreduce("grad.a", 1024), allreduce("grad.b", 10), broadcast("state", 7, 1), allgather("rows", 5),
       alltoall("route", {2, 0}), allreduce("loss", 1, DataType::kFloat64)}};
  for (int r = 0; r < 2; ++r) {
    for (const auto& q : step[r]) c.add(r, q, now);
  }
  const ResponseList first = c.next();
  const auto ids = cacheIds(first);
  REQUIRE(ids.size() == 6);
  for (const auto& [name, id] : ids) REQUIRE(id > 0);
  REQUIRE(c.idle());
  REQUIRE(c.answeredByHits() == 0);

  // Rank 1 sends cache ids (a worker's hits), rank 0 its requests again; then both as ids; then rank 1 its
  // requests and rank 0 ids, the other way round.
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    for (int r = 0; r < 2; ++r) {
      const bool ids_from_this_rank = round == 1 || (round == 0) == (r == 1);
      for (const auto& q : step[r]) {
        if (ids_from_this_rank) {
          c.addCached(r, ids.at(q.name), now);
        } else {
          c.add(r, q, now);
        }
      }
    }
    const ResponseList list = c.next();
    REQUIRE(encode(list) == encode(first));
    REQUIRE(c.idle());
    REQUIRE(c.answeredByHits() == 6u * (round + 1));
  }
}

TEST_CASE("a name submitted changed among hits is validated with the requests the hits stand for",
          "[coordinator]") {
  Coordinator c(options(2));
  const auto now = Clock::now();
  c.add(0, allreduce("grad", 16), now);
  c.add(1, allreduce("grad", 16), now);
  c.add(0, allgather("rows", 2), now);
  c.add(1, allgather("rows", 3), now);
  const auto ids = cacheIds(c.next());

  SECTION("the hit first") {
    c.addCached(0, ids.at("grad"), now);
    c.add(1, allreduce("grad", 16, DataType::kFloat64), now);
  }
  SECTION("the changed request first") {
    c.add(1, allreduce("grad", 16, DataType::kFloat64), now);
    c.addCached(0, ids.at("grad"), now);
  }
  ResponseList list = c.next();
  REQUIRE(list.responses.size() == 1);
  REQUIRE(list.responses[0].kind == Response::Kind::kError);
  REQUIRE_THAT(list.responses[0].error, Catch::Contains("'grad'") &&
                                            Catch::Contains("float32 on ranks [0]") &&
                                            Catch::Contains("float64 on ranks [1]"));
  REQUIRE(c.idle());

  // The name is answered from its cache again once every member submits it as it was.
  c.addCached(1, ids.at("grad"), now);
  c.addCached(0, ids.at("grad"), now);
  list = c.next();
  REQUIRE(list.responses.size() == 1);
  REQUIRE(list.responses[0].kind == Response::Kind::kExecute);
  REQUIRE(list.responses[0].counts == std::vector<int64_t>{16});
  REQUIRE(c.answeredByHits() == 1);

  // A rank's new allgather rows among the other's hit: the response and the cached copy follow them.
  c.addCached(0, ids.at("rows"), now);
  c.add(1, allgather("rows", 9), now);
  list = c.next();
  REQUIRE(list.responses.size() == 1);
  REQUIRE(list.responses[0].counts == std::vector<int64_t>{2, 9});
  REQUIRE(list.responses[0].cache_ids == std::vector<uint32_t>{ids.at("rows")});
  c.addCached(0, ids.at("rows"), now);
  c.addCached(1, ids.at("rows"), now);
  list = c.next();
  REQUIRE(list.responses.size() == 1);
  REQUIRE(list.responses[0].counts == std::vector<int64_t>{2, 9});
  REQUIRE(c.answeredByHits() == 2);

  REQUIRE_THROWS_AS(c.addCached(0, 999, now), hvd::BackendError);
  REQUIRE_THROWS_WITH(c.addCached(0, 999, now), Catch::Contains("unknown response cache id 999"));
}

TEST_CASE("hits short of a member hold the fusion window, are listed as waits, and stall like requests",
          "[coordinator]") {
  CoordinatorOptions o = options(2);
  o.stall_warning_time = 1s;
  o.stall_shutdown_time = 2s;
  Coordinator c(o);
  const auto t0 = Clock::now();
  for (int r = 0; r < 2; ++r) {
    c.add(r, allreduce("a", 4), t0);
    c.add(r, allreduce("b", 4), t0);
  }
  const auto ids = cacheIds(c.next());

  c.addCached(0, ids.at("a"), t0);
  c.addCached(1, ids.at("a"), t0);
  c.addCached(0, ids.at("b"), t0);
  REQUIRE_FALSE(c.idle());
  // "a" is ready and waits for "b", which rank 1 has not sent yet.
  REQUIRE(c.holdUntil(t0, 5ms) == t0 + 5ms);
  REQUIRE(c.nextStallCheck() == t0 + Coordinator::kHitsAge);
  REQUIRE(c.waits(t0 + 300ms, 250ms, 10).size() == 1);
  const hvd::CollectiveWait w = c.waits(t0 + 300ms, 250ms, 10)[0];
  REQUIRE(w.name == "b");
  REQUIRE(w.op == "allreduce");
  REQUIRE(w.submitted == std::vector<int>{0});
  REQUIRE(w.missing == std::vector<int>{1});
  REQUIRE(c.waits(t0 + 200ms, 250ms, 10).empty());

  ResponseList list = c.next();
  REQUIRE(list.responses.size() == 1);
  REQUIRE(list.responses[0].names == std::vector<std::string>{"a"});

  REQUIRE(c.checkStalls(t0 + 500ms).empty());
  const std::string warning = c.checkStalls(t0 + 1500ms);
  REQUIRE_THAT(warning,
               Catch::Contains("'b' (allreduce) submitted by ranks [0] 1 s ago, missing on ranks [1]"));
  REQUIRE(c.checkStalls(t0 + 2500ms).empty());
  list = c.next();
  REQUIRE(list.shutdown);
  REQUIRE(list.responses.size() == 1);
  REQUIRE(list.responses[0].names == std::vector<std::string>{"b"});
  REQUIRE(list.responses[0].error_class == Response::ErrorClass::kStalled);
}

TEST_CASE("a rank that joins releases the others' hits with its zeros", "[coordinator]") {
  Coordinator c(options(2));
  const auto now = Clock::now();
  c.add(0, allreduce("grad", 8), now);
  c.add(1, allreduce("grad", 8), now);
  const auto ids = cacheIds(c.next());
  Request join;
  join.type = OpType::kJoin;

  SECTION("the hit before the join") {
    c.addCached(0, ids.at("grad"), now);
    c.add(1, join, now);
  }
  SECTION("the join before the hit") {
    c.add(1, join, now);
    c.addCached(0, ids.at("grad"), now);
  }
  ResponseList list = c.next();
  REQUIRE(list.responses.size() == 1);
  REQUIRE(list.responses[0].kind == Response::Kind::kExecute);
  REQUIRE(list.responses[0].names == std::vector<std::string>{"grad"});
  REQUIRE(list.responses[0].joined_ranks == std::vector<int32_t>{1});
  c.add(0, join, now);
  list = c.next();
  REQUIRE(list.responses.size() == 1);
  REQUIRE(list.responses[0].type == OpType::kJoin);
  REQUIRE(list.responses[0].last_joined_rank == 0);
  REQUIRE(c.answeredByHits() == 0);

  // After the join, hits are answered from the cache again.
  c.addCached(0, ids.at("grad"), now);
  c.addCached(1, ids.at("grad"), now);
  list = c.next();
  REQUIRE(list.responses.size() == 1);
  REQUIRE(list.responses[0].joined_ranks.empty());
  REQUIRE(c.answeredByHits() == 1);
}

TEST_CASE("a group's member that every rank hit waits for the rest of its group", "[coordinator]") {
  Coordinator c(options(2));
  const auto now = Clock::now();
  auto member = [](const std::string& name) {
    Request q = allreduce(name, 4);
    q.group = "g.0";
    q.group_size = 2;
    return q;
  };
  for (int r = 0; r < 2; ++r) {
    c.add(r, member("g.0"), now);
    c.add(r, member("g.1"), now);
  }
  const auto ids = cacheIds(c.next());
  REQUIRE(ids.size() == 2);
  c.addCached(0, ids.at("g.0"), now);
  c.addCached(1, ids.at("g.0"), now);
  REQUIRE(c.next().responses.empty());
  c.add(0, member("g.1"), now);
  c.addCached(1, ids.at("g.1"), now);
  const ResponseList list = c.next();
  REQUIRE(list.responses.size() == 1);
  REQUIRE(list.responses[0].names == std::vector<std::string>{"g.0", "g.1"});
  REQUIRE(c.idle());
}

TEST_CASE(
    "many names partly hit complete in the order their last member hit them, aged ones on the general path",
    "[coordinator]") {
  Coordinator c(options(3));
  const auto t0 = Clock::now();
  constexpr int kNames = 50;
  auto name = [](int k) { return "grad." + std::to_string(k); };
  for (int r = 0; r < 3; ++r) {
    for (int k = 0; k < kNames; ++k) c.add(r, allreduce(name(k), 4), t0);
  }
  const auto ids = cacheIds(c.next());
  REQUIRE(ids.size() == kNames);

  // Rank 0 hits the first half at t0 and the second half later; only the first half is old enough to go to
  // the general path at the stall check in between.
  for (int k = 0; k < kNames; ++k) c.addCached(0, ids.at(name(k)), k < kNames / 2 ? t0 : t0 + 120ms);
  for (int k = kNames - 1; k >= 0; --k) c.addCached(1, ids.at(name(k)), t0 + 125ms);
  REQUIRE(c.checkStalls(t0 + 130ms).empty());
  REQUIRE(c.waits(t0 + 130ms, 0ms, 2 * kNames).size() == kNames);
  // Rank 2 in an order of its own: every name completes with its last hit, in that order.
  std::vector<int> order;
  for (int k = 0; k < kNames; ++k) order.push_back((k * 7) % kNames);
  std::set<std::string> waiting;
  for (int k = 0; k < kNames; ++k) waiting.insert(name(k));
  for (int k : order) {
    c.addCached(2, ids.at(name(k)), t0 + 140ms);
    waiting.erase(name(k));
    // The names still waiting, on either path, are the ones listed.
    std::set<std::string> listed;
    for (const auto& w : c.waits(t0 + 140ms, 0ms, 2 * kNames)) listed.insert(w.name);
    REQUIRE(listed == waiting);
  }
  REQUIRE(c.idle() == false);
  const ResponseList list = c.next();
  REQUIRE(list.responses.size() == 1);
  std::vector<std::string> want;
  for (int k : order) want.push_back(name(k));
  REQUIRE(list.responses[0].names == want);
  REQUIRE(c.answeredByHits() == kNames / 2);
  REQUIRE(c.idle());
}

namespace {

// A rank of the random jobs below: what it has in flight (name -> the descriptor it submitted), the cache ids
// it learnt from responses (name -> (id, its descriptor then)), as a worker's runtime keeps them.
struct RandomRank {
  std::map<std::string, Request> in_flight;
  std::map<std::string, std::pair<uint32_t, Request>> known;
  std::vector<Request> descriptors;  // by name index: what it submits next
  bool joined = false;
};

std::vector<std::string> sortedWaits(const Coordinator& c, Clock::time_point now) {
  std::vector<std::string> out;
  for (const auto& w : c.waits(now, 0ms, 1000)) {
    std::ostringstream s;
    s << w.name << " " << w.op << " " << w.process_set << " " << formatRanks(w.submitted) << " "
      << formatRanks(w.missing) << " " << w.seconds;
    out.push_back(s.str());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("random jobs get the same answers, waits and warnings with hits counted as on the general path",
          "[coordinator]") {
  constexpr int kSeeds = 300;
  constexpr int kSteps = 300;
  uint64_t hits_answered = 0, errors = 0, joins = 0, warnings = 0;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    INFO("seed " << seed);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    const int n = 2 + seed % 3;
    CoordinatorOptions o = options(n);
    // Some jobs warn sooner than hits go to the general path on their own.
    o.stall_warning_time = seed % 5 == 0 ? std::chrono::milliseconds(50) : std::chrono::milliseconds(1000);
    o.fusion_threshold = seed % 4 == 0 ? 0 : 512;
    CoordinatorOptions general = o;
    general.count_hits = false;
    Coordinator a(o), b(general);
    // Ranks 0 and 1 also form process set 1, with a name of its own.
    a.addStaticSet(1, {0, 1});
    b.addStaticSet(1, {0, 1});

    // Names: allreduces (float32 or float64; one rank's change is a mismatch), a broadcast (a rank may change
    // its root), an allgather (rows change freely), an alltoall, and an allreduce of process set 1.
    std::vector<Request> base = {allreduce("w0", 4),    allreduce("w1", 16),      allreduce("w2", 64),
                                 allreduce("w3", 8),    broadcast("state", 5, 1), allgather("rows", 2),
                                 alltoall("route", {}), allreduce("pair", 4)};
    base.back().process_set = 1;
    std::vector<RandomRank> ranks(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      ranks[r].descriptors = base;
      ranks[r].descriptors[6] = alltoall("route", std::vector<int64_t>(static_cast<size_t>(n), r + 1));
    }
    auto now = Clock::time_point{} + 1h;
    for (int step = 0; step < kSteps; ++step) {
      INFO("step " << step);
      now += std::chrono::milliseconds(pick(20) == 0 ? pick(400) : pick(3));
      const int action = pick(10);
      const int r = pick(n);
      RandomRank& rank = ranks[r];
      if (action <= 5 && !rank.joined) {  // submit a name this rank has not in flight
        const int k = pick(static_cast<int>(base.size()));
        const Request& q = rank.descriptors[k];
        // Set 1's name: its members only, and not while one of them has joined (the other would wait for it).
        if (rank.in_flight.count(q.name) ||
            (q.process_set == 1 && (r > 1 || ranks[0].joined || ranks[1].joined))) {
          continue;
        }
        rank.in_flight[q.name] = q;
        const auto known = rank.known.find(q.name);
        if (known != rank.known.end() && sameDescriptor(known->second.second, q) && pick(4) != 0) {
          a.addCached(r, known->second.first, now);
          b.addCached(r, known->second.first, now);
        } else {
          a.add(r, q, now);
          b.add(r, q, now);
        }
      } else if (action == 6 && pick(3) == 0) {
        // A descriptor changes: on this rank only (a mismatch, unless it happens to agree), or on every rank
        // alike (which also ends a mismatch).
        const int k = pick(static_cast<int>(base.size()));
        const bool everyone = pick(2) == 0;
        const int root = pick(n);
        const DataType dtype = pick(2) == 0 ? DataType::kFloat32 : DataType::kFloat64;
        for (int each = 0; each < n; ++each) {
          if (each != r && !everyone) continue;
          Request& q = ranks[each].descriptors[k];
          if (q.type == OpType::kAllreduce) {
            q.dtype = dtype;
          } else if (q.type == OpType::kBroadcast) {
            q.root = root;
          } else if (q.type == OpType::kAllgather) {
            q.rows = 1 + pick(5);
          }
        }
      } else if (action == 7 && !rank.joined && rank.in_flight.empty() && pick(4) == 0 &&
                 !ranks[0].in_flight.count("pair") && !ranks[1].in_flight.count("pair")) {
        Request join;
        join.type = OpType::kJoin;
        rank.joined = true;
        a.add(r, join, now);
        b.add(r, join, now);
      } else {  // the coordinator's round, in the background loop's order
        const std::string warning = a.checkStalls(now);
        REQUIRE(warning == b.checkStalls(now));
        warnings += !warning.empty();
        REQUIRE(a.holdUntil(now, 5ms) == b.holdUntil(now, 5ms));
        REQUIRE(sortedWaits(a, now) == sortedWaits(b, now));
        const ResponseList la = a.next();
        const ResponseList lb = b.next();
        REQUIRE(encode(la) == encode(lb));
        for (const auto& s : la.responses) {
          if (s.type == OpType::kJoin && s.kind == Response::Kind::kExecute) {
            ++joins;
            for (auto& each : ranks) each.joined = false;
            continue;
          }
          errors += s.kind == Response::Kind::kError;
          for (size_t i = 0; i < s.names.size(); ++i) {
            for (auto& each : ranks) {
              const auto it = each.in_flight.find(s.names[i]);
              if (it == each.in_flight.end()) continue;
              if (s.kind == Response::Kind::kExecute && i < s.cache_ids.size() && s.cache_ids[i]) {
                each.known[s.names[i]] = {s.cache_ids[i], it->second};
              }
              each.in_flight.erase(it);
            }
          }
        }
        REQUIRE(a.idle() == b.idle());
      }
    }
    hits_answered += a.answeredByHits();
    REQUIRE(b.answeredByHits() == 0);
  }
  // The random jobs went through what the comparison is for.
  INFO("answered by hits " << hits_answered << ", errors " << errors << ", joins " << joins << ", warnings "
                           << warnings);
  REQUIRE(hits_answered > 2000);
  REQUIRE(errors > 100);
  REQUIRE(joins > 10);
  REQUIRE(warnings > 100);
}
