// The rendezvous server over real loopback sockets: Horovod's exact client bytes, malformed and hostile
// input, limits, long poll, keep-alive, stop(), bind failures, many concurrent clients, and requests
// without the token on a server that trusts this user's local processes.
#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "rendezvous/http_store.h"
#include "tests/rendezvous/local_peers.h"
#include "tests/rendezvous/raw_client.h"
#include "tests/rendezvous/test_server.h"

using namespace hvd::rendezvous;
using namespace hvd::rendezvous::testing;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// Exactly what Horovod's C++ worker client (HTTPRequest) sends: HTTP/1.1, Host without port,
// Content-Length always, a new connection per request.
std::string horovodRequest(const std::string& method, const std::string& path, const std::string& body = {}) {
  return method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

std::string roundTrip(uint16_t port, const std::string& bytes) {
  RawClient client(port);
  REQUIRE(client.send(bytes));
  return client.readResponse();
}

// Polls until pred() holds or 10 s pass (for effects that happen on the server's threads).
template <typename Pred>
bool eventually(Pred pred) {
  const auto deadline = Clock::now() + 10s;
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

}  // namespace

TEST_CASE("sockets: Horovod's client bytes get Horovod's answers", "[server][compat]") {
  ServerThread server;
  server.server().setScopeSizes({{"global", 2}});
  const std::string blob = std::string("ab\0cd", 5) + std::string(100 * 1024, '\x7f');

  auto put = roundTrip(server.port(), horovodRequest("PUT", "/global/0", blob));
  CHECK(put.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK_THAT(put, Catch::Contains("\r\nContent-Length: 0\r\n"));
  CHECK(bodyOf(put).empty());

  auto get = roundTrip(server.port(), horovodRequest("GET", "/global/0"));
  CHECK(statusOf(get) == 200);
  CHECK_THAT(get, Catch::Contains("\r\nContent-Length: " + std::to_string(blob.size()) + "\r\n"));
  CHECK(bodyOf(get) == blob);

  auto missing = roundTrip(server.port(), horovodRequest("GET", "/global/1"));
  CHECK(missing.rfind("HTTP/1.1 404 Not Found\r\n", 0) == 0);
  CHECK_THAT(missing, Catch::Contains("\r\nContent-Length: 0\r\n"));

  CHECK(statusOf(roundTrip(server.port(), horovodRequest("PUT", "/global/1", "x"))) == 200);
  CHECK(statusOf(roundTrip(server.port(), horovodRequest("DELETE", "/global/0"))) == 200);
  CHECK(statusOf(roundTrip(server.port(), horovodRequest("GET", "/global/0"))) == 200);  // 1 of 2 finished
  CHECK(statusOf(roundTrip(server.port(), horovodRequest("DELETE", "/global/1"))) == 200);
  CHECK(statusOf(roundTrip(server.port(), horovodRequest("GET", "/global/0"))) == 404);  // scope cleared
  CHECK(statusOf(roundTrip(server.port(), horovodRequest("GET", "/short"))) == 400);
}

TEST_CASE("sockets: HTTP/1.0 closes after the answer; HTTP/1.1 keeps the connection", "[server]") {
  ServerThread server;
  {
    RawClient client(server.port());
    REQUIRE(client.send("PUT /s/k HTTP/1.0\r\nContent-Length: 2\r\n\r\nv1"));
    auto res = client.readResponse();
    CHECK(res.rfind("HTTP/1.0 200 OK\r\n", 0) == 0);
    CHECK(client.closedByPeer());
  }
  {
    RawClient client(server.port());
    REQUIRE(client.send("GET /s/k HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    auto first = client.readResponse();
    CHECK(bodyOf(first) == "v1");
    CHECK_THAT(first, Catch::Contains("Connection: keep-alive"));
    REQUIRE(client.send("GET /s/k HTTP/1.0\r\n\r\n"));
    CHECK(bodyOf(client.readResponse()) == "v1");
    CHECK(client.closedByPeer());
  }
  {
    RawClient client(server.port());
    // Three pipelined requests in one write, answered in order on the same connection.
    REQUIRE(client.send("PUT /s/p HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
                        "GET /s/p HTTP/1.1\r\n\r\n"
                        "GET /s/p HTTP/1.1\r\nConnection: close\r\n\r\n"));
    CHECK(statusOf(client.readResponse()) == 200);
    CHECK(bodyOf(client.readResponse()) == "abc");
    CHECK(bodyOf(client.readResponse()) == "abc");
    CHECK(client.closedByPeer());
  }
}

TEST_CASE("sockets: bad requests get clear answers and the server keeps serving", "[server][limits]") {
  ServerOptions options;
  options.max_value_bytes = 1024;
  options.max_key_bytes = 64;
  ServerThread server(options);
  struct Case {
    std::string bytes;
    int status;
    std::string text;
  };
  const std::vector<Case> cases = {
      {"GARBAGE\r\n\r\n", 400, "malformed HTTP request"},
      {"GET /s/k HTTP/9.9\r\n\r\n", 400, "malformed HTTP request"},
      {"GET  HTTP/1.1\r\n\r\n", 400, "malformed HTTP request"},
      {"GET /s/k HTTP/1.1\r\nBad Header\r\n\r\n", 400, "malformed HTTP request"},
      {"PUT /s/k HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400, "malformed HTTP request"},
      {"\x01\x02\x03\x04\r\n\r\n", 400, "malformed HTTP request"},
      {horovodRequest("GET", "/a/b/c"), 400, "/a/b/c"},
      {horovodRequest("PUT", "/a/b/c", "x"), 400, "/a/b/c"},
      {horovodRequest("GET", "/s/%g0"), 400, "%-escape"},
      {horovodRequest("BREW", "/s/k"), 405, "BREW"},
      {horovodRequest("HEAD", "/s/k"), 405, ""},
      {"PUT /s/k HTTP/1.1\r\nHost: x\r\n\r\n", 411, "Content-Length"},
      {"PUT /s/k HTTP/1.1\r\nContent-Length: 1025\r\n\r\n", 413, "1024 bytes"},
      {horovodRequest("GET", "/s/" + std::string(100, 'k')), 413, "limit"},
      {"GET /s/k HTTP/1.1\r\nX-Long: " + std::string(20000, 'a') + "\r\n\r\n", 431, "exceed"},
  };
  for (const auto& c : cases) {
    INFO("request: " << c.bytes.substr(0, 60));
    auto res = roundTrip(server.port(), c.bytes);
    CHECK(statusOf(res) == c.status);
    CHECK_THAT(res, Catch::Contains("\r\nContent-Length: "));
    CHECK_THAT(bodyOf(res), Catch::Contains(c.text));
    // Still serving after every bad request.
    CHECK(statusOf(roundTrip(server.port(), horovodRequest("PUT", "/ok/k", "v"))) == 200);
  }
  CHECK(bodyOf(roundTrip(server.port(), horovodRequest("GET", "/ok/k"))) == "v");
}

TEST_CASE("sockets: half-sent requests and slow clients are cut off at the read deadline", "[server][limits]") {
  ServerOptions options;
  options.read_timeout = 300ms;
  ServerThread server(options);

  RawClient half(server.port());
  REQUIRE(half.send("PUT /s/k HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"));
  // Slowloris: one byte every 50 ms, for longer than the deadline.
  RawClient slow(server.port());
  std::atomic<bool> slow_cut{false};
  std::thread trickle([&] {
    const std::string request = "GET /s/k HTTP/1.1\r\nX-Pad: " + std::string(200, 'p') + "\r\n\r\n";
    for (char c : request) {
      if (!slow.send(std::string(1, c))) {
        slow_cut = true;
        return;
      }
      std::this_thread::sleep_for(50ms);
    }
  });
  // Other clients are served meanwhile.
  CHECK(statusOf(roundTrip(server.port(), horovodRequest("PUT", "/s/other", "v"))) == 200);

  const auto start = Clock::now();
  auto res = half.readResponse();
  CHECK(statusOf(res) == 408);
  CHECK(Clock::now() - start < 5s);
  CHECK(half.closedByPeer());
  trickle.join();
  CHECK(slow_cut);  // the server closed the connection long before the 10 s the request needs

  // An idle keep-alive connection is closed quietly, without a 408.
  RawClient idle(server.port());
  REQUIRE(idle.send(horovodRequest("GET", "/s/other")));
  CHECK(statusOf(idle.readResponse()) == 200);
  CHECK(idle.readResponse().empty());
}

TEST_CASE("sockets: a slow reader of a large answer gets all of it; one that stops reading is cut off",
          "[server][limits]") {
  ServerOptions options;
  options.read_timeout = 1s;
  ServerThread server(options);
  // More than the socket buffers of both ends hold, so the answer's write outlasts the timeout.
  const std::string value(32 << 20, 'v');
  CHECK(statusOf(roundTrip(server.port(), horovodRequest("PUT", "/s/big", value))) == 200);
  const std::string request = "GET /s/big HTTP/1.1\r\n\r\n";

  RawClient stalled(server.port(), 10s);
  REQUIRE(stalled.send(request));
  RawClient slow(server.port(), 10s);
  REQUIRE(slow.send(request));
  const auto start = Clock::now();
  // 64 KiB every 6 ms: about 3 s for the answer, each piece well within the 1 s.
  const std::string got = slow.readSlowly(value.size() + 1000, 64 << 10, 6ms);
  CHECK(Clock::now() - start > 2s);
  CHECK(statusOf(got) == 200);
  CHECK(got.size() > value.size());
  const bool whole = bodyOf(got) == value;  // not CHECK(a == b): Catch would print 32 MiB on a failure
  CHECK(whole);

  // The stalled client's answer stopped at what the buffers held: the server gave up on it.
  const std::string partial = stalled.readSlowly(value.size() + 1000, 1 << 20, 0ms);
  CHECK(statusOf(partial) == 200);
  CHECK(partial.size() < value.size());
  // Other clients are unaffected.
  CHECK(statusOf(roundTrip(server.port(), horovodRequest("GET", "/s/missing"))) == 404);
}

TEST_CASE("sockets: an answer must be written within max_wait in all, however steadily the client reads",
          "[server][limits]") {
  ServerOptions options;
  options.read_timeout = 1s;
  options.max_wait = 1500ms;
  ServerThread server(options);
  const std::string value(32 << 20, 'v');
  CHECK(statusOf(roundTrip(server.port(), horovodRequest("PUT", "/s/big", value))) == 200);
  RawClient slow(server.port(), 10s);
  REQUIRE(slow.send("GET /s/big HTTP/1.1\r\n\r\n"));
  // The same pace as above (about 3 s for all of it): cut off at 1.5 s.
  const std::string got = slow.readSlowly(value.size() + 1000, 64 << 10, 6ms);
  CHECK(statusOf(got) == 200);
  CHECK(got.size() < value.size());
}

TEST_CASE("sockets: abrupt disconnects do not disturb the server", "[server]") {
  ServerThread server;
  for (int i = 0; i < 20; ++i) {
    RawClient client(server.port());
    client.send(i % 2 ? "PUT /s/k HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc" : "GET /s/k?wait_ms=10000 HTTP/1.1\r\n\r\n");
    if (i % 3 == 0) client.reset();
  }
  CHECK(statusOf(roundTrip(server.port(), horovodRequest("PUT", "/s/k", "v"))) == 200);
  CHECK(bodyOf(roundTrip(server.port(), horovodRequest("GET", "/s/k"))) == "v");
  // Every aborted connection is eventually released (long polls woke when the key was stored).
  CHECK(eventually([&] { return server.server().status()["connections"] == 0; }));
}

TEST_CASE("sockets: connections beyond the limit get 503 and close", "[server][limits]") {
  ServerOptions options;
  options.max_connections = 3;
  ServerThread server(options);
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 3; ++i) held.push_back(std::make_unique<RawClient>(server.port()));
  REQUIRE(eventually([&] { return server.server().status()["connections"] == 3; }));
  auto refused = roundTrip(server.port(), horovodRequest("GET", "/s/k"));
  CHECK(statusOf(refused) == 503);
  CHECK_THAT(refused, Catch::Contains("too many open connections"));
  held.pop_back();
  REQUIRE(eventually([&] { return server.server().status()["connections"] == 2; }));
  CHECK(statusOf(roundTrip(server.port(), horovodRequest("GET", "/s/k"))) == 404);
}

TEST_CASE("sockets: long poll answers when the key arrives, 404 when its time is up", "[server][longpoll]") {
  ServerThread server;
  std::thread writer([&] {
    std::this_thread::sleep_for(150ms);
    roundTrip(server.port(), horovodRequest("PUT", "/s/late", "here"));
  });
  const auto start = Clock::now();
  auto res = roundTrip(server.port(), "GET /s/late?wait_ms=20000 HTTP/1.1\r\n\r\n");
  writer.join();
  CHECK(statusOf(res) == 200);
  CHECK(bodyOf(res) == "here");
  CHECK_THAT(res, Catch::Contains("X-Hvd-Long-Poll: 1"));
  CHECK(Clock::now() - start < 10s);

  const auto t0 = Clock::now();
  auto expired = roundTrip(server.port(), "GET /s/never?wait_ms=200 HTTP/1.1\r\n\r\n");
  CHECK(statusOf(expired) == 404);
  CHECK(Clock::now() - t0 >= 190ms);
  CHECK(server.server().status()["long_polls_waiting"] == 0);

  // Many waiters on one key all wake on one PUT.
  std::vector<std::thread> waiters;
  std::atomic<int> got{0};
  for (int i = 0; i < 16; ++i) {
    waiters.emplace_back([&] {
      if (bodyOf(roundTrip(server.port(), "GET /s/many?wait_ms=20000 HTTP/1.1\r\n\r\n")) == "v") ++got;
    });
  }
  REQUIRE(eventually([&] { return server.server().status()["long_polls_waiting"] == 16; }));
  roundTrip(server.port(), horovodRequest("PUT", "/s/many", "v"));
  for (auto& t : waiters) t.join();
  CHECK(got == 16);
}

TEST_CASE("sockets: Horovod's rank_and_size request waits for the driver's next round", "[server][elastic]") {
  ServerThread server;
  ElasticRound r1;
  r1.number = 1;
  r1.slots["h:0"] = {0, 2, 0, 1, 0, 2};
  r1.slots["g:0"] = {1, 2, 0, 1, 1, 2};
  server.server().beginRound(r1);
  server.server().markStarted("h:0", 1);
  server.server().markStarted("g:0", 1);
  std::atomic<int> asked{0};
  server.server().onRoundRequest([&](const std::string& slot, uint64_t after) {
    if (slot == "h:0" && after == 1) ++asked;
  });
  // h:0 re-initializes after a failure (Horovod's worker: no round in the request): it must not get round 1
  // again, but the round the driver forms next.
  std::string res;
  std::thread worker([&] { res = roundTrip(server.port(), horovodRequest("GET", "/rank_and_size/h:0")); });
  REQUIRE(eventually([&] { return asked.load() == 1; }));
  ElasticRound r2;
  r2.number = 2;
  r2.slots["h:0"] = {0, 1, 0, 1, 0, 1};
  server.server().beginRound(r2);
  worker.join();
  CHECK(statusOf(res) == 200);
  CHECK(bodyOf(res) == "0,1,0,1,0,1");
  CHECK_THAT(res, Catch::Contains("X-Hvd-Round: 2"));
  // g:0 is not in round 2: all -1, as Horovod's driver answers a removed slot.
  CHECK(bodyOf(roundTrip(server.port(), horovodRequest("GET", "/rank_and_size/g:0"))) == "-1,-1,-1,-1,-1,-1");
}

TEST_CASE("sockets: stop() closes connections and the listener", "[server]") {
  ServerThread server;
  RawClient keep(server.port());
  REQUIRE(keep.send(horovodRequest("GET", "/s/k")));
  REQUIRE(statusOf(keep.readResponse()) == 404);
  RawClient polling(server.port());
  REQUIRE(polling.send("GET /s/k?wait_ms=30000 HTTP/1.1\r\n\r\n"));
  REQUIRE(eventually([&] { return server.server().status()["long_polls_waiting"] == 1; }));
  server.server().stop();
  server.server().stop();  // idempotent
  CHECK(keep.closedByPeer());
  CHECK(polling.closedByPeer());
  CHECK_THROWS(RawClient(server.port()));
}

TEST_CASE("sockets: bind failures name the address", "[server]") {
  ServerThread first;
  boost::asio::io_context ioc;
  ServerOptions same;
  same.port = first.port();
  CHECK_THROWS_AS(Server(ioc, same), hvd::NetworkError);
  CHECK_THROWS_WITH(Server(ioc, same), Catch::Contains("127.0.0.1:" + std::to_string(first.port())) &&
                                           Catch::Contains("in use"));
  ServerOptions foreign;
  foreign.bind_address = "192.0.2.1";  // TEST-NET-1: never an address of this machine
  CHECK_THROWS_WITH(Server(ioc, foreign), Catch::Contains("192.0.2.1:0"));
  ServerOptions nonsense;
  nonsense.bind_address = "no-such-host.invalid";
  CHECK_THROWS_WITH(Server(ioc, nonsense), Catch::Contains("no-such-host.invalid"));
}

TEST_CASE("sockets: the server listens on IPv6 loopback when asked", "[server]") {
  const auto server = ipv6LoopbackServer({});
  if (!server) return;
  CHECK(server->server().address() == "::1");
  StoreOptions client;
  client.host = "::1";
  client.port = server->port();
  HttpStore store(client);
  CHECK_THAT(store.describe(), Catch::Equals("http://[::1]:" + std::to_string(server->port())));
  store.set("s/k", bytes("v6"));
  CHECK(store.get("s/k", 5s) == bytes("v6"));
}

TEST_CASE("sockets: many concurrent clients", "[server][concurrency]") {
  ServerThread server({}, 2);
  constexpr int kThreads = 24;
  constexpr int kOps = 100;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  auto shared = std::make_shared<HttpStore>(server.storeOptions());
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Half the threads share one store (its connection pool), half have their own.
      std::shared_ptr<HttpStore> own = t % 2 ? std::make_shared<HttpStore>(server.storeOptions()) : shared;
      for (int i = 0; i < kOps; ++i) {
        const std::string key = "c" + std::to_string(t) + "/k" + std::to_string(i);
        const Bytes value = bytes(key + std::string(i, '\0'));
        own->set(key, value);
        if (own->get(key, 10s) != value) ++failures;
        own->add("c/counter", 1);
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(shared->add("c/counter", 0) == kThreads * kOps);
}

TEST_CASE("sockets: peerSocketOwner finds the owner of the other end of a loopback connection",
          "[server][peer]") {
  // A listener and one connection to it, both ends in this process.
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 4) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const uint16_t listen_port = ntohs(addr.sin_port);
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  sockaddr_in client_addr{};
  len = sizeof client_addr;
  REQUIRE(::getsockname(client, reinterpret_cast<sockaddr*>(&client_addr), &len) == 0);
  const uint16_t client_port = ntohs(client_addr.sin_port);

  CHECK(peerSocketOwner("127.0.0.1", listen_port, "127.0.0.1", client_port) == ::geteuid());
  // IPv4-mapped addresses (a dual-stack listener's view) find the same socket.
  CHECK(peerSocketOwner("::ffff:127.0.0.1", listen_port, "::ffff:127.0.0.1", client_port) == ::geteuid());
  // No such connection. The kernel would fall back to the listener on the "peer" port: that is never
  // taken for the peer.
  CHECK_THROWS_WITH(peerSocketOwner("127.0.0.1", 1, "127.0.0.1", listen_port),
                    Catch::Contains("NETLINK_SOCK_DIAG") && Catch::Contains("No such file"));
  CHECK_THROWS_WITH(peerSocketOwner("127.0.0.1", listen_port, "::1", client_port),
                    Catch::Contains("address families differ"));
  CHECK_THROWS_WITH(peerSocketOwner("127.0.0.1", listen_port, "nonsense", client_port),
                    Catch::Contains("'nonsense'"));
  ::close(client);
  ::close(listener);
  CHECK(normalizeAddress("::ffff:10.1.2.3") == "10.1.2.3");
  CHECK(normalizeAddress("::1") == "::1");
  CHECK(normalizeAddress("node1") == "node1");
}

TEST_CASE("sockets: a server that trusts local peers serves this user's tokenless Horovod bytes",
          "[server][compat][peer]") {
  ServerThread server(trustingLocalPeers("job-secret"));
  server.server().setScopeSizes({{"global", 2}});
  std::mutex mutex;
  std::vector<TokenlessRejection> rejections;
  server.server().onTokenlessRejection([&](const TokenlessRejection& r) {
    std::lock_guard<std::mutex> lock(mutex);
    rejections.push_back(r);
  });
  const std::string blob = std::string("ab\0cd", 5);
  auto put = roundTrip(server.port(), horovodRequest("PUT", "/global/0", blob));
  CHECK(put.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(bodyOf(roundTrip(server.port(), horovodRequest("GET", "/global/0"))) == blob);
  CHECK(bodyOf(roundTrip(server.port(), "GET /global/0 HTTP/1.0\r\n\r\n")) == blob);
  CHECK(statusOf(roundTrip(server.port(), "PUT /global/1 HTTP/1.0\r\nContent-Length: 1\r\n\r\nx")) == 200);
  CHECK(statusOf(roundTrip(server.port(), horovodRequest("DELETE", "/global/0"))) == 200);
  // The token works too, and a wrong one is refused.
  CHECK(statusOf(roundTrip(server.port(), "GET /global/1 HTTP/1.1\r\nX-Hvd-Token: job-secret\r\n\r\n")) ==
        200);
  CHECK(statusOf(roundTrip(server.port(), "GET /global/1 HTTP/1.1\r\nX-Hvd-Token: job-secreT\r\n\r\n")) ==
        403);
  // Keep-alive: the peer is judged once, every request of the connection is served.
  {
    RawClient client(server.port());
    for (int i = 0; i < 3; ++i) {
      REQUIRE(client.send("GET /global/1 HTTP/1.1\r\n\r\n"));
      CHECK(bodyOf(client.readResponse()) == "x");
    }
  }
  auto status = nlohmann::json::parse(bodyOf(roundTrip(server.port(), "GET /status HTTP/1.1\r\n\r\n")));
  CHECK(status["local_peers_trusted"] == true);
  std::lock_guard<std::mutex> lock(mutex);
  CHECK(rejections.empty());
}

TEST_CASE("sockets: a server without trust answers this user's tokenless request 401 and reports it",
          "[server][peer]") {
  ServerOptions options;
  options.token = "job-secret";
  ServerThread server(options);
  std::mutex mutex;
  std::vector<TokenlessRejection> rejections;
  server.server().onTokenlessRejection([&](const TokenlessRejection& r) {
    std::lock_guard<std::mutex> lock(mutex);
    rejections.push_back(r);
  });
  CHECK(statusOf(roundTrip(server.port(), horovodRequest("GET", "/global/0"))) == 401);
  CHECK(statusOf(roundTrip(server.port(), "GET /global/0 HTTP/1.1\r\nX-Hvd-Token: job-secret\r\n\r\n")) ==
        404);
  std::lock_guard<std::mutex> lock(mutex);
  REQUIRE(rejections.size() == 1);
  CHECK(rejections[0].status == 401);
  CHECK(rejections[0].request_line == "GET /global/0");
  CHECK(rejections[0].peer.address == "127.0.0.1");
  CHECK(rejections[0].peer.port > 0);
  CHECK(rejections[0].peer.loopback);
}
