// The rendezvous protocol through the pure handler: no sockets, one request at a time.
#include <catch2/catch.hpp>

#include <algorithm>

#include "base/error.h"
#include "rendezvous/handler.h"
#include "rendezvous/token.h"
#include "tests/rendezvous/local_peers.h"

using namespace hvd::rendezvous;
using namespace hvd::rendezvous::testing;
using namespace std::chrono_literals;
namespace http = boost::beast::http;

namespace {

Request request(http::verb method, const std::string& target, std::string body = {}, unsigned version = 11) {
  Request req{method, target, version};
  req.set(http::field::host, "127.0.0.1");
  req.body() = std::move(body);
  if (method == http::verb::put || !req.body().empty()) req.prepare_payload();
  return req;
}

Response answer(KvState& state, const Request& req) {
  Outcome out = handle(req, state);
  REQUIRE(out.response.has_value());
  return std::move(*out.response);
}

unsigned status(KvState& state, http::verb method, const std::string& target, std::string body = {}) {
  return answer(state, request(method, target, std::move(body))).result_int();
}

}  // namespace

TEST_CASE("handler: PUT, GET and overwrite with binary bodies", "[handler]") {
  KvState state({});
  const std::string value("ab\0cd", 5);
  auto put = answer(state, request(http::verb::put, "/global/rank_0", value));
  CHECK(put.result_int() == 200);
  CHECK(put.body().empty());
  auto get = answer(state, request(http::verb::get, "/global/rank_0"));
  CHECK(get.result_int() == 200);
  CHECK(get.body() == value);
  CHECK(get[http::field::content_length] == "5");
  CHECK(status(state, http::verb::put, "/global/rank_0", "new") == 200);
  CHECK(answer(state, request(http::verb::get, "/global/rank_0")).body() == "new");
  auto missing = answer(state, request(http::verb::get, "/global/rank_9"));
  CHECK(missing.result_int() == 404);
  CHECK(missing.body().empty());
  CHECK(missing[http::field::content_length] == "0");
}

TEST_CASE("handler: answers in the request's HTTP version, keep-alive only when asked", "[handler]") {
  KvState state({});
  auto v10 = answer(state, request(http::verb::get, "/s/k", {}, 10));
  CHECK(v10.version() == 10);
  CHECK_FALSE(v10.keep_alive());
  auto v11 = answer(state, request(http::verb::get, "/s/k", {}, 11));
  CHECK(v11.version() == 11);
  CHECK(v11.keep_alive());
  auto req = request(http::verb::get, "/s/k", {}, 10);
  req.keep_alive(true);
  CHECK(answer(state, req).keep_alive());
  auto close = request(http::verb::get, "/s/k", {}, 11);
  close.keep_alive(false);
  CHECK_FALSE(answer(state, close).keep_alive());
}

TEST_CASE("handler: malformed paths and queries get 400 naming the target", "[handler]") {
  KvState state({});
  for (const std::string target : {"/a/b/c", "/onlyscope", "/", "//k", "/s/", "/s/%zz", "/s/k%4", "noslash",
                                   "/s/k?bogus=1", "/s/k?wait_ms=-5", "/s/k?wait_ms=abc", "/s/k?wait_ms"}) {
    INFO(target);
    auto res = answer(state, request(http::verb::get, target));
    CHECK(res.result_int() == 400);
    if (target.find('?') == std::string::npos) CHECK_THAT(res.body(), Catch::Contains(target));
  }
  CHECK(status(state, http::verb::put, "/a/b/c", "x") == 400);
  CHECK(status(state, http::verb::delete_, "/a/b/c") == 400);
  CHECK(status(state, http::verb::post, "/s/k") == 400);
  CHECK(status(state, http::verb::post, "/s/k?add=x") == 400);
  CHECK(status(state, http::verb::put, "/s/k?add=1", "x") == 400);
}

TEST_CASE("handler: unknown methods get 405 with Allow", "[handler]") {
  KvState state({});
  for (auto verb : {http::verb::head, http::verb::options, http::verb::patch, http::verb::connect}) {
    auto res = answer(state, request(verb, "/s/k"));
    CHECK(res.result_int() == 405);
    CHECK(res[http::field::allow] == "GET, PUT, DELETE, POST");
  }
  Request custom{http::verb::unknown, "/s/k", 11};
  custom.method_string("BREW");
  auto res = answer(state, custom);
  CHECK(res.result_int() == 405);
  CHECK_THAT(res.body(), Catch::Contains("BREW"));
}

TEST_CASE("handler: PUT without Content-Length gets 411", "[handler]") {
  KvState state({});
  Request req{http::verb::put, "/s/k", 11};
  CHECK(answer(state, req).result_int() == 411);
  CHECK_FALSE(state.get("s", "k").has_value());
}

TEST_CASE("handler: size limits give 413", "[handler]") {
  ServerOptions options;
  options.max_key_bytes = 16;
  options.max_value_bytes = 10;
  KvState state(options);
  CHECK(status(state, http::verb::put, "/s/k", std::string(10, 'x')) == 200);
  CHECK(status(state, http::verb::put, "/s/" + std::string(15, 'k'), "x") == 200);
  auto big = answer(state, request(http::verb::put, "/s/k", std::string(11, 'x')));
  CHECK(big.result_int() == 413);
  CHECK_THAT(big.body(), Catch::Contains("11 bytes") && Catch::Contains("10 bytes"));
  CHECK(status(state, http::verb::put, "/s/" + std::string(16, 'k'), "x") == 413);
  CHECK(status(state, http::verb::get, "/s/" + std::string(200, 'k')) == 413);
}

TEST_CASE("handler: %-escapes are decoded, so keys may hold '/'", "[handler]") {
  KvState state({});
  CHECK(status(state, http::verb::put, "/job/t%2Fa", "v") == 200);
  CHECK(state.get("job", "t/a") == std::optional<std::string>("v"));
  CHECK(percentEncode("t/a b") == "t%2Fa%20b");
  CHECK(percentDecode(percentEncode(std::string("\0\xff/%", 4))) == std::string("\0\xff/%", 4));
}

TEST_CASE("handler: DELETE finalizes sized scopes and deletes keys of ad-hoc scopes", "[handler]") {
  KvState state({});
  state.setScopeSizes({{"global", 2}, {"local_h", 2}, {"cross_0", 1}});
  for (const char* scope : {"global", "local_h"}) {
    for (const char* key : {"rank_0", "rank_1", "0", "1"}) {
      REQUIRE(status(state, http::verb::put, std::string("/") + scope + "/" + key, "x") == 200);
    }
  }
  // One rank of global finishes: nothing is deleted yet (peers may still read its address).
  CHECK(status(state, http::verb::delete_, "/global/0") == 200);
  CHECK(status(state, http::verb::get, "/global/0") == 200);
  // The same rank finishing twice counts once.
  CHECK(status(state, http::verb::delete_, "/global/0") == 200);
  CHECK(status(state, http::verb::get, "/global/1") == 200);
  CHECK(state.scopes().at("global").finished_ranks == std::vector<int>{0});
  // local_h: one rank finished; this must survive global's completion (Horovod wiped every scope's list).
  CHECK(status(state, http::verb::delete_, "/local_h/1") == 200);
  CHECK(status(state, http::verb::delete_, "/global/1") == 200);
  CHECK(status(state, http::verb::get, "/global/0") == 404);
  CHECK(status(state, http::verb::get, "/global/rank_1") == 404);
  CHECK(status(state, http::verb::get, "/local_h/0") == 200);
  CHECK(status(state, http::verb::delete_, "/local_h/0") == 200);
  CHECK(status(state, http::verb::get, "/local_h/0") == 404);
  CHECK(state.scopes().at("local_h").finished_ranks.empty());
  // Ad-hoc scope: DELETE removes the key, then the scope.
  CHECK(status(state, http::verb::put, "/global_process_set_hash_ab/0", "x") == 200);
  CHECK(status(state, http::verb::put, "/global_process_set_hash_ab/1", "x") == 200);
  CHECK(status(state, http::verb::delete_, "/global_process_set_hash_ab/0") == 200);
  CHECK(status(state, http::verb::get, "/global_process_set_hash_ab/0") == 404);
  CHECK(status(state, http::verb::get, "/global_process_set_hash_ab/1") == 200);
  CHECK(status(state, http::verb::delete_, "/global_process_set_hash_ab/1") == 200);
  CHECK(state.scopes().count("global_process_set_hash_ab") == 0);
  CHECK(status(state, http::verb::delete_, "/never/seen") == 200);
}

TEST_CASE("handler: ever_joined_ranks outlives a completed scope; setScopeSizes resets it", "[handler]") {
  KvState state({});
  state.setScopeSizes({{"global", 2}});
  CHECK(status(state, http::verb::put, "/global/rank_1", "host") == 200);
  CHECK(state.scopes().at("global").ever_joined_ranks == std::vector<int>{1});
  CHECK(status(state, http::verb::put, "/global/0", "addr") == 200);
  CHECK(status(state, http::verb::put, "/global/1", "addr") == 200);
  CHECK(status(state, http::verb::delete_, "/global/0") == 200);
  CHECK(status(state, http::verb::delete_, "/global/1") == 200);
  // The scope completed and its data is gone, but who joined is still known (what --start-timeout asks).
  CHECK(status(state, http::verb::get, "/global/0") == 404);
  CHECK(state.scopes().at("global").joined_ranks.empty());
  CHECK(state.scopes().at("global").ever_joined_ranks == std::vector<int>{0, 1});
  // Ad-hoc scopes are not tracked (their number is unbounded).
  CHECK(status(state, http::verb::put, "/adhoc/3", "x") == 200);
  CHECK(state.scopes().at("adhoc").ever_joined_ranks.empty());
  state.setScopeSizes({{"global", 2}});
  CHECK(state.scopes().at("global").ever_joined_ranks.empty());
}

TEST_CASE("handler: onAllJoined fires once per sized scope, when its last rank first joins", "[handler]") {
  KvState state({});
  std::vector<std::string> fired;
  state.onAllJoined([&](const std::string& scope) { fired.push_back(scope); });
  state.setScopeSizes({{"global", 3}, {"local_a", 1}});
  CHECK(status(state, http::verb::put, "/global/0", "addr") == 200);
  CHECK(status(state, http::verb::put, "/global/0", "again") == 200);  // the same rank twice: still 1 of 3
  CHECK(status(state, http::verb::put, "/global/rank_2", "host") == 200);
  CHECK(fired.empty());
  CHECK(status(state, http::verb::put, "/adhoc/1", "x") == 200);  // no size: never reported
  CHECK(status(state, http::verb::put, "/global/1", "addr") == 200);
  CHECK(fired == std::vector<std::string>{"global"});
  CHECK(status(state, http::verb::put, "/global/2", "addr") == 200);  // already complete: not again
  CHECK(status(state, http::verb::put, "/local_a/0", "addr") == 200);
  CHECK(fired == std::vector<std::string>{"global", "local_a"});
  state.setScopeSizes({{"global", 1}});  // a new job: reported afresh
  CHECK(status(state, http::verb::put, "/global/0", "addr") == 200);
  CHECK(fired == std::vector<std::string>{"global", "local_a", "global"});
}

TEST_CASE("handler: setScopeSizes clears all data", "[handler]") {
  KvState state({});
  CHECK(status(state, http::verb::put, "/global/0", "x") == 200);
  state.setScopeSizes({{"global", 4}});
  CHECK(status(state, http::verb::get, "/global/0") == 404);
  CHECK(state.scopes().at("global").size == 4);
}

TEST_CASE("handler: POST ?add= is an atomic counter", "[handler]") {
  KvState state({});
  CHECK(answer(state, request(http::verb::post, "/s/n?add=3")).body() == "3");
  CHECK(answer(state, request(http::verb::post, "/s/n?add=-10")).body() == "-7");
  CHECK(status(state, http::verb::put, "/s/text", "abc") == 200);
  auto conflict = answer(state, request(http::verb::post, "/s/text?add=1"));
  CHECK(conflict.result_int() == 409);
  CHECK_THAT(conflict.body(), Catch::Contains("s/text"));
}

TEST_CASE("handler: long poll parks until the key exists", "[handler]") {
  ServerOptions options;
  options.max_wait = 5000ms;
  KvState state(options);
  Outcome parked = handle(request(http::verb::get, "/s/k?wait_ms=60000"), state);
  REQUIRE_FALSE(parked.response.has_value());
  CHECK(parked.wait_scope == "s");
  CHECK(parked.wait_key == "k");
  CHECK(parked.wait_for == 5000ms);  // capped by max_wait

  int woken = 0;
  auto id = state.addWaiter("s", "k", [&] { ++woken; });
  REQUIRE(id.has_value());
  auto cancelled = state.addWaiter("s", "k", [&] { woken += 100; });
  state.cancelWaiter(*cancelled);
  state.put("s", "other", "x");
  CHECK(woken == 0);
  state.put("s", "k", "v");
  CHECK(woken == 1);
  state.put("s", "k", "v2");  // a waiter fires once
  CHECK(woken == 1);
  CHECK_FALSE(state.addWaiter("s", "k", [] {}).has_value());  // present: no waiter needed

  auto now = handle(request(http::verb::get, "/s/k?wait_ms=100"), state);
  REQUIRE(now.response);
  CHECK(now.response->body() == "v2");
  CHECK((*now.response)[kLongPollHeader] == "1");
  auto expired = handle(request(http::verb::get, "/s/absent?wait_ms=100"), state, /*allow_wait=*/false);
  REQUIRE(expired.response);
  CHECK(expired.response->result_int() == 404);
  CHECK((*expired.response)[kLongPollHeader] == "1");
  auto zero = handle(request(http::verb::get, "/s/absent?wait_ms=0"), state);
  REQUIRE(zero.response);
  CHECK(zero.response->result_int() == 404);
}

TEST_CASE("handler: token required when configured; /status stays open", "[handler]") {
  ServerOptions options;
  options.token = "sesame";
  KvState state(options);
  auto none = answer(state, request(http::verb::put, "/s/k", "v"));
  CHECK(none.result_int() == 401);
  CHECK_THAT(none.body(), Catch::Contains(kTokenHeader) && Catch::Contains(kTokenEnv));
  auto wrong = request(http::verb::put, "/s/k", "v");
  wrong.set(kTokenHeader, "sesamE");
  CHECK(answer(state, wrong).result_int() == 403);
  CHECK_FALSE(state.get("s", "k").has_value());
  auto right = request(http::verb::put, "/s/k", "v");
  right.set(kTokenHeader, "sesame");
  CHECK(answer(state, right).result_int() == 200);
  CHECK(answer(state, request(http::verb::get, "/status")).result_int() == 200);
}

TEST_CASE("handler: a server that trusts local peers accepts tokenless requests from its own user only",
          "[handler][token]") {
  KvState state(trustingLocalPeers("sesame"));
  PeerInfo same = sameUserPeer();
  PeerInfo other = otherUserPeer();
  PeerInfo remote;
  remote.address = "10.0.0.2";
  remote.port = 40001;
  PeerInfo unknown = same;
  unknown.uid.reset();
  unknown.same_user = false;
  unknown.owner_error = "socket owner: NETLINK_SOCK_DIAG lookup: No such file or directory (errno 2)";

  // Tokenless from this user's own local process: served, and nothing to report.
  Outcome put = handle(request(http::verb::put, "/global/0", "addr"), state, same);
  REQUIRE(put.response);
  CHECK(put.response->result_int() == 200);
  CHECK_FALSE(put.token_missing);
  Outcome get = handle(request(http::verb::get, "/global/0"), state, same);
  REQUIRE(get.response);
  CHECK(get.response->body() == "addr");

  // Tokenless from anyone else: 403 naming the peer, reported; the data is untouched.
  struct Case {
    const PeerInfo* peer;
    const char* named;
  };
  for (const Case& c :
       {Case{&other, "127.0.0.1:40000, uid 65534"}, Case{&remote, "10.0.0.2:40001, not loopback"},
        Case{&unknown, "owner unknown: socket owner"}}) {
    Outcome refused = handle(request(http::verb::put, "/global/0", "evil"), state, *c.peer);
    REQUIRE(refused.response);
    CHECK(refused.response->result_int() == 403);
    CHECK(refused.token_missing);
    CHECK_THAT(refused.response->body(), Catch::Contains(c.named) && Catch::Contains(kTokenHeader));
  }
  // No PeerInfo (the overload without one): trusted for nothing.
  Outcome anonymous = handle(request(http::verb::get, "/global/0"), state);
  REQUIRE(anonymous.response);
  CHECK(anonymous.response->result_int() == 403);
  CHECK(anonymous.token_missing);
  CHECK(*state.get("global", "0") == "addr");

  // The token works from everywhere; a wrong one is 403 even from the trusted peer, and is not a
  // "missing token" (nothing for hvdrun to explain).
  for (const PeerInfo* peer : {&same, &other, &remote}) {
    auto right = request(http::verb::get, "/global/0");
    right.set(kTokenHeader, "sesame");
    Outcome ok = handle(right, state, *peer);
    REQUIRE(ok.response);
    CHECK(ok.response->result_int() == 200);
    auto wrong = request(http::verb::get, "/global/0");
    wrong.set(kTokenHeader, "sesamE");
    Outcome bad = handle(wrong, state, *peer);
    REQUIRE(bad.response);
    CHECK(bad.response->result_int() == 403);
    CHECK_FALSE(bad.token_missing);
  }
  CHECK(answer(state, request(http::verb::get, "/status")).result_int() == 200);
  CHECK(nlohmann::json::parse(
            answer(state, request(http::verb::get, "/status")).body())["local_peers_trusted"] == true);
}

TEST_CASE("handler: without trust, a tokenless request is 401 whoever sends it", "[handler][token]") {
  ServerOptions options;
  options.token = "sesame";
  KvState state(options);
  PeerInfo same;
  same.address = "127.0.0.1";
  same.loopback = true;
  same.uid = 0;
  same.same_user = true;  // what the server would find; it must not matter here
  for (const Outcome& out : {handle(request(http::verb::get, "/global/0"), state, same),
                             handle(request(http::verb::get, "/global/0"), state)}) {
    REQUIRE(out.response);
    CHECK(out.response->result_int() == 401);
    CHECK(out.token_missing);
  }
  CHECK(nlohmann::json::parse(
            answer(state, request(http::verb::get, "/status")).body())["local_peers_trusted"] == false);

  // No token at all: open, and trust changes nothing.
  ServerOptions open;
  open.trust_local_peers = true;
  KvState open_state(open);
  Outcome out = handle(request(http::verb::put, "/global/0", "v"), open_state, PeerInfo{});
  REQUIRE(out.response);
  CHECK(out.response->result_int() == 200);
  CHECK_FALSE(out.token_missing);
}

TEST_CASE("handler: GET /status reports scopes, keys, joined ranks and uptime", "[handler]") {
  KvState state({});
  state.setScopeSizes({{"global", 3}});
  CHECK(status(state, http::verb::put, "/global/rank_0", "h") == 200);
  CHECK(status(state, http::verb::put, "/global/2", "addr") == 200);
  CHECK(status(state, http::verb::delete_, "/global/2") == 200);
  auto res = answer(state, request(http::verb::get, "/status"));
  CHECK(res[http::field::content_type] == "application/json");
  auto json = nlohmann::json::parse(res.body());
  CHECK(json["scopes"]["global"]["size"] == 3);
  CHECK(json["scopes"]["global"]["joined_ranks"] == nlohmann::json::array({0, 2}));
  CHECK(json["scopes"]["global"]["finished_ranks"] == nlohmann::json::array({2}));
  CHECK(json["scopes"]["global"]["keys"] == nlohmann::json::array({"2", "rank_0"}));
  CHECK(json["uptime_s"].get<double>() >= 0);
}

TEST_CASE("rankOfKey reads Gloo's rank keys only", "[handler]") {
  CHECK(rankOfKey("rank_12") == 12);
  CHECK(rankOfKey("7") == 7);
  CHECK_FALSE(rankOfKey("rank_").has_value());
  CHECK_FALSE(rankOfKey("x7").has_value());
  CHECK_FALSE(rankOfKey("12345678901").has_value());
}

TEST_CASE("tokens: generated, compared, read from files", "[token]") {
  const auto a = generateToken();
  CHECK(a.size() == 64);
  CHECK(a != generateToken());
  CHECK(tokensEqual(a, a));
  CHECK_FALSE(tokensEqual(a.substr(1), a));
  CHECK_FALSE(tokensEqual(a + "x", a));
  CHECK_THROWS_WITH(readTokenFile("/nonexistent/token"), Catch::Contains("/nonexistent/token"));
  ::setenv(kTokenEnv, "abc", 1);
  CHECK(tokenFromEnvironment() == std::optional<std::string>("abc"));
  ::setenv(kTokenEnv, "", 1);
  CHECK_FALSE(tokenFromEnvironment().has_value());
  ::unsetenv(kTokenEnv);
  CHECK_FALSE(tokenFromEnvironment().has_value());
}

TEST_CASE("handler: /status survives keys that are not UTF-8 (found by the fuzzer)", "[handler]") {
  KvState state({});
  CHECK(status(state, http::verb::put, "/s%FF/k%9D%8A", "x") == 200);
  auto res = answer(state, request(http::verb::get, "/status"));
  CHECK(res.result_int() == 200);
  CHECK_NOTHROW(nlohmann::json::parse(res.body()));
}

TEST_CASE("handler: POST /<scope>?wait_ms= waits for many keys in one request", "[handler]") {
  KvState state({});
  CHECK(status(state, http::verb::put, "/g/0", "a") == 200);
  CHECK(status(state, http::verb::put, "/g/a%2Fb", "b") == 200);
  auto all = answer(state, request(http::verb::post, "/g?wait_ms=0", "0\na%2Fb\n"));
  CHECK(all.result_int() == 200);
  CHECK(all[kLongPollHeader] == "1");
  auto some = answer(state, request(http::verb::post, "/g?wait_ms=0", "0\n1\na%2Fb\n2"));
  CHECK(some.result_int() == 404);
  CHECK(some.body() == "1\n2\n");
  const auto req = request(http::verb::post, "/g?wait_ms=1000", "0\n1\n2\n");
  Outcome parked = handle(req, state);
  REQUIRE_FALSE(parked.response.has_value());
  REQUIRE(parked.wait_set);
  const std::string first = parked.wait_key;
  CHECK((first == "1" || first == "2"));
  CHECK(status(state, http::verb::put, "/g/" + first, "c") == 200);
  Outcome next = handle(req, state, true, parked.wait_progress, parked.wait_set);
  REQUIRE_FALSE(next.response.has_value());
  CHECK(next.wait_key == (first == "1" ? "2" : "1"));
  CHECK(next.wait_progress > parked.wait_progress);
  CHECK(status(state, http::verb::put, "/g/" + next.wait_key, "c") == 200);
  Outcome done = handle(req, state, true, next.wait_progress, next.wait_set);
  REQUIRE(done.response);
  CHECK(done.response->result_int() == 200);
  CHECK(status(state, http::verb::post, "/g", "0") == 400);
  CHECK(status(state, http::verb::post, "/g?wait_ms=x", "0") == 400);
  CHECK(status(state, http::verb::post, "/g?wait_ms=1", "%zz") == 400);
}

TEST_CASE("handler: POST /<scope>?wait_ms=&values=1 answers every value in request order", "[handler][values]") {
  KvState state({});
  const auto fetch = request(http::verb::post, "/g?wait_ms=0&values=1", "2\n0\na%2Fb\n");
  CHECK(status(state, http::verb::put, "/g/0", "zero") == 200);
  CHECK(status(state, http::verb::put, "/g/a%2Fb", std::string("b\0b", 3)) == 200);
  // Missing keys: 404 naming them, as a plain multi-key wait.
  auto some = answer(state, fetch);
  CHECK(some.result_int() == 404);
  CHECK(some.body() == "2\n");
  CHECK(some[kLongPollHeader] == "1");
  CHECK(status(state, http::verb::put, "/g/2", std::string(200, 'x')) == 200);
  Outcome all = handle(fetch, state);
  REQUIRE(all.response);
  CHECK(all.response->result_int() == 200);
  CHECK((*all.response)[kValuesHeader] == "1");
  CHECK((*all.response)[kLongPollHeader] == "1");
  REQUIRE(all.shared_body);
  CHECK(all.response->body().empty());
  CHECK((*all.response)[http::field::content_length] == std::to_string(all.shared_body->size()));
  // 200 bytes take a 2-byte length.
  const std::string expected = std::string("\xc8\x01", 2) + std::string(200, 'x') + "\x04zero" + std::string("\x03" "b\0b", 4);
  CHECK(*all.shared_body == expected);
  const auto values = splitValues(*all.shared_body);
  REQUIRE(values);
  REQUIRE(values->size() == 3);
  CHECK((*values)[0] == std::string(200, 'x'));
  CHECK((*values)[1] == "zero");
  CHECK((*values)[2] == std::string_view("b\0b", 3));
  CHECK(status(state, http::verb::post, "/g?wait_ms=0&values=2", "0") == 400);
  CHECK(status(state, http::verb::post, "/g?wait_ms=0&valuez=1", "0") == 400);
  CHECK(status(state, http::verb::post, "/g?values=1", "0") == 400);
}

TEST_CASE("handler: waiters of the same key list share one answer, rebuilt when a value changes",
          "[handler][values]") {
  KvState state({});
  const std::string keys = "0\n1\n2\n";
  const auto fetch = request(http::verb::post, "/g?wait_ms=1000&values=1", keys);
  CHECK(status(state, http::verb::put, "/g/0", "a") == 200);  // the scope exists: its key lists are kept
  Outcome first = handle(fetch, state);
  Outcome second = handle(request(http::verb::post, "/g?wait_ms=1000&values=1", keys), state);
  REQUIRE_FALSE(first.response);
  REQUIRE_FALSE(second.response);
  CHECK(first.wait_set == second.wait_set);  // parsed once
  CHECK(first.wait_key == second.wait_key);
  CHECK(status(state, http::verb::put, "/g/1", "b") == 200);
  CHECK(status(state, http::verb::put, "/g/2", "c") == 200);
  Outcome a = handle(fetch, state, true, first.wait_progress, first.wait_set);
  Outcome b = handle(fetch, state, true, second.wait_progress, second.wait_set);
  REQUIRE(a.shared_body);
  REQUIRE(b.shared_body);
  CHECK(a.shared_body == b.shared_body);  // one object, not equal copies
  CHECK(*a.shared_body == std::string("\x01" "a" "\x01" "b" "\x01" "c"));
  // A third request with the same list, after everything arrived, gets that object too.
  Outcome c = handle(fetch, state);
  CHECK(c.shared_body == a.shared_body);
  // A changed value makes a new answer; the old one is untouched (it may still be on its way out).
  CHECK(status(state, http::verb::put, "/g/1", "B") == 200);
  Outcome d = handle(fetch, state);
  REQUIRE(d.shared_body);
  CHECK(d.shared_body != a.shared_body);
  CHECK(*d.shared_body == std::string("\x01" "a" "\x01" "B" "\x01" "c"));
  CHECK(*a.shared_body == std::string("\x01" "a" "\x01" "b" "\x01" "c"));
  // So does an atomic add, and a deleted key is missing again.
  CHECK(status(state, http::verb::post, "/g/2?add=5", "") == 409);  // "c" is not an integer: no change
  Outcome e = handle(fetch, state);
  CHECK(e.shared_body == d.shared_body);
  CHECK(status(state, http::verb::delete_, "/g/2") == 200);
  auto gone = answer(state, request(http::verb::post, "/g?wait_ms=0&values=1", keys));
  CHECK(gone.result_int() == 404);
  CHECK(gone.body() == "2\n");
  CHECK(status(state, http::verb::post, "/g/2?add=5", "") == 200);
  Outcome f = handle(fetch, state);
  REQUIRE(f.shared_body);
  CHECK(*f.shared_body == std::string("\x01" "a" "\x01" "B" "\x01" "5"));
  // A different list is a different answer.
  Outcome g = handle(request(http::verb::post, "/g?wait_ms=0&values=1", "2\n0\n"), state);
  REQUIRE(g.shared_body);
  CHECK(*g.shared_body == std::string("\x01" "5" "\x01" "a"));
}

TEST_CASE("handler: &range=OFFSET,LENGTH answers each value's slice, clipped to its end", "[handler][values][range]") {
  KvState state({});
  CHECK(status(state, http::verb::put, "/g/0", "abcdef") == 200);
  CHECK(status(state, http::verb::put, "/g/1", "xy") == 200);
  CHECK(status(state, http::verb::put, "/g/2", "") == 200);
  const std::string keys = "0\n1\n2\n";
  Outcome mid = handle(request(http::verb::post, "/g?wait_ms=0&values=1&range=1,3", keys), state);
  REQUIRE(mid.response);
  CHECK(mid.response->result_int() == 200);
  CHECK((*mid.response)[kValuesHeader] == "1");
  CHECK((*mid.response)[kRangeHeader] == "1");
  REQUIRE(mid.shared_body);
  // "bcd"; "xy" clipped to "y"; the empty value stays empty.
  CHECK(*mid.shared_body == std::string("\x03" "bcd" "\x01" "y" "\x00", 7));
  CHECK((*mid.response)[http::field::content_length] == std::to_string(mid.shared_body->size()));
  Outcome past = handle(request(http::verb::post, "/g?wait_ms=0&values=1&range=4,100", keys), state);
  REQUIRE(past.shared_body);
  CHECK(*past.shared_body == std::string("\x02" "ef" "\x00" "\x00", 5));
  Outcome none = handle(request(http::verb::post, "/g?wait_ms=0&values=1&range=0,0", keys), state);
  REQUIRE(none.shared_body);
  CHECK(*none.shared_body == std::string(3, '\0'));
  // Whole values carry no range mark.
  Outcome whole = handle(request(http::verb::post, "/g?wait_ms=0&values=1", keys), state);
  REQUIRE(whole.response);
  CHECK(whole.response->find(kRangeHeader) == whole.response->end());
  CHECK(*whole.shared_body == std::string("\x06" "abcdef" "\x02" "xy" "\x00", 11));
  // A missing key is a 404 naming it, as without a range.
  auto missing = answer(state, request(http::verb::post, "/g?wait_ms=0&values=1&range=0,1", "0\n5\n"));
  CHECK(missing.result_int() == 404);
  CHECK(missing.body() == "5\n");
  // A changed value makes a new answer for the same range.
  CHECK(status(state, http::verb::put, "/g/1", "XYZ") == 200);
  Outcome changed = handle(request(http::verb::post, "/g?wait_ms=0&values=1&range=1,3", keys), state);
  REQUIRE(changed.shared_body);
  CHECK(*changed.shared_body == std::string("\x03" "bcd" "\x02" "YZ" "\x00", 8));
  CHECK(*mid.shared_body == std::string("\x03" "bcd" "\x01" "y" "\x00", 7));
}

TEST_CASE("handler: a malformed range is 400 naming it", "[handler][values][range]") {
  KvState state({});
  CHECK(status(state, http::verb::put, "/g/0", "abc") == 200);
  for (const std::string bad : {"", "1", "1,", ",2", "-1,2", "1,-2", "a,2", "1,2,3", "1;2", "99999999999999999999,1"}) {
    INFO("range '" << bad << "'");
    auto res = answer(state, request(http::verb::post, "/g?wait_ms=0&values=1&range=" + bad, "0\n"));
    CHECK(res.result_int() == 400);
    CHECK_THAT(res.body(), Catch::Contains("malformed range '" + bad + "'"));
    CHECK(std::count(res.body().begin(), res.body().end(), '\n') <= 1);
  }
  // A range needs values=1.
  auto plain = answer(state, request(http::verb::post, "/g?wait_ms=0&range=0,1", "0\n"));
  CHECK(plain.result_int() == 400);
  CHECK_THAT(plain.body(), Catch::Contains("range=0,1"));
  CHECK_THAT(plain.body(), Catch::Contains("needs values=1"));
}

TEST_CASE("handler: waiters of one range share its answer; a key list keeps a bounded number of ranges",
          "[handler][values][range]") {
  KvState state({});
  const std::string keys = "0\n1\n";
  CHECK(status(state, http::verb::put, "/g/0", "0123456789") == 200);
  const auto fetch = [&](int offset) {
    return handle(request(http::verb::post, "/g?wait_ms=1000&values=1&range=" + std::to_string(offset) + ",1", keys),
                  state);
  };
  Outcome first = fetch(0);
  Outcome second = fetch(0);
  REQUIRE_FALSE(first.response);  // key 1 is missing: both park on one parsed list
  CHECK(first.wait_set == second.wait_set);
  CHECK(status(state, http::verb::put, "/g/1", "abcdefghij") == 200);
  Outcome a = handle(request(http::verb::post, "/g?wait_ms=1000&values=1&range=0,1", keys), state, true,
                     first.wait_progress, first.wait_set);
  Outcome b = handle(request(http::verb::post, "/g?wait_ms=1000&values=1&range=0,1", keys), state, true,
                     second.wait_progress, second.wait_set);
  REQUIRE(a.shared_body);
  CHECK(a.shared_body == b.shared_body);  // one object, built once
  CHECK(*a.shared_body == std::string("\x01" "0" "\x01" "a"));
  // One answer per rank's column: ten ranges, of which the list keeps the last few.
  std::vector<std::shared_ptr<const std::string>> columns;
  for (int r = 0; r < 10; ++r) {
    Outcome column = fetch(r);
    REQUIRE(column.shared_body);
    CHECK(*column.shared_body == std::string("\x01") + char('0' + r) + "\x01" + char('a' + r));
    columns.push_back(column.shared_body);
    CHECK(first.wait_set->ranges.size() <= kRangeAnswersPerKeyList);
  }
  CHECK(first.wait_set->ranges.size() == kRangeAnswersPerKeyList);
  // The latest range is still shared; an evicted one is rebuilt, equal but a new object.
  CHECK(fetch(9).shared_body == columns[9]);
  Outcome again = fetch(0);
  REQUIRE(again.shared_body);
  CHECK(again.shared_body != columns[0]);
  CHECK(*again.shared_body == *columns[0]);
  CHECK(first.wait_set->ranges.size() == kRangeAnswersPerKeyList);
}

TEST_CASE("values encoding: LEB128 lengths, malformed bodies refused", "[handler][values]") {
  std::string body;
  appendValue(body, "");
  appendValue(body, std::string(300, 'q'));
  CHECK(body.substr(0, 3) == std::string("\0\xac\x02", 3));
  auto values = splitValues(body);
  REQUIRE(values);
  REQUIRE(values->size() == 2);
  CHECK((*values)[0].empty());
  CHECK((*values)[1] == std::string(300, 'q'));
  CHECK_FALSE(splitValues(std::string("\x05" "abc")));
  CHECK_FALSE(splitValues(std::string("\x80")));
  CHECK(splitValues("")->empty());
}

TEST_CASE("handler: elastic rounds answer rank_and_size as Horovod's driver, and version the scopes",
          "[handler][elastic]") {
  KvState state({});
  // Not an elastic job: no round to join.
  CHECK(status(state, http::verb::get, "/rank_and_size/a:0") == 404);
  CHECK(status(state, http::verb::get, "/round_news/0") == 404);
  ElasticRound r1;
  r1.number = 1;
  r1.slots["a:0"] = {0, 3, 0, 2, 0, 2};
  r1.slots["a:1"] = {1, 3, 1, 2, 0, 1};
  r1.slots["b:0"] = {2, 3, 0, 1, 1, 2};
  r1.scope_sizes = {{roundScope(1, "global"), 3}};
  state.beginRound(r1);
  state.markStarted("a:0", 1);
  // Started in round 1: its next request is for a later round, so it waits (the driver is told).
  std::vector<std::pair<std::string, uint64_t>> waiting;
  state.onRoundRequest([&](const std::string& slot, uint64_t after) { waiting.emplace_back(slot, after); });
  Outcome parked = handle(request(http::verb::get, "/rank_and_size/a:0"), state);
  REQUIRE_FALSE(parked.response);
  // It parks on the mark of round 2, which beginRound stores (checked below: a request parking after round 2
  // began finds the mark and is answered at once).
  CHECK_FALSE(parked.wait_key.empty());
  CHECK_FALSE(state.get(parked.wait_scope, parked.wait_key));
  CHECK(waiting == std::vector<std::pair<std::string, uint64_t>>{{"a:0", 1}});
  // Time up: 503 with Retry-After, never a stale answer.
  Outcome late = handle(request(http::verb::get, "/rank_and_size/a:0"), state, false);
  REQUIRE(late.response);
  CHECK(late.response->result_int() == 503);
  // A slot never started nor answered gets the current round at once, with its round in a header.
  auto b0 = answer(state, request(http::verb::get, "/rank_and_size/b:0"));
  CHECK(b0.result_int() == 200);
  CHECK(b0.body() == "2,3,0,1,1,2");
  CHECK(b0[kRoundHeader] == "1");
  // ?round=N asks for the first round after N.
  CHECK(answer(state, request(http::verb::get, "/rank_and_size/a:1?round=0")).body() == "1,3,1,2,0,1");
  CHECK_FALSE(handle(request(http::verb::get, "/rank_and_size/a:1?round=1"), state).response);

  // Round 2 without host b: its slot gets -1s; every key of round 1 is gone; round 1's scopes refuse PUTs.
  CHECK(status(state, http::verb::put, "/" + roundScope(1, "global") + "/0", "addr") == 200);
  ElasticRound r2;
  r2.number = 2;
  r2.slots["a:0"] = {0, 2, 0, 2, 0, 1};
  r2.slots["a:1"] = {1, 2, 1, 2, 0, 1};
  r2.blacklist = {"b"};
  CHECK_THROWS_AS(state.beginRound(ElasticRound{4, {}, {}, {}}), hvd::StoreError);  // rounds go one by one
  state.beginRound(r2);
  CHECK(state.get(parked.wait_scope, parked.wait_key));  // the mark the parked request waits for
  auto a0 = answer(state, request(http::verb::get, "/rank_and_size/a:0"));
  CHECK(a0.body() == "0,2,0,2,0,1");
  CHECK(a0[kRoundHeader] == "2");
  CHECK(answer(state, request(http::verb::get, "/rank_and_size/b:0")).body() == "-1,-1,-1,-1,-1,-1");
  CHECK(status(state, http::verb::get, "/" + roundScope(1, "global") + "/0") == 404);
  auto stale = answer(state, request(http::verb::put, "/" + roundScope(1, "global") + "/1", "addr"));
  CHECK(stale.result_int() == 410);
  CHECK_THAT(stale.body(), Catch::Contains("elastic round 1, which is over (the job is at round 2)"));
  CHECK(status(state, http::verb::put, "/" + roundScope(2, "global") + "/1", "addr") == 200);
  const auto json = state.status();
  CHECK(json["elastic"]["round"] == 2);
  // A later round keeps the marks of the earlier ones (a request may park on one after it was stored).
  state.beginRound(ElasticRound{3, r2.slots, {}, {}});
  CHECK(state.get(parked.wait_scope, parked.wait_key));
  CHECK(json["elastic"]["members"]["a:1"]["rank"] == 1);
  CHECK(json["elastic"]["blacklist"] == nlohmann::json::array({"b"}));

  // Round news: rounds 2 and 3 after round 1 (round 3 changed nothing, round 2 had no changes set).
  auto news = answer(state, request(http::verb::get, "/round_news/1"));
  CHECK(news.result_int() == 200);
  CHECK(news.body() == "3,0");
  CHECK(news[kRoundHeader] == "3");
  ElasticRound r4{4, r2.slots, {}, {}};
  r4.changes = kRoundAdded;
  state.beginRound(r4);
  CHECK(answer(state, request(http::verb::get, "/round_news/2")).body() == "4,2");
  CHECK(answer(state, request(http::verb::get, "/round_news/4")).body() == "4,0");
  CHECK(state.status()["elastic"]["changes"] == kRoundAdded);
  CHECK(status(state, http::verb::get, "/round_news/x") == 400);
  CHECK(status(state, http::verb::get, "/round_news/1?wait_ms=3") == 400);

  // Bad requests name what is wrong.
  for (const char* bad : {"/rank_and_size/a", "/rank_and_size/a:x", "/rank_and_size/a:0?round=-1",
                          "/rank_and_size/a:0?wait_ms=5"}) {
    INFO(bad);
    CHECK(status(state, http::verb::get, bad) == 400);
  }
  CHECK(roundOfScope("r12.global") == 12u);
  CHECK_FALSE(roundOfScope("global"));
  CHECK_FALSE(roundOfScope("r.global"));
  CHECK_FALSE(roundOfScope("rx.global"));
}

TEST_CASE("handler: keys=FIRST,COUNT names the decimal keys FIRST.. in the query, as the same list in the body would",
          "[handler][values][keys]") {
  KvState state({});
  CHECK(status(state, http::verb::put, "/g/3", "three") == 200);
  CHECK(status(state, http::verb::put, "/g/4", "four") == 200);
  Outcome listed = handle(request(http::verb::post, "/g?wait_ms=0&values=1", "3\n4\n"), state);
  Outcome named = handle(request(http::verb::post, "/g?wait_ms=0&values=1&keys=3,2"), state);
  REQUIRE(listed.shared_body);
  REQUIRE(named.shared_body);
  CHECK(*named.shared_body == *listed.shared_body);
  CHECK(*named.shared_body == std::string("\x05" "three" "\x04" "four"));
  // Requests naming the same keys share one parsed list and one answer.
  Outcome again = handle(request(http::verb::post, "/g?wait_ms=0&values=1&keys=3,2"), state);
  CHECK(again.shared_body == named.shared_body);
  // With a range, and a missing key: 404 naming it, as with a body.
  Outcome sliced = handle(request(http::verb::post, "/g?wait_ms=0&values=1&keys=3,2&range=1,2"), state);
  REQUIRE(sliced.shared_body);
  CHECK(*sliced.shared_body == std::string("\x02" "hr" "\x02" "ou"));
  auto missing = answer(state, request(http::verb::post, "/g?wait_ms=0&values=1&keys=2,3"));
  CHECK(missing.result_int() == 404);
  CHECK(missing.body() == "2\n");
  // A parked request wakes when the last key arrives.
  Outcome parked = handle(request(http::verb::post, "/g?wait_ms=1000&values=1&keys=3,3"), state);
  REQUIRE_FALSE(parked.response);
  CHECK(parked.wait_key == "5");
  CHECK(status(state, http::verb::put, "/g/5", "5") == 200);
  Outcome woken = handle(request(http::verb::post, "/g?wait_ms=1000&values=1&keys=3,3"), state, true,
                         parked.wait_progress, parked.wait_set);
  REQUIRE(woken.shared_body);
  CHECK(*woken.shared_body == std::string("\x05" "three" "\x04" "four" "\x01" "5"));
}

TEST_CASE("handler: a malformed keys= is 400 naming it", "[handler][values][keys]") {
  KvState state({});
  for (const std::string bad : {"", "1", "1,", ",2", "-1,2", "0,0", "0,-1", "a,2", "1,2,3", "0,1048577",
                                "99999999999999999999,1"}) {
    INFO("keys '" << bad << "'");
    auto res = answer(state, request(http::verb::post, "/g?wait_ms=0&values=1&keys=" + bad));
    CHECK(res.result_int() == 400);
    CHECK_THAT(res.body(), Catch::Contains("malformed keys '" + bad + "'"));
    CHECK(std::count(res.body().begin(), res.body().end(), '\n') <= 1);
  }
  // keys= is for the multi-key fetch only, and names at most as many keys as the server takes connections.
  auto bare = answer(state, request(http::verb::post, "/g?wait_ms=0&keys=0,2"));
  CHECK(bare.result_int() == 400);
  CHECK_THAT(bare.body(), Catch::Contains("keys=0,2 for POST /<scope> needs values=1"));
  ServerOptions small;
  small.max_connections = 100;
  KvState limited(small);
  auto many = answer(limited, request(http::verb::post, "/g?wait_ms=0&values=1&keys=0,101"));
  CHECK(many.result_int() == 400);
  CHECK_THAT(many.body(), Catch::Contains("keys=0,101 names more keys than this server's connection limit (100)"));
  CHECK(answer(limited, request(http::verb::post, "/g?wait_ms=0&values=1&keys=0,100")).result_int() == 404);
  // The keys are in the query or in the body, not both.
  auto both = answer(state, request(http::verb::post, "/g?wait_ms=0&values=1&keys=0,2", "0\n1\n"));
  CHECK(both.result_int() == 400);
  CHECK_THAT(both.body(), Catch::Contains("keys=0,2"));
  CHECK_THAT(both.body(), Catch::Contains("the body must be empty, got 4 bytes"));
}

TEST_CASE("handler: refs=1 sends each distinct value once and repeats as references", "[handler][values][refs]") {
  KvState state({});
  CHECK(status(state, http::verb::put, "/g/0", "hostA:1") == 200);
  CHECK(status(state, http::verb::put, "/g/1", "hostA:2") == 200);
  CHECK(status(state, http::verb::put, "/g/2", "hostB:3") == 200);
  CHECK(status(state, http::verb::put, "/g/3", "hostA:4") == 200);
  Outcome hosts = handle(request(http::verb::post, "/g?wait_ms=0&values=1&keys=0,4&range=0,5&refs=1"), state);
  REQUIRE(hosts.response);
  CHECK((*hosts.response)[kRefsHeader] == "1");
  CHECK((*hosts.response)[kRangeHeader] == "1");
  REQUIRE(hosts.shared_body);
  // "hostA" literal (length 5 << 1); rank 1: one back ((1 - 1) << 1 | 1); "hostB" literal; rank 3: two
  // back, to rank 1's ((2 - 1) << 1 | 1).
  CHECK(*hosts.shared_body == std::string("\x0a" "hostA" "\x01" "\x0a" "hostB" "\x03"));
  auto split = splitValues(*hosts.shared_body, true);
  REQUIRE(split);
  CHECK(*split == std::vector<std::string_view>{"hostA", "hostA", "hostB", "hostA"});
  // Without refs the same slices come whole, a different answer.
  Outcome plain = handle(request(http::verb::post, "/g?wait_ms=0&values=1&keys=0,4&range=0,5"), state);
  REQUIRE(plain.shared_body);
  CHECK(plain.response->find(kRefsHeader) == plain.response->end());
  CHECK(*plain.shared_body == std::string("\x05" "hostA" "\x05" "hostA" "\x05" "hostB" "\x05" "hostA"));
  // Whole values with refs: no range mark.
  Outcome whole = handle(request(http::verb::post, "/g?wait_ms=0&values=1&keys=0,4&refs=1"), state);
  REQUIRE(whole.shared_body);
  CHECK(whole.response->find(kRangeHeader) == whole.response->end());
  auto all = splitValues(*whole.shared_body, true);
  REQUIRE(all);
  CHECK(*all == std::vector<std::string_view>{"hostA:1", "hostA:2", "hostB:3", "hostA:4"});
  // refs needs values.
  auto bare = answer(state, request(http::verb::post, "/g?wait_ms=0&refs=1", "0\n"));
  CHECK(bare.result_int() == 400);
  CHECK_THAT(bare.body(), Catch::Contains("refs=1 for POST /<scope> needs values=1"));
}

TEST_CASE("splitValues refuses malformed references", "[handler][values][refs]") {
  CHECK_FALSE(splitValues(std::string("\x01"), true));              // a reference before any value
  CHECK_FALSE(splitValues(std::string("\x02" "a" "\x03"), true));   // two back from the second value
  CHECK_FALSE(splitValues(std::string("\x04" "a"), true));          // a literal cut short
  CHECK_FALSE(splitValues(std::string("\x80"), true));              // a length cut short
  const std::string refs("\x02" "a" "\x01" "\x00" "\x05", 5);  // outlives the views into it
  auto ok = splitValues(refs, true);
  REQUIRE(ok);
  CHECK(*ok == std::vector<std::string_view>{"a", "a", "", "a"});
  // The plain encoding reads the same bytes differently: no references there.
  const std::string literal("\x01" "a");
  auto plain = splitValues(literal, false);
  REQUIRE(plain);
  CHECK(*plain == std::vector<std::string_view>{"a"});
}

TEST_CASE("handler: columns built alongside another are right for their own range, and rebuilt after a change",
          "[handler][values][range]") {
  KvState state({});
  // Three lists of 10 two-byte entries after a 4-byte header: rank r's column is range=4+2r,2.
  const auto list = [](char tag) {
    std::string v = "head";
    for (int r = 0; r < 10; ++r) v += std::string{tag, static_cast<char>('0' + r)};
    return v;
  };
  for (int k = 0; k < 3; ++k) CHECK(status(state, http::verb::put, "/g/" + std::to_string(k), list("abc"[k])) == 200);
  const auto column = [&](int offset, int length) {
    Outcome o = handle(request(http::verb::post, "/g?wait_ms=0&values=1&keys=0,3&range=" + std::to_string(offset) +
                                                     "," + std::to_string(length)),
                       state);
    REQUIRE(o.shared_body);
    return *o.shared_body;
  };
  CHECK(column(4 + 2 * 3, 2) == std::string("\x02" "a3" "\x02" "b3" "\x02" "c3"));  // builds its neighbours too
  CHECK(column(4 + 2 * 7, 2) == std::string("\x02" "a7" "\x02" "b7" "\x02" "c7"));  // one of them
  // The same offset with another length is another answer.
  CHECK(column(4 + 2 * 5, 1) == std::string("\x01" "a" "\x01" "b" "\x01" "c"));
  CHECK(column(4 + 2 * 5, 2) == std::string("\x02" "a5" "\x02" "b5" "\x02" "c5"));
  // A changed list: the columns built before it are not used again.
  CHECK(status(state, http::verb::put, "/g/1", list('x')) == 200);
  CHECK(column(4 + 2 * 8, 2) == std::string("\x02" "a8" "\x02" "x8" "\x02" "c8"));
  CHECK(column(4 + 2 * 9, 2) == std::string("\x02" "a9" "\x02" "x9" "\x02" "c9"));
  // Past the end of every list: empty slices.
  CHECK(column(1000, 2) == std::string(3, '\0'));
}
