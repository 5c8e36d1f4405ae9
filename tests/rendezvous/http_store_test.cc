// HttpStore against real servers: retries while the server is not up yet, timeout messages that name
// server, scope, keys and ranks, token errors, and the fallback to polling against a server without
// long poll (one that behaves like Horovod's own).
#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "base/error.h"
#include "rendezvous/handler.h"
#include "rendezvous/http_store.h"
#include "tests/common/throws.h"
#include "tests/rendezvous/test_server.h"

using namespace hvd::rendezvous;
using namespace hvd::rendezvous::testing;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace net = boost::asio;
namespace http = boost::beast::http;

namespace {

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

// A port that was free a moment ago (bound, read back, released).
uint16_t freePort() {
  net::io_context ioc;
  net::ip::tcp::acceptor acceptor(ioc, {net::ip::make_address("127.0.0.1"), 0});
  return acceptor.local_endpoint().port();
}

// A server that answers one request per connection on its own thread, each answer made by `answer` from the
// request and a KvState of its own: the stand-ins below for servers other than ours.
class OneShotServer {
 public:
  using Answer = std::function<Response(const Request&, KvState&)>;
  explicit OneShotServer(Answer answer)
      : answer_(std::move(answer)), acceptor_(ioc_, {net::ip::make_address("127.0.0.1"), 0}), state_(ServerOptions{}) {
    thread_ = std::thread([this] { serve(); });
  }
  ~OneShotServer() {
    stopping_ = true;
    boost::system::error_code ignored;
    net::ip::tcp::socket poke(ioc_);
    poke.connect(acceptor_.local_endpoint(), ignored);  // wakes accept()
    thread_.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }

 private:
  void serve() {
    while (!stopping_) {
      net::ip::tcp::socket socket(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(socket, ec);
      if (ec || stopping_) return;
      boost::beast::flat_buffer buffer;
      Request req;
      http::read(socket, buffer, req, ec);
      if (ec) continue;
      Response res = answer_(req, state_);
      res.keep_alive(false);
      http::write(socket, res, ec);
    }
  }

  Answer answer_;
  net::io_context ioc_;
  net::ip::tcp::acceptor acceptor_;
  KvState state_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
};

// Behaves like Horovod's Python server where it matters here: one request per connection, HTTP/1.0
// answers, no long poll — the query string is taken as part of the key.
class HorovodLikeServer {
 public:
  uint16_t port() const { return server_.port(); }
  int requests() const { return requests_; }

 private:
  Response answer(const Request& req, KvState& state) {
    ++requests_;
    if (req.method() == http::verb::post) {  // Horovod's BaseHTTPRequestHandler has no do_POST
      http::response<http::string_body> res{http::status::not_implemented, 10};
      res.body() = "Unsupported method ('POST')";
      res.prepare_payload();
      return res;
    }
    // Horovod splits the path at '/', so "/global/0?wait_ms=5" is key "0?wait_ms=5" of scope "global".
    std::string target(req.target());
    Request plain = req;
    if (auto q = target.find('?'); q != std::string::npos) {
      const auto slash = target.rfind('/', q);
      plain.target(target.substr(0, slash + 1) + percentEncode(target.substr(slash + 1)));
    }
    Outcome outcome = handle(plain, state, false);
    Response res = std::move(*outcome.response);
    res.version(10);
    res.erase(kLongPollHeader);
    return res;
  }

  std::atomic<int> requests_{0};
  OneShotServer server_{[this](const Request& req, KvState& state) { return answer(req, state); }};
};

// Client options for a test server on 127.0.0.1.
StoreOptions clientOf(uint16_t port) {
  StoreOptions client;
  client.host = "127.0.0.1";
  client.port = port;
  return client;
}

// The two values the compatibility tests slice.
void setTwoValues(HttpStore& store) {
  store.set("global/0", bytes("0123"));
  store.set("global/1", bytes("abcdef"));
}

using Strings = std::vector<std::string>;

// A fetch's values as strings, so that one comparison checks how many there are and each of them.
Strings strings(const ValueList& values) {
  Strings out;
  for (size_t i = 0; i < values.size(); ++i) out.emplace_back(values[i]);
  return out;
}

}  // namespace

TEST_CASE("HttpStore retries with backoff until the server is up", "[httpstore]") {
  const uint16_t port = freePort();
  std::unique_ptr<ServerThread> server;
  std::thread later([&] {
    std::this_thread::sleep_for(300ms);
    ServerOptions options;
    options.port = port;
    server = std::make_unique<ServerThread>(options);
  });
  StoreOptions client = clientOf(port);
  client.request_deadline = 20s;
  HttpStore store(client);
  const auto start = Clock::now();
  store.set("global/rank_0", bytes("up"));
  later.join();
  CHECK(Clock::now() - start >= 250ms);
  CHECK(store.get("global/rank_0", 5s) == bytes("up"));
}

TEST_CASE("HttpStore names the server when it never comes up", "[httpstore]") {
  StoreOptions client = clientOf(freePort());
  client.request_deadline = 300ms;
  HttpStore store(client);
  const std::string where = "http://127.0.0.1:" + std::to_string(client.port);
  CHECK_THROWS_AS(store.set("global/0", bytes("x")), hvd::StoreError);
  CHECK_THROWS_WITH(store.tryGet("global/0"), Catch::Contains(where) && Catch::Contains("refused") &&
                                                  Catch::Contains("attempt"));
  // wait() keeps retrying the connection until its own deadline, then reports the missing keys.
  CHECK_THROWS_WITH(store.wait({"global/0"}, 300ms), Catch::Contains(where));
}

TEST_CASE("HttpStore timeout names server, scope, keys and ranks", "[httpstore]") {
  ServerThread server;
  HttpStore store(server.storeOptions());
  store.set("global/1", bytes("x"));
  const std::string what = hvd::test::thrownWhat<hvd::RendezvousTimeout>("wait did not time out", [&] {
    store.wait({"global/1", "global/3", "global/rank_5", "global/extra", "local_h/2"}, 300ms);
  });
  CHECK_THAT(what, Catch::Contains("http://127.0.0.1:" + std::to_string(server.port())));
  CHECK_THAT(what, Catch::Contains("[global/3, global/rank_5, global/extra, local_h/2]"));
  CHECK_THAT(what, Catch::Contains("scope 'global' is missing the keys of rank(s) [3, 5] and keys [extra]"));
  CHECK_THAT(what, Catch::Contains("scope 'local_h' is missing the keys of rank(s) [2]"));
  CHECK_THAT(what, !Catch::Contains("global/1,"));
}

TEST_CASE("HttpStore reports a rejected token", "[httpstore]") {
  ServerOptions options;
  options.token = "right";
  ServerThread server(options);
  StoreOptions client = server.storeOptions();
  HttpStore none(client);
  CHECK_THROWS_WITH(none.set("s/k", bytes("v")), Catch::Contains("401") && Catch::Contains("HVD_RENDEZVOUS_TOKEN"));
  client.token = "wrong";
  HttpStore wrong(client);
  CHECK_THROWS_WITH(wrong.tryGet("s/k"), Catch::Contains("403") && Catch::Contains("s/k"));
  client.token = "right";
  HttpStore right(client);
  right.set("s/k", bytes("v"));
  CHECK(right.get("s/k", 1s) == bytes("v"));
}

TEST_CASE("HttpStore rejects keys without a scope", "[httpstore]") {
  ServerThread server;
  HttpStore store(server.storeOptions());
  CHECK_THROWS_WITH(store.set("noscope", bytes("v")), Catch::Contains("'noscope'") && Catch::Contains("<scope>/<key>"));
}

TEST_CASE("HttpStore falls back to polling against a server without long poll", "[httpstore][compat]") {
  HorovodLikeServer server;
  const StoreOptions client = clientOf(server.port());
  HttpStore store(client);
  store.set("global/0", bytes("addr0"));
  CHECK(store.get("global/0", 5s) == bytes("addr0"));
  std::thread late([&] {
    std::this_thread::sleep_for(200ms);
    HttpStore other(client);
    other.set("global/1", bytes("addr1"));
  });
  store.wait({"global/1"}, 10s);
  late.join();
  CHECK(store.get("global/1", 1s) == bytes("addr1"));
  CHECK_THROWS_AS(store.wait({"global/2"}, 200ms), hvd::RendezvousTimeout);
  CHECK(server.requests() < 100);  // polling backs off (Horovod's client polls every 10 ms)
}

TEST_CASE("HttpStore::waitAndGet fetches every value, in the order asked, in one request", "[httpstore][values]") {
  ServerThread server;
  auto store = std::make_shared<HttpStore>(server.storeOptions());
  PrefixStore scoped("global", store);
  scoped.set("0", bytes("zero"));
  scoped.set("1", Bytes{'a', '\0', 'b'});
  std::thread late([&] {
    std::this_thread::sleep_for(200ms);
    HttpStore other(server.storeOptions());
    other.set("global/2", Bytes(300, 'z'));
  });
  const auto start = Clock::now();
  const ValueList values = scoped.waitAndGet({"2", "0", "1"}, 10s);
  late.join();
  CHECK(Clock::now() - start >= 150ms);
  REQUIRE(values.size() == 3);
  CHECK(values.bytes(0) == Bytes(300, 'z'));
  CHECK(values[1] == "zero");
  CHECK(values.bytes(2) == (Bytes{'a', '\0', 'b'}));
  const std::string what = hvd::test::thrownWhat<hvd::RendezvousTimeout>("waitAndGet did not time out", [&] {
    scoped.waitAndGet({"0", "7", "rank_9"}, 300ms);
  });
  CHECK_THAT(what, Catch::Contains("[global/7, global/rank_9]"));
  CHECK_THAT(what, Catch::Contains("scope 'global' is missing the keys of rank(s) [7, 9]"));
  CHECK_THAT(what, Catch::Contains("timed out after 300 ms"));
}

TEST_CASE("HttpStore::waitAndGet falls back to one GET per key against Horovod's server", "[httpstore][compat][values]") {
  HorovodLikeServer server;
  const StoreOptions client = clientOf(server.port());
  HttpStore store(client);
  store.set("global/0", bytes("addr0"));
  std::thread late([&] {
    std::this_thread::sleep_for(200ms);
    HttpStore other(client);
    other.set("global/1", bytes("addr1"));
  });
  const ValueList values = store.waitAndGet({"global/1", "global/0"}, 10s);
  late.join();
  REQUIRE(values.size() == 2);
  CHECK(values.bytes(0) == bytes("addr1"));
  CHECK(values.bytes(1) == bytes("addr0"));
  // Once the server is known not to have the extension, the next fetch goes key by key at once.
  const int before = server.requests();
  CHECK(store.waitAndGet({"global/0"}, 5s).bytes(0) == bytes("addr0"));
  CHECK(server.requests() - before == 2);  // one GET to wait for the key, one to read it
  CHECK_THROWS_AS(store.waitAndGet({"global/0", "global/2"}, 200ms), hvd::RendezvousTimeout);
  CHECK(server.requests() < 100);
}

// Our handler's answer without waiting (wait_ms is not honoured: the client asks again until its
// deadline), a shared body copied in.
Response answerNow(const Request& req, KvState& state) {
  Outcome outcome = handle(req, state, false);
  Response res(*outcome.response);
  if (outcome.shared_body) {
    res.body() = *outcome.shared_body;
    res.prepare_payload();
  }
  return res;
}

// Our server's answer to a query parameter it does not know (`parameter`: "name=value").
Response unknownParameter(const Request& req, const std::string& parameter) {
  Response res{http::status::bad_request, req.version()};
  res.body() = "unknown query parameter '" + parameter + "' for POST /<scope>\n";
  res.prepare_payload();
  return res;
}

// Our server as it was before sliced fetches: a request with &range= is refused as an unknown parameter.
class NoRangeServer {
 public:
  uint16_t port() const { return server_.port(); }
  int ranged() const { return ranged_; }
  int fetches() const { return fetches_; }

 private:
  Response answer(const Request& req, KvState& state) {
    const std::string target(req.target());
    const auto at = target.find("&range=");
    if (at != std::string::npos) {
      ++ranged_;
      return unknownParameter(req, target.substr(at + 1));
    }
    if (target.find("values=1") != std::string::npos) ++fetches_;
    return answerNow(req, state);
  }

  std::atomic<int> ranged_{0};
  std::atomic<int> fetches_{0};
  OneShotServer server_{[this](const Request& req, KvState& state) { return answer(req, state); }};
};

TEST_CASE("HttpStore::waitAndGet with a range fetches only the slices", "[httpstore][values][range]") {
  ServerThread server;
  auto store = std::make_shared<HttpStore>(server.storeOptions());
  PrefixStore scoped("global", store);
  scoped.set("0", bytes("header0:ab"));
  scoped.set("1", bytes("header1:cd"));
  scoped.set("2", bytes("h2"));
  // "h2" clipped to its length; nothing of it at offset 9.
  CHECK(strings(scoped.waitAndGet({"0", "1", "2"}, 10s, ValueRange{0, 7})) ==
        Strings{"header0", "header1", "h2"});
  CHECK(strings(scoped.waitAndGet({"2", "0", "1"}, 10s, ValueRange{9, 1})) == Strings{"", "b", "d"});
}

TEST_CASE("HttpStore::waitAndGet with a range slices whole values against a server without ranges",
          "[httpstore][compat][values][range]") {
  SECTION("our server before the extension: refuses the range, sends whole values") {
    NoRangeServer server;
    HttpStore store(clientOf(server.port()));
    setTwoValues(store);
    CHECK(strings(store.waitAndGet({"global/0", "global/1"}, 10s, ValueRange{2, 3})) == Strings{"23", "cde"});
    CHECK(server.ranged() == 1);
    CHECK(server.fetches() == 1);
    // Known now: the next sliced fetch asks for whole values at once.
    CHECK(strings(store.waitAndGet({"global/1"}, 10s, ValueRange{5, 9})) == Strings{"f"});
    CHECK(server.ranged() == 1);
    CHECK(server.fetches() == 2);
  }
  SECTION("Horovod's server: one GET per key, sliced here") {
    HorovodLikeServer server;
    HttpStore store(clientOf(server.port()));
    setTwoValues(store);
    CHECK(strings(store.waitAndGet({"global/1", "global/0"}, 10s, ValueRange{3, 2})) == Strings{"de", "3"});
    CHECK_THROWS_AS(store.waitAndGet({"global/0", "global/2"}, 200ms, ValueRange{0, 1}), hvd::RendezvousTimeout);
  }
}

// Our server with a log of the multi-key fetches it was sent (target and body), and, to play an older
// version of it, a list of query parameters it refuses as unknown (the first one found, as ours did).
class LoggingServer {
 public:
  explicit LoggingServer(std::vector<std::string> unknown = {}, bool limit_keys = false)
      : unknown_(std::move(unknown)), limit_keys_(limit_keys) {}
  uint16_t port() const { return server_.port(); }
  std::vector<std::pair<std::string, std::string>> fetches() {
    std::lock_guard<std::mutex> lock(mutex_);
    return fetches_;
  }

 private:
  Response answer(const Request& req, KvState& state) {
    const std::string target(req.target());
    if (req.method() == http::verb::post && target.find("values=1") != std::string::npos) {
      std::lock_guard<std::mutex> lock(mutex_);
      fetches_.emplace_back(target, req.body());
    }
    if (limit_keys_ && target.find("&keys=") != std::string::npos) {  // a server with a lower limit
      Response res{http::status::bad_request, req.version()};
      res.body() = "keys=... names more keys than this server's connection limit (2)\n";
      res.prepare_payload();
      return res;
    }
    for (const auto& parameter : unknown_) {
      const auto at = target.find("&" + parameter);
      if (at == std::string::npos) continue;
      const auto end = target.find('&', at + 1);
      return unknownParameter(req, target.substr(at + 1, end == std::string::npos ? end : end - at - 1));
    }
    return answerNow(req, state);
  }

  std::vector<std::string> unknown_;
  bool limit_keys_ = false;
  std::mutex mutex_;
  std::vector<std::pair<std::string, std::string>> fetches_;
  OneShotServer server_{[this](const Request& req, KvState& state) { return answer(req, state); }};
};

TEST_CASE("HttpStore::waitAndGet names rank keys by range and asks for repeats by reference",
          "[httpstore][values][keys][refs]") {
  const std::vector<std::string> keys = {"global/0", "global/1", "global/2", "global/3"};
  // Publishes four ranks' values on `server`, fetches them three ways and checks what came back; returns the
  // multi-key fetches the server logged.
  const auto fetchesOf = [&](LoggingServer& server) {
    HttpStore store(clientOf(server.port()));
    store.set("global/0", bytes("hostA|0"));
    store.set("global/1", bytes("hostA|1"));
    store.set("global/2", bytes("hostB|2"));
    store.set("global/3", bytes("hostA|3"));
    CHECK(strings(store.waitAndGet(keys, 10s, ValueRange{0, 5, true})) ==
          Strings{"hostA", "hostA", "hostB", "hostA"});
    const ValueList column = store.waitAndGet(keys, 10s, ValueRange{6, 1});
    REQUIRE(column.size() == 4);
    CHECK(std::string(column[0]) + std::string(column[1]) + std::string(column[2]) + std::string(column[3]) == "0123");
    // Keys that are not a run of ranks go in the body.
    CHECK(strings(store.waitAndGet({"global/3", "global/1"}, 10s)) == Strings{"hostA|3", "hostA|1"});
    return server.fetches();
  };
  SECTION("this server: keys=0,4 with an empty body, refs=1 for repeats only") {
    LoggingServer server;
    const auto fetches = fetchesOf(server);
    REQUIRE(fetches.size() == 3);
    CHECK_THAT(fetches[0].first, Catch::Contains("&keys=0,4&range=0,5&refs=1"));
    CHECK(fetches[0].second.empty());
    CHECK_THAT(fetches[1].first, Catch::Contains("&keys=0,4&range=6,1"));
    CHECK_THAT(fetches[1].first, !Catch::Contains("refs"));
    CHECK(fetches[1].second.empty());
    CHECK_THAT(fetches[2].first, !Catch::Contains("keys="));
    CHECK(fetches[2].second == "3\n1\n");
  }
  SECTION("a server without keys= nor refs=: the list in the body, values whole, once found out") {
    LoggingServer server({"keys=", "refs="});
    const auto fetches = fetchesOf(server);
    // keys= refused, refs= refused, then the list; later fetches go the old way at once.
    REQUIRE(fetches.size() == 5);
    CHECK_THAT(fetches[0].first, Catch::Contains("&keys=0,4"));
    CHECK_THAT(fetches[1].first, !Catch::Contains("keys="));
    CHECK_THAT(fetches[1].first, Catch::Contains("&refs=1"));
    CHECK(fetches[1].second == "0\n1\n2\n3\n");
    CHECK_THAT(fetches[2].first, !Catch::Contains("refs="));
    CHECK_THAT(fetches[3].first, !Catch::Contains("keys="));
    CHECK(fetches[3].second == "0\n1\n2\n3\n");
  }
  SECTION("a server that refuses keys= for another reason: the plain fetch, once found out") {
    LoggingServer server({}, true);
    const auto fetches = fetchesOf(server);
    REQUIRE(fetches.size() == 4);  // one refused, then the three fetches with the list, refs off
    CHECK_THAT(fetches[0].first, Catch::Contains("&keys=0,4"));
    for (size_t i = 1; i < fetches.size(); ++i) {
      CHECK_THAT(fetches[i].first, !Catch::Contains("keys="));
      CHECK_THAT(fetches[i].first, !Catch::Contains("refs="));
    }
  }
}

TEST_CASE("HttpStore::nextRound waits for the driver's next round and reads the slot's place", "[httpstore][elastic]") {
  ServerThread server;
  HttpStore store(server.storeOptions());
  // Not an elastic job: a clear error, at once.
  CHECK_THROWS_WITH(store.nextRound("h:0", 0, 5s), Catch::Contains("not an elastic job"));

  ElasticRound r3;
  r3.number = 3;
  r3.slots["h:0"] = {0, 2, 0, 1, 0, 2};
  r3.slots["g:0"] = {1, 2, 0, 1, 1, 2};
  server.server().beginRound(r3);
  auto now = store.nextRound("g:0", 2, 5s);
  CHECK(now.round == 3);
  CHECK(now.slot.rank == 1);
  CHECK(now.slot.cross_rank == 1);

  // Leaving round 3: the answer is round 4, once the driver begins it.
  std::thread driver([&] {
    std::this_thread::sleep_for(200ms);
    ElasticRound r4;
    r4.number = 4;
    r4.slots["h:0"] = {0, 1, 0, 1, 0, 1};
    server.server().beginRound(r4);
  });
  const auto start = Clock::now();
  auto next = store.nextRound("h:0", 3, 10s);
  driver.join();
  CHECK(Clock::now() - start >= 150ms);
  CHECK(next.round == 4);
  CHECK(next.slot.rank == 0);
  CHECK(next.slot.size == 1);
  // g:0 is not in round 4: -1 everywhere.
  auto gone = store.nextRound("g:0", 3, 5s);
  CHECK(gone.round == 4);
  CHECK(gone.slot.rank == -1);
  CHECK(gone.slot.cross_size == -1);
  // No round 5 within the time given: a timeout naming slot and round.
  CHECK_THROWS_AS(store.nextRound("h:0", 4, 300ms), hvd::RendezvousTimeout);
  CHECK_THROWS_WITH(store.nextRound("h:0", 4, 300ms), Catch::Contains("no elastic round after round 4 for slot h:0"));
}

TEST_CASE("HttpStore::roundNews tells a worker which rounds began after its own, and what changed",
          "[httpstore][elastic]") {
  ServerThread server;
  HttpStore store(server.storeOptions());
  CHECK_THROWS_WITH(store.roundNews(0), Catch::Contains("not an elastic job"));
  ElasticRound r1;
  r1.number = 1;
  server.server().beginRound(r1);
  auto none = store.roundNews(1);
  CHECK(none.round == 1);
  CHECK(none.changes == 0);
  ElasticRound r2;
  r2.number = 2;
  r2.changes = kRoundRemoved;
  server.server().beginRound(r2);
  auto one = store.roundNews(1);
  CHECK(one.round == 2);
  CHECK(one.changes == kRoundRemoved);
  ElasticRound r3;
  r3.number = 3;
  r3.changes = kRoundAdded;
  server.server().beginRound(r3);
  // Two rounds since round 1: their changes together; since round 2: round 3's only.
  CHECK(store.roundNews(1).changes == (kRoundRemoved | kRoundAdded));
  CHECK(store.roundNews(2).changes == kRoundAdded);
  CHECK(store.roundNews(2).round == 3);
  CHECK(store.roundNews(3).changes == 0);
}

TEST_CASE("RoundStore puts keys in the round's scopes, which the server closes when the round is over",
          "[httpstore][elastic]") {
  ServerThread server;
  auto http = std::make_shared<HttpStore>(server.storeOptions());
  server.server().beginRound(ElasticRound{3, {}, {}, {}});
  RoundStore round3(3, http);
  round3.set("global/0", bytes("addr"));
  CHECK(http->tryGet("r3.global/0") == bytes("addr"));
  CHECK(round3.get("global/0", 1s) == bytes("addr"));
  CHECK(round3.describe() == http->describe() + " (elastic round 3)");
  PrefixStore scoped("local_h", std::make_shared<RoundStore>(3, http));
  scoped.set("1", bytes("x"));
  CHECK(http->tryGet("r3.local_h/1") == bytes("x"));
  CHECK_THROWS_WITH(round3.set("noscope", bytes("x")), Catch::Contains("key 'noscope' has no scope"));
  // Round 4 begins: a late worker of round 3 is refused, naming both rounds.
  server.server().beginRound(ElasticRound{4, {}, {}, {}});
  CHECK_THROWS_WITH(round3.set("global/1", bytes("late")),
                    Catch::Contains("belongs to elastic round 3, which is over (the job is at round 4)"));
  RoundStore round4(4, http);
  round4.set("global/1", bytes("now"));
  CHECK(http->tryGet("r4.global/1") == bytes("now"));
}
