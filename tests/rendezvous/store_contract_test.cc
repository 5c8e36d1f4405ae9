// Store contract suite: every Store implementation must pass the same cases, directly and through a
// PrefixStore. The HTTP variant runs a real server on an ephemeral loopback port, with a token.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "base/error.h"
#include "rendezvous/file_store.h"
#include "rendezvous/http_store.h"
#include "rendezvous/memory_store.h"
#include "tests/common/throws.h"
#include "tests/rendezvous/test_server.h"

using namespace hvd::rendezvous;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

// One store under test, with whatever it needs kept alive (a server, a directory).
struct Fixture {
  std::unique_ptr<testing::ServerThread> server;
  std::string directory;
  std::shared_ptr<Store> store;

  ~Fixture() {
    store.reset();
    if (!directory.empty()) std::filesystem::remove_all(directory);
  }
};

std::unique_ptr<Fixture> makeFixture(const std::string& kind) {
  auto f = std::make_unique<Fixture>();
  std::string base = kind;
  const bool prefixed = base.rfind("prefix:", 0) == 0;
  if (prefixed) base = base.substr(7);
  if (base == "memory") {
    f->store = std::make_shared<MemoryStore>();
  } else if (base == "file") {
    f->directory = (std::filesystem::temp_directory_path() /
                    ("hvd_file_store_test." + std::to_string(::getpid()) + "." + std::to_string(std::rand())))
                       .string();
    f->store = std::make_shared<FileStore>(f->directory);
  } else {
    ServerOptions options;
    options.token = "contract-token";
    f->server = std::make_unique<testing::ServerThread>(options);
    StoreOptions client = f->server->storeOptions();
    client.token = "contract-token";
    f->store = std::make_shared<HttpStore>(client);
  }
  if (prefixed) f->store = std::make_shared<PrefixStore>("job", f->store);
  return f;
}

}  // namespace

TEST_CASE("Store contract", "[store]") {
  const std::string kind = GENERATE(as<std::string>{}, "memory", "file", "http", "prefix:memory", "prefix:file",
                                    "prefix:http");
  auto fixture = makeFixture(kind);
  Store& store = *fixture->store;
  INFO("store: " << kind << " = " << store.describe());

  SECTION("set, get and overwrite binary values") {
    const Bytes nul = bytes(std::string("ab\0cd\0", 6));
    store.set("t/a", nul);
    REQUIRE(store.get("t/a", 5s) == nul);
    REQUIRE(store.tryGet("t/a") == nul);
    Bytes all(256 * 1024);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<char>(i * 7 % 256);
    store.set("t/a", all);
    REQUIRE(store.get("t/a", 5s) == all);
    store.set("t/empty", {});
    REQUIRE(store.tryGet("t/empty") == Bytes{});
    REQUIRE_FALSE(store.tryGet("t/missing").has_value());
  }

  SECTION("keys with awkward characters stay distinct") {
    store.set("t/a.b", bytes("1"));
    store.set("t/a%2Eb", bytes("2"));
    store.set("t/x/y", bytes("3"));
    store.set("t/host name:1", bytes("4"));
    REQUIRE(store.get("t/a.b", 5s) == bytes("1"));
    REQUIRE(store.get("t/a%2Eb", 5s) == bytes("2"));
    REQUIRE(store.get("t/x/y", 5s) == bytes("3"));
    REQUIRE(store.get("t/host name:1", 5s) == bytes("4"));
  }

  SECTION("wait times out naming only the missing keys") {
    store.set("t/present", bytes("v"));
    const auto start = Clock::now();
    REQUIRE_THROWS_AS(store.wait({"t/present", "t/missing_one"}, 200ms), hvd::RendezvousTimeout);
    REQUIRE(Clock::now() - start >= 190ms);
    const std::string what = hvd::test::thrownWhat<hvd::RendezvousTimeout>("wait did not throw", [&] {
      store.wait({"t/present", "t/missing_one", "t/3"}, 100ms);
    });
    CHECK_THAT(what, Catch::Contains("t/missing_one"));
    CHECK_THAT(what, Catch::Contains("t/3"));
    CHECK_THAT(what, !Catch::Contains("present"));
    CHECK_THAT(what,
               Catch::Contains(store.describe()) || Catch::Contains(fixture->server ? "127.0.0.1" : "store"));
  }

  SECTION("wait and get wake up when another thread sets the key") {
    std::thread late([&] {
      std::this_thread::sleep_for(100ms);
      store.set("t/late", bytes("v"));
      std::this_thread::sleep_for(50ms);
      store.set("t/later", bytes("w"));
    });
    const auto start = Clock::now();
    store.wait({"t/late", "t/later"}, 20s);
    REQUIRE(store.get("t/later", 20s) == bytes("w"));
    late.join();
    // Generous bound: a loaded machine must not fail this, but a wait that ignored the wake-up would run
    // its full 20 s.
    REQUIRE(Clock::now() - start < 10s);
  }

  SECTION("add is atomic across threads") {
    constexpr int kThreads = 8;
    constexpr int kAdds = 40;
    std::vector<std::thread> threads;
    std::mutex mutex;
    std::set<int64_t> seen;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kAdds; ++i) {
          const int64_t value = store.add("t/counter", 1);
          std::lock_guard<std::mutex> lock(mutex);
          seen.insert(value);
        }
      });
    }
    for (auto& t : threads) t.join();
    REQUIRE(seen.size() == kThreads * kAdds);
    REQUIRE(*seen.begin() == 1);
    REQUIRE(*seen.rbegin() == kThreads * kAdds);
    REQUIRE(store.add("t/counter", -kThreads * kAdds - 5) == -5);
    REQUIRE(store.get("t/counter", 5s) == bytes("-5"));
    store.set("t/text", bytes("not a number"));
    REQUIRE_THROWS_AS(store.add("t/text", 1), hvd::StoreError);
  }

  SECTION("delete and check") {
    store.set("t/a", bytes("1"));
    store.set("t/b", bytes("2"));
    REQUIRE(store.check({"t/a", "t/b"}));
    store.deleteKey("t/a");
    REQUIRE_FALSE(store.tryGet("t/a").has_value());
    REQUIRE_FALSE(store.check({"t/a", "t/b"}));
    REQUIRE(store.check({"t/b"}));
    store.deleteKey("t/never-set");  // not an error
  }
}

TEST_CASE("PrefixStore scopes keys of the underlying store", "[store]") {
  auto memory = std::make_shared<MemoryStore>();
  PrefixStore scoped("global", memory);
  scoped.set("rank_0", bytes("host"));
  REQUIRE(memory->get("global/rank_0", 1s) == bytes("host"));
  REQUIRE_THAT(scoped.describe(), Catch::Contains("global"));
}

TEST_CASE("FileStore reports an unusable directory", "[store]") {
  REQUIRE_THROWS_WITH(FileStore("/proc/self/no/such/dir"), Catch::Contains("/proc/self/no/such/dir"));
}
