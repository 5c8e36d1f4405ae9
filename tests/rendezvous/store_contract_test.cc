// Store contract suite: every Store implementation must pass the same cases.
#include <catch2/catch.hpp>

#include <thread>

#include "rendezvous/error.h"
#include "rendezvous/memory_store.h"

using namespace hvd::rendezvous;
using namespace std::chrono_literals;

namespace {
Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
}  // namespace

TEST_CASE("MemoryStore: set, get, wait, add, delete", "[store]") {
  auto store = std::make_shared<MemoryStore>();
  store->set("a", bytes(std::string("x\0y", 3)));
  REQUIRE(store->get("a") == bytes(std::string("x\0y", 3)));
  REQUIRE_FALSE(store->tryGet("missing"));
  REQUIRE_THROWS_AS(store->wait({"a", "missing"}, 20ms), hvd::RendezvousTimeout);
  REQUIRE_THROWS_WITH(store->wait({"a", "missing"}, 20ms), Catch::Contains("[missing]"));
  REQUIRE(store->add("n", 2) == 2);
  REQUIRE(store->add("n", -5) == -3);
  store->deleteKey("a");
  REQUIRE_FALSE(store->check({"a"}));

  std::thread late([&] {
    std::this_thread::sleep_for(20ms);
    store->set("late", bytes("v"));
  });
  REQUIRE(store->get("late", 5s) == bytes("v"));
  late.join();

  PrefixStore scoped("global", store);
  scoped.set("rank_0", bytes("host"));
  REQUIRE(store->get("global/rank_0") == bytes("host"));
}
