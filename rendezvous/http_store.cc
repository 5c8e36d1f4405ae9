// HttpStore: blocking client of the rendezvous server.
//
// Each connection owns a private io_context and runs it only inside the calling thread, so operations
// can use Beast's async deadlines (tcp_stream::expires_after) while the API stays synchronous. Idle
// keep-alive connections wait in a small pool; a thread takes one, uses it alone, and puts it back.
#include "rendezvous/http_store.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/beast/http/string_body.hpp>

#include "base/error.h"
#include "rendezvous/handler.h"
#include "rendezvous/http_io.h"
#include "rendezvous/token.h"

namespace hvd::rendezvous {

using Clock = std::chrono::steady_clock;

namespace {

// A pooled connection idle longer than this is dropped rather than reused: the server closes idle
// keep-alive connections after its read timeout (10 s by default), and reusing one it is closing costs a
// retry.
constexpr std::chrono::seconds kMaxIdle{2};
constexpr size_t kMaxPooled = 8;
// Extra time granted to a long-poll exchange beyond the wait itself, for the answer to travel.
constexpr std::chrono::seconds kLongPollGrace{5};
// Polling interval range against a server without long poll (Horovod's polls every 10 ms always).
constexpr std::chrono::milliseconds kPollMin{10};
constexpr std::chrono::milliseconds kPollMax{100};

struct Connection {
  net::io_context ioc;
  beast::tcp_stream stream{ioc};
  beast::flat_buffer buffer;
  bool connected = false;
  Clock::time_point last_used;
};

struct Reply {
  unsigned status = 0;
  std::string body;
  bool long_poll = false;  // the server marked a ?wait_ms= answer with kLongPollHeader
  bool values = false;     // the server marked a multi-key fetch's answer with kValuesHeader
  bool range = false;      // ... and with kRangeHeader: the values are the slices asked for
  bool refs = false;       // ... and with kRefsHeader: in appendValueOrRef's encoding
  std::string round;       // kRoundHeader of a rank_and_size answer
};

// Runs the connection's io_context until the operation started by start() has completed.
template <typename Start>
error_code runOp(Connection& c, std::chrono::milliseconds timeout, Start start) {
  error_code result = net::error::would_block;
  c.stream.expires_after(timeout);
  start([&result](error_code ec, auto&&...) { result = ec; });
  c.ioc.restart();
  c.ioc.run();
  return result;
}

std::chrono::milliseconds until(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

}  // namespace

struct HttpStore::Impl {
  explicit Impl(StoreOptions o) : options(std::move(o)) {
    const bool v6 = options.host.find(':') != std::string::npos;
    name = detail::concat("http://", v6 ? "[" : "", options.host, v6 ? "]" : "", ":", options.port);
  }

  // The URL path of a store key "scope/rest": "/scope/<rest %-escaped, '/' included>".
  std::string path(const std::string& key) const {
    const auto slash = key.find('/');
    HVD_CHECK(slash != std::string::npos && slash > 0 && slash + 1 < key.size(), StoreError, "key '", key,
              "' for ", name, " must be '<scope>/<key>' (use a PrefixStore to add a scope)");
    return "/" + percentEncode(key.substr(0, slash)) + "/" + percentEncode(key.substr(slash + 1));
  }

  std::unique_ptr<Connection> take() {
    std::lock_guard<std::mutex> lock(mutex);
    while (!idle.empty()) {
      auto c = std::move(idle.back());
      idle.pop_back();
      if (Clock::now() - c->last_used < kMaxIdle) return c;
    }
    return std::make_unique<Connection>();
  }

  void giveBack(std::unique_ptr<Connection> c) {
    c->last_used = Clock::now();
    std::lock_guard<std::mutex> lock(mutex);
    if (idle.size() < kMaxPooled) idle.push_back(std::move(c));
  }

  // Resolves the server once; later calls reuse the endpoints.
  error_code resolve(tcp::resolver::results_type& out) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!endpoints.empty()) {
      out = endpoints;
      return {};
    }
    net::io_context ioc;
    tcp::resolver resolver(ioc);
    error_code ec;
    endpoints = resolver.resolve(options.host, std::to_string(options.port), ec);
    out = endpoints;
    return ec;
  }

  // One request/response on c. Sets stale when a reused connection turned out closed by the server
  // before it read anything (safe to resend, even for non-idempotent requests).
  error_code exchange(Connection& c, const http::request<http::string_body>& req, Reply& reply,
                      std::chrono::milliseconds timeout, bool& stale) {
    const bool reused = c.connected;
    stale = false;
    if (!c.connected) {
      tcp::resolver::results_type eps;
      if (auto ec = resolve(eps)) return ec;
      auto ec = runOp(c, std::min(timeout, options.connect_timeout),
                      [&](auto handler) { c.stream.async_connect(eps, handler); });
      if (ec) return ec;
      c.stream.socket().set_option(tcp::no_delay(true));
      c.connected = true;
    }
    auto ec = runOp(c, timeout, [&](auto handler) { http::async_write(c.stream, req, handler); });
    if (ec) {
      stale = reused;
      return ec;
    }
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::numeric_limits<uint64_t>::max());
    ec = runOp(c, timeout, [&](auto handler) { http::async_read(c.stream, c.buffer, parser, handler); });
    if (ec) {
      stale = reused && !parser.got_some() && (ec == http::error::end_of_stream || ec == net::error::connection_reset);
      return ec;
    }
    auto res = parser.release();
    reply.status = res.result_int();
    reply.long_poll = res.find(kLongPollHeader) != res.end();
    reply.values = res.find(kValuesHeader) != res.end();
    reply.range = res.find(kRangeHeader) != res.end();
    reply.refs = res.find(kRefsHeader) != res.end();
    if (auto round = res.find(kRoundHeader); round != res.end()) reply.round = std::string(round->value());
    reply.body = std::move(res.body());
    if (!res.keep_alive()) {
      error_code ignored;
      c.stream.socket().close(ignored);
      c.connected = false;
    }
    return {};
  }

  // Sends a request, retrying with backoff while the server cannot be reached (it may not be up yet),
  // until deadline. Each attempt may last until deadline + grace (a long poll is answered at the
  // deadline, and the answer needs time to arrive). idempotent=false: a request that may have reached
  // the server is not resent.
  Reply request(http::verb method, const std::string& target, const std::string& body, Clock::time_point deadline,
                bool idempotent, std::chrono::milliseconds grace = std::chrono::milliseconds(0)) {
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, options.host);
    if (options.token) req.set(kTokenHeader, *options.token);
    req.body() = body;
    req.keep_alive(true);
    req.prepare_payload();

    auto backoff = options.retry_initial;
    int attempts = 0;
    const auto started = Clock::now();
    std::string last_error;
    while (true) {
      ++attempts;
      auto c = take();
      Reply reply;
      bool stale = false;
      const auto timeout = std::max(std::chrono::milliseconds(1), until(deadline) + grace);
      error_code ec = exchange(*c, req, reply, timeout, stale);
      if (!ec && reply.status != 503) {
        if (c->connected) giveBack(std::move(c));
        return reply;
      }
      if (stale) continue;  // the server had closed an idle keep-alive connection: resend on a new one
      if (ec) {
        const bool sent = c->connected;
        last_error = ec == beast::error::timeout ? detail::concat("no answer within ", timeout.count(), " ms")
                                                 : ec.message();
        if (sent && !idempotent) {
          throw StoreError(detail::concat(method, " ", target, " to rendezvous server ", name,
                                          " failed after it was sent: ", last_error));
        }
      } else {
        last_error = "503 " + reply.body;
      }
      if (Clock::now() + backoff >= deadline) {
        throw StoreError(detail::concat(
            "cannot reach rendezvous server ", name, " for ", method, " ", target, ": ", last_error, " (", attempts,
            " attempt(s) over ",
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count(), " ms)"));
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, options.retry_max);
    }
  }

  [[noreturn]] void fail(http::verb method, const std::string& key, const Reply& reply) const {
    std::string body = reply.body;
    while (!body.empty() && body.back() == '\n') body.pop_back();
    std::string hint;
    if (reply.status == 401 || reply.status == 403) {
      hint = detail::concat(" (the job's token reaches workers in ", kTokenEnv, ")");
    }
    throw StoreError(detail::concat(method, " of key '", key, "' at rendezvous server ", name, " failed: HTTP ",
                                    reply.status, ": ", body, hint));
  }

  // "scope 'global' is missing ranks [1, 3]; scope 'x' is missing keys [a]" for a timeout message.
  static std::string describeMissing(const std::vector<std::string>& keys) {
    std::map<std::string, std::pair<std::vector<std::string>, std::vector<std::string>>> by_scope;
    for (const auto& key : keys) {
      const auto slash = key.rfind('/');
      const std::string scope = slash == std::string::npos ? "" : key.substr(0, slash);
      const std::string leaf = slash == std::string::npos ? key : key.substr(slash + 1);
      auto& [ranks, others] = by_scope[scope];
      if (auto rank = rankOfKey(leaf)) {
        ranks.push_back(std::to_string(*rank));
      } else {
        others.push_back(leaf);
      }
    }
    std::string out;
    for (const auto& [scope, missing] : by_scope) {
      if (!out.empty()) out += "; ";
      out += "scope '" + scope + "'";
      if (!missing.first.empty()) out += " is missing the keys of rank(s) " + formatKeys(missing.first);
      if (!missing.second.empty()) {
        out += missing.first.empty() ? " is missing keys " : " and keys ";
        out += formatKeys(missing.second);
      }
    }
    return out;
  }

  StoreOptions options;
  std::string name;
  std::mutex mutex;  // guards idle and endpoints
  std::vector<std::unique_ptr<Connection>> idle;
  tcp::resolver::results_type endpoints;
  std::atomic<bool> long_poll{true};  // cleared when the server turns out not to support ?wait_ms=
  std::atomic<bool> values{true};     // cleared when the server turns out not to support &values=1
  std::atomic<bool> ranges{true};     // cleared when the server turns out not to support &range=
  std::atomic<bool> numeric_keys{true};  // ... and not keys=FIRST,COUNT
  std::atomic<bool> refs{true};          // ... and not refs=1
};

HttpStore::HttpStore(StoreOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
HttpStore::~HttpStore() = default;

std::string HttpStore::describe() const { return impl_->name; }

void HttpStore::set(const std::string& key, const Bytes& value) {
  const auto& o = impl_->options;
  auto reply = impl_->request(http::verb::put, impl_->path(key), std::string(value.begin(), value.end()),
                              Clock::now() + o.request_deadline, true);
  if (reply.status != 200) impl_->fail(http::verb::put, key, reply);
}

HttpStore::RoundPlace HttpStore::nextRound(const std::string& slot, uint64_t after, std::chrono::milliseconds timeout) {
  const std::string target = "/rank_and_size/" + percentEncode(slot) + "?round=" + std::to_string(after);
  Reply reply;
  try {
    // The server holds the request until the round begins (up to its own limit, then 503, which
    // request() retries until the deadline).
    reply = impl_->request(http::verb::get, target, {}, Clock::now() + timeout, true);
  } catch (const StoreError& e) {
    throw RendezvousTimeout(detail::concat("no elastic round after round ", after, " for slot ", slot, " began within ",
                                           timeout.count(), " ms at rendezvous server ", impl_->name, " (", e.what(),
                                           ")"));
  }
  if (reply.status != 200) impl_->fail(http::verb::get, "rank_and_size/" + slot, reply);
  RoundPlace place;
  int* fields[] = {&place.slot.rank,       &place.slot.size,       &place.slot.local_rank,
                   &place.slot.local_size, &place.slot.cross_rank, &place.slot.cross_size};
  std::string_view text = reply.body;
  for (size_t i = 0; i < 6; ++i) {
    const auto comma = text.find(',');
    const std::string_view field = text.substr(0, comma);
    const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), *fields[i]);
    HVD_CHECK(ec == std::errc() && end == field.data() + field.size() && (comma == std::string_view::npos) == (i == 5),
              StoreError, "rendezvous server ", impl_->name, " answered rank_and_size/", slot, " with '", reply.body,
              "', not six comma-separated integers");
    text.remove_prefix(comma == std::string_view::npos ? text.size() : comma + 1);
  }
  const auto [end, ec] = std::from_chars(reply.round.data(), reply.round.data() + reply.round.size(), place.round);
  HVD_CHECK(!reply.round.empty() && ec == std::errc() && end == reply.round.data() + reply.round.size(), StoreError,
            "rendezvous server ", impl_->name, " answered rank_and_size/", slot, " without a valid ", kRoundHeader,
            " header ('", reply.round, "')");
  return place;
}

RoundNews HttpStore::roundNews(uint64_t since) {
  const auto& o = impl_->options;
  const std::string what = "round_news/" + std::to_string(since);
  const auto reply = impl_->request(http::verb::get, "/" + what, {}, Clock::now() + o.request_deadline, true);
  if (reply.status != 200) impl_->fail(http::verb::get, what, reply);
  RoundNews news;
  const std::string_view text = reply.body;
  const auto comma = text.find(',');
  const auto whole = [](std::string_view field, auto& value) {
    const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
    return !field.empty() && ec == std::errc() && end == field.data() + field.size();
  };
  HVD_CHECK(comma != std::string_view::npos && whole(text.substr(0, comma), news.round) &&
                whole(text.substr(comma + 1), news.changes),
            StoreError, "rendezvous server ", impl_->name, " answered ", what, " with '", reply.body,
            "', not \"round,changes\"");
  return news;
}

bool HttpStore::sendReport(int rank, const std::string& json, std::chrono::milliseconds timeout) {
  const std::string what = "_hvd/report/" + std::to_string(rank);
  const auto reply = impl_->request(http::verb::put, "/" + what, json, Clock::now() + timeout, false);
  if (reply.status == 404) return false;
  if (reply.status != 200) impl_->fail(http::verb::put, what, reply);
  return true;
}

std::optional<Bytes> HttpStore::tryGet(const std::string& key) {
  const auto& o = impl_->options;
  auto reply = impl_->request(http::verb::get, impl_->path(key), {}, Clock::now() + o.request_deadline, true);
  if (reply.status == 404) return std::nullopt;
  if (reply.status != 200) impl_->fail(http::verb::get, key, reply);
  return Bytes(reply.body.begin(), reply.body.end());
}

void HttpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  // Keys grouped by scope, in order of first appearance: one multi-key long poll per scope.
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;
  for (const auto& key : keys) {
    impl_->path(key);  // validates the key
    const std::string scope = key.substr(0, key.find('/'));
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == scope; });
    if (it == groups.end()) it = groups.insert(groups.end(), {scope, {}});
    it->second.push_back(key.substr(scope.size() + 1));
  }
  size_t group = 0;
  auto poll = kPollMin;
  while (group < groups.size()) {
    const auto remaining = until(deadline);
    if (remaining.count() == 0) break;
    auto& [scope, pending] = groups[group];
    if (impl_->long_poll) {
      std::string body;
      for (const auto& key : pending) body += percentEncode(key) + "\n";
      // The server answers at the wait deadline at the latest; the grace lets that answer arrive.
      Reply reply = impl_->request(http::verb::post, "/" + percentEncode(scope) + "?wait_ms=" +
                                                         std::to_string(remaining.count()),
                                   body, deadline, true, kLongPollGrace);
      if (reply.long_poll && reply.status == 200) {
        ++group;
      } else if (reply.long_poll && reply.status == 404) {
        std::vector<std::string> missing;
        std::string_view rest = reply.body;
        while (!rest.empty()) {
          const auto nl = rest.find('\n');
          if (auto key = percentDecode(rest.substr(0, nl)); key && !key->empty()) missing.push_back(std::move(*key));
          rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
        }
        pending = std::move(missing);
        if (pending.empty()) ++group;
      } else if (!reply.long_poll && (reply.status == 404 || reply.status == 400 || reply.status == 405 ||
                                      reply.status == 501)) {
        impl_->long_poll = false;  // e.g. Horovod's own server (501 for POST): poll key by key instead
      } else {
        impl_->fail(http::verb::post, scope, reply);
      }
      continue;
    }
    // Polling fallback, key by key, with a growing pause.
    const std::string key = scope + "/" + pending.front();
    Reply reply = impl_->request(http::verb::get, impl_->path(key), {}, deadline, true);
    if (reply.status == 200) {
      pending.erase(pending.begin());
      if (pending.empty()) ++group;
      continue;
    }
    if (reply.status != 404) impl_->fail(http::verb::get, key, reply);
    std::this_thread::sleep_for(std::min(poll, until(deadline)));
    poll = std::min(poll * 2, kPollMax);
  }
  if (group == groups.size()) return;
  std::vector<std::string> missing;
  for (size_t g = group; g < groups.size(); ++g) {
    for (const auto& key : groups[g].second) missing.push_back(groups[g].first + "/" + key);
  }
  throw RendezvousTimeout(detail::concat("timed out after ", timeout.count(), " ms waiting for key(s) ",
                                         formatKeys(missing), " at rendezvous server ", impl_->name, ": ",
                                         Impl::describeMissing(missing)));
}

ValueList HttpStore::waitAndGet(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  return fetch(keys, timeout, std::nullopt);
}

ValueList HttpStore::waitAndGet(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                                ValueRange range) {
  return fetch(keys, timeout, range);
}

ValueList HttpStore::fetch(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                           std::optional<ValueRange> range) {
  if (range && !impl_->ranges) return sliceValues(fetch(keys, timeout, std::nullopt), *range);
  if (keys.empty()) return {};
  const std::string scope = keys.front().substr(0, keys.front().find('/'));
  // Keys that are the decimal numbers F, F+1, ... (the ranks of a scope) go as keys=F,COUNT in the query;
  // any other list as the body, one %-escaped key per line.
  std::optional<uint64_t> first_number;
  bool numeric = keys.size() <= kMaxNumericKeys;
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto& key = keys[i];
    impl_->path(key);  // validates the key
    // One request covers one scope; keys of several scopes take the general path.
    if (key.compare(0, scope.size() + 1, scope + "/") != 0) {
      return range ? Store::waitAndGet(keys, timeout, *range) : Store::waitAndGet(keys, timeout);
    }
    if (numeric) {
      const std::string_view name = std::string_view(key).substr(scope.size() + 1);
      uint64_t number = 0;
      const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), number);
      numeric = ec == std::errc() && end == name.data() + name.size() && (name.size() == 1 || name[0] != '0') &&
                (i == 0 ? number <= (uint64_t{1} << 53) : number == *first_number + i);
      if (i == 0) first_number = number;
    }
  }
  std::string body;
  const auto keyListBody = [&] {
    body.clear();
    for (const auto& key : keys) {
      body += percentEncode(std::string_view(key).substr(scope.size() + 1));
      body += '\n';
    }
  };
  numeric = numeric && impl_->numeric_keys;
  bool refs = range && range->repeats && impl_->refs;
  if (!numeric) keyListBody();
  const auto deadline = Clock::now() + timeout;
  std::vector<std::string> missing = keys;  // as the server last reported them
  while (impl_->values) {
    const auto remaining = until(deadline);
    if (remaining.count() == 0) break;
    // The server answers at the wait deadline at the latest; the grace lets that answer arrive.
    Reply reply = impl_->request(
        http::verb::post,
        detail::concat("/", percentEncode(scope), "?wait_ms=", remaining.count(), "&values=1",
                       numeric ? detail::concat("&keys=", *first_number, ",", keys.size()) : std::string(),
                       range ? detail::concat("&range=", range->offset, ",", range->length) : std::string(),
                       refs ? "&refs=1" : ""),
        body, deadline, true, kLongPollGrace);
    // Our servers name the first query parameter they do not know; one without keys=FIRST,COUNT gets
    // the list in the body, one without refs=1 sends every value. A 400 about no parameter (a server
    // with other limits) turns both off, so that the next try is the plain fetch; one about another
    // parameter (range=) is handled below.
    const auto refused = [&](std::string_view parameter) {
      return reply.body.find(detail::concat("unknown query parameter '", parameter)) != std::string::npos;
    };
    if (reply.status == 400 && (numeric || refs) && (refused("keys=") || refused("refs=") || !refused(""))) {
      const bool keys_refused = refused("keys="), refs_refused = refused("refs=");
      if (numeric && (keys_refused || !refs_refused)) {
        impl_->numeric_keys = false;
        numeric = false;
        keyListBody();
      }
      if (refs && (refs_refused || !keys_refused)) {
        impl_->refs = false;
        refs = false;
      }
      continue;
    }
    if (range && reply.status == 400) {
      // A server with the multi-key fetch but not its slices (it refuses the unknown parameter): fetch
      // whole values and slice them here.
      impl_->ranges = false;
      return sliceValues(fetch(keys, until(deadline), std::nullopt), *range);
    }
    if (reply.long_poll && reply.values && reply.status == 200) {
      auto values = splitValues(reply.body, reply.refs);
      HVD_CHECK(values && values->size() == keys.size(), StoreError, "rendezvous server ", impl_->name,
                " answered the fetch of ", keys.size(), " key(s) of scope '", scope, "' with ",
                values ? detail::concat(values->size(), " value(s)") : std::string("a malformed body"), " (",
                reply.body.size(), " bytes)");
      std::vector<std::pair<size_t, size_t>> spans;
      spans.reserve(values->size());
      for (const auto& value : *values) spans.emplace_back(value.data() - reply.body.data(), value.size());
      ValueList list(std::move(reply.body), std::move(spans));
      if (range && !reply.range) return sliceValues(list, *range);  // a server that sent them whole
      return list;
    }
    if (reply.long_poll && reply.status == 404) {  // not all there yet: ask again until the deadline
      missing.clear();
      std::string_view rest = reply.body;
      while (!rest.empty()) {
        const auto nl = rest.find('\n');
        if (auto key = percentDecode(rest.substr(0, nl)); key && !key->empty()) missing.push_back(scope + "/" + *key);
        rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      }
      continue;
    }
    if (reply.long_poll && reply.status == 200) {
      impl_->values = false;  // a server that waits for many keys but does not send their values
    } else if (!reply.long_poll && (reply.status == 404 || reply.status == 400 || reply.status == 405 ||
                                    reply.status == 501)) {
      impl_->values = false;  // e.g. Horovod's own server (501 for POST), or ours before the extension
    } else {
      impl_->fail(http::verb::post, scope, reply);
    }
  }
  if (impl_->values) {
    throw RendezvousTimeout(detail::concat("timed out after ", timeout.count(), " ms waiting for key(s) ",
                                           formatKeys(missing), " at rendezvous server ", impl_->name, ": ",
                                           Impl::describeMissing(missing)));
  }
  if (range) return Store::waitAndGet(keys, until(deadline), *range);
  return Store::waitAndGet(keys, until(deadline));
}

int64_t HttpStore::add(const std::string& key, int64_t delta) {
  const auto& o = impl_->options;
  auto reply = impl_->request(http::verb::post, impl_->path(key) + "?add=" + std::to_string(delta), {},
                              Clock::now() + o.request_deadline, false);
  if (reply.status != 200) impl_->fail(http::verb::post, key, reply);
  try {
    return std::stoll(reply.body);
  } catch (const std::exception&) {
    throw StoreError(detail::concat("add of key '", key, "' at rendezvous server ", impl_->name,
                                    ": answer is not an integer: '", reply.body, "'"));
  }
}

void HttpStore::deleteKey(const std::string& key) {
  const auto& o = impl_->options;
  auto reply =
      impl_->request(http::verb::delete_, impl_->path(key), {}, Clock::now() + o.request_deadline, true);
  if (reply.status != 200) impl_->fail(http::verb::delete_, key, reply);
}

}  // namespace hvd::rendezvous
