#include "rendezvous/handler.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <variant>

#include <boost/beast/http/error.hpp>

#include "base/error.h"
#include "rendezvous/token.h"

namespace hvd::rendezvous {

namespace http = boost::beast::http;

namespace {

Response makeResponse(const Request& req, http::status status, std::string body = {},
                      const char* content_type = nullptr) {
  Response res{status, req.version()};
  res.set(http::field::server, "hvd-rendezvous");
  if (content_type) res.set(http::field::content_type, content_type);
  res.body() = std::move(body);
  // Keep-alive only when the client asked for it (HTTP/1.1 default, or 1.0 with "Connection: keep-alive").
  res.keep_alive(req.keep_alive());
  res.prepare_payload();  // sets "Content-Length" in exactly that case, which Horovod's client needs
  return res;
}

Response textError(const Request& req, http::status status, const std::string& message) {
  return makeResponse(req, status, message + "\n", "text/plain");
}

}  // namespace

Response errorResponse(http::status status, const std::string& message, unsigned version) {
  Response res{status, version};
  res.set(http::field::server, "hvd-rendezvous");
  res.set(http::field::content_type, "text/plain");
  res.body() = message + "\n";
  res.keep_alive(false);
  res.prepare_payload();
  return res;
}

void applyLimits(http::request_parser<http::string_body>& parser, const ServerOptions& options) {
  parser.body_limit(options.max_value_bytes);
  parser.header_limit(static_cast<uint32_t>(std::min<size_t>(options.max_key_bytes + kHeaderAllowance, UINT32_MAX)));
}

std::optional<Response> parseErrorResponse(const boost::system::error_code& ec, const ServerOptions& options,
                                           unsigned version) {
  if (ec == http::error::body_limit) {
    return errorResponse(http::status::payload_too_large,
                         detail::concat("value exceeds the limit of ", options.max_value_bytes, " bytes"), version);
  }
  if (ec == http::error::header_limit) {
    return errorResponse(http::status::request_header_fields_too_large,
                         detail::concat("request line and headers exceed ", options.max_key_bytes + kHeaderAllowance,
                                        " bytes"),
                         version);
  }
  if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
      ec != http::error::end_of_stream && ec != http::error::partial_message) {
    return errorResponse(http::status::bad_request, "malformed HTTP request: " + ec.message(), version);
  }
  return std::nullopt;
}

namespace {

// "A,B" as two integers (each nullopt when not one, both when there is no comma).
std::pair<std::optional<int64_t>, std::optional<int64_t>> parseIntPair(std::string_view text) {
  const auto comma = text.find(',');
  if (comma == std::string_view::npos) return {};
  return {parseInt(text.substr(0, comma)), parseInt(text.substr(comma + 1))};
}

// Every request of a key list checks its keys in the same random order, so that N requests waiting for
// the same list do not all wake on the same first key.
void shuffleOrder(WaitSet& set) {
  set.order.resize(set.keys.size());
  std::iota(set.order.begin(), set.order.end(), 0u);
  thread_local std::minstd_rand rng(std::random_device{}());
  std::shuffle(set.order.begin(), set.order.end(), rng);
}

// Parses the body of a multi-key wait; nullopt for a malformed escape (bad_line names it).
std::shared_ptr<WaitSet> parseWaitSet(std::string_view body, std::string& bad_line) {
  auto set = std::make_shared<WaitSet>();
  while (!body.empty()) {
    const auto nl = body.find('\n');
    std::string_view line = body.substr(0, nl);
    body = nl == std::string_view::npos ? std::string_view() : body.substr(nl + 1);
    if (line.empty()) continue;
    auto key = percentDecode(line);
    if (!key) {
      bad_line = line;
      return nullptr;
    }
    set->keys.push_back(std::move(*key));
  }
  shuffleOrder(*set);
  return set;
}

// The key list of keys=FIRST,COUNT: the decimal numbers FIRST .. FIRST+COUNT-1.
std::shared_ptr<WaitSet> numericWaitSet(uint64_t first, uint64_t count) {
  auto set = std::make_shared<WaitSet>();
  set->keys.reserve(count);
  for (uint64_t i = 0; i < count; ++i) set->keys.push_back(std::to_string(first + i));
  shuffleOrder(*set);
  return set;
}

// POST /<scope>?wait_ms=N with the keys in the body: see handler.h.
Outcome handleMultiWait(const Request& req, KvState& state, std::string_view path, std::string_view query,
                        bool allow_wait, size_t progress, std::shared_ptr<const WaitSet> set) {
  auto scope = percentDecode(path.substr(1));
  if (!scope || scope->empty()) return {textError(req, http::status::bad_request, "malformed scope in POST /<scope>")};
  std::optional<int64_t> wait_ms;
  bool values = false;
  std::optional<ValueRange> range;
  bool refs = false;
  std::optional<std::pair<uint64_t, uint64_t>> numeric;  // keys=FIRST,COUNT
  std::string_view numeric_text;
  std::string_view needs_values;  // the first parameter that only a multi-key fetch (values=1) takes
  for (std::string_view rest = query; !rest.empty();) {
    const auto amp = rest.find('&');
    const std::string_view item = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (item.substr(0, 8) == "wait_ms=") {
      wait_ms = parseInt(item.substr(8));
      if (!wait_ms) wait_ms = -1;
    } else if (item == "values=1") {
      values = true;
    } else if (item == "refs=1") {
      refs = true;
      if (needs_values.empty()) needs_values = item;
    } else if (item.substr(0, 6) == "range=") {
      const std::string_view text = item.substr(6);
      const auto [offset, length] = parseIntPair(text);
      if (!offset || !length || *offset < 0 || *length < 0) {
        return {textError(req, http::status::bad_request,
                          "malformed range '" + std::string(text) +
                              "' for POST /<scope>: expected range=OFFSET,LENGTH, two non-negative integers")};
      }
      range = ValueRange{static_cast<uint64_t>(*offset), static_cast<uint64_t>(*length)};
      if (needs_values.empty()) needs_values = item;
    } else if (item.substr(0, 5) == "keys=") {
      numeric_text = item.substr(5);
      const auto [first, count] = parseIntPair(numeric_text);
      if (!first || !count || *first < 0 || *count < 1 || static_cast<uint64_t>(*count) > kMaxNumericKeys ||
          *first > (int64_t{1} << 53)) {
        return {textError(req, http::status::bad_request,
                          detail::concat("malformed keys '", numeric_text,
                                         "' for POST /<scope>: expected keys=FIRST,COUNT, FIRST >= 0 and 1 <= COUNT <= ",
                                         kMaxNumericKeys))};
      }
      numeric = std::make_pair(static_cast<uint64_t>(*first), static_cast<uint64_t>(*count));
      if (needs_values.empty()) needs_values = item;
    } else if (!item.empty()) {
      return {textError(req, http::status::bad_request,
                        "unknown query parameter '" + std::string(item) + "' for POST /<scope>")};
    }
  }
  if (!wait_ms || *wait_ms < 0) {
    return {textError(req, http::status::bad_request,
                      "POST /<scope> needs ?wait_ms=<milliseconds>, got '?" + std::string(query) + "'")};
  }
  if (!needs_values.empty() && !values) {
    return {textError(req, http::status::bad_request,
                      detail::concat(needs_values, " for POST /<scope> needs values=1"))};
  }
  // Whole values with references are the slice that holds all of each.
  const bool sliced = range.has_value();
  if (refs) range = range ? ValueRange{range->offset, range->length, true} : ValueRange{0, UINT64_MAX, true};
  if (numeric && numeric->second > state.options().max_connections) {
    // Each rank of a scope waits on its own connection, so a longer range is not a scope's ranks; the
    // cap keeps a small request from building a large key list.
    return {textError(req, http::status::bad_request,
                      detail::concat("keys=", numeric_text, " names more keys than this server's connection limit (",
                                     state.options().max_connections, ")"))};
  }
  if (numeric && !req.body().empty()) {
    return {textError(req, http::status::bad_request,
                      detail::concat("POST /<scope>?keys=", numeric_text, " names its keys; the body must be empty, got ",
                                     req.body().size(), " bytes"))};
  }
  if (!set) {
    const std::string_view text = numeric ? numeric_text : std::string_view(req.body());
    if (values) set = state.cachedWaitSet(*scope, text, numeric.has_value());
    if (!set) {
      std::shared_ptr<WaitSet> parsed;
      if (numeric) {
        parsed = numericWaitSet(numeric->first, numeric->second);
      } else {
        std::string bad;
        parsed = parseWaitSet(req.body(), bad);
        if (!parsed) return {textError(req, http::status::bad_request, "malformed %-escape in key '" + bad + "'")};
      }
      if (values) {
        parsed->text = text;
        parsed->numeric = numeric.has_value();
        state.rememberWaitSet(*scope, parsed);
      }
      set = std::move(parsed);
    }
    progress = 0;
  }
  // Requests that share a WaitSet share what they learnt: a key found present is not looked up again.
  if (values) progress = std::max(progress, set->present.load());
  size_t first = state.firstMissing(*scope, set->keys, set->order, progress);
  if (values) {
    for (size_t seen = set->present.load(); seen < first && !set->present.compare_exchange_weak(seen, first);) {
    }
  }
  const auto wait = std::min(std::chrono::milliseconds(*wait_ms), state.options().max_wait);
  std::shared_ptr<const std::string> body;
  std::optional<size_t> vanished;  // values: a key counted present that was deleted since
  if (values && first == set->order.size()) {
    size_t missing = 0;
    body = state.valuesBody(*scope, *set, missing, range);
    if (!body) vanished = missing;
  }
  if (vanished && allow_wait && wait.count() > 0) {
    Outcome parked;
    parked.wait_scope = std::move(*scope);
    parked.wait_key = set->keys[*vanished];
    parked.wait_for = wait;
    parked.wait_progress = first;
    parked.wait_set = std::move(set);
    return parked;
  }
  if (body) {
    Response res = makeResponse(req, http::status::ok);
    res.set(kLongPollHeader, "1");
    res.set(kValuesHeader, "1");
    if (sliced) res.set(kRangeHeader, "1");
    if (refs) res.set(kRefsHeader, "1");
    res.content_length(body->size());
    Outcome answer{std::move(res)};
    answer.shared_body = std::move(body);
    return answer;
  }
  if (first < set->order.size() && allow_wait && wait.count() > 0) {
    Outcome parked;
    parked.wait_scope = std::move(*scope);
    parked.wait_key = set->keys[set->order[first]];
    parked.wait_for = wait;
    parked.wait_progress = first;
    parked.wait_set = std::move(set);
    return parked;
  }
  Response res = makeResponse(req, first == set->order.size() ? http::status::ok : http::status::not_found);
  if (first < set->order.size()) {
    // The missing keys, in the order they were sent.
    std::vector<uint32_t> missing;
    for (size_t i = first; i < set->order.size(); i = state.firstMissing(*scope, set->keys, set->order, i + 1)) {
      missing.push_back(set->order[i]);
    }
    std::sort(missing.begin(), missing.end());
    for (uint32_t index : missing) res.body() += percentEncode(set->keys[index]) + "\n";
    res.prepare_payload();
  } else if (vanished) {
    res.result(http::status::not_found);
    res.body() = percentEncode(set->keys[*vanished]) + "\n";
    res.prepare_payload();
  }
  res.set(kLongPollHeader, "1");
  return {std::move(res)};
}

}  // namespace

namespace {

// "127.0.0.1:41000, uid 65534" / "10.0.0.2:41000, not loopback" / "..., owner unknown: <why>".
std::string describePeer(const PeerInfo& peer) {
  if (peer.address.empty()) return "peer unknown";
  const bool v6 = peer.address.find(':') != std::string::npos;
  std::string out = detail::concat(v6 ? "[" : "", peer.address, v6 ? "]" : "", ":", peer.port);
  if (!peer.loopback) return out + ", not loopback";
  if (peer.uid) return detail::concat(out, ", uid ", *peer.uid);
  return out + ", owner unknown" + (peer.owner_error.empty() ? "" : ": " + peer.owner_error);
}

// GET /rank_and_size/<host>:<local_rank>[?round=N] (see the header).
Outcome handleRankAndSize(const Request& req, KvState& state, RequestTarget& t, bool allow_wait) {
  std::optional<uint64_t> after;
  for (const auto& [name, value] : t.query) {
    if (name != "round") {
      return {textError(req, http::status::bad_request, "unknown query parameter '" + name + "' for rank_and_size")};
    }
    auto n = parseInt(value);
    if (!n || *n < 0) {
      return {textError(req, http::status::bad_request, "round must be a non-negative integer, got '" + value + "'")};
    }
    after = static_cast<uint64_t>(*n);
  }
  const auto colon = t.key.rfind(':');
  if (colon == std::string::npos || colon == 0 || !parseInt(t.key.substr(colon + 1))) {
    return {textError(req, http::status::bad_request,
                      "rank_and_size needs <host>:<local_rank>, got '" + t.key + "'")};
  }
  const KvState::RoundAnswer a = state.askRound(t.key, after);
  if (!a.elastic) {
    return {textError(req, http::status::not_found, "not an elastic job: there is no round to join")};
  }
  if (!a.ready) {
    if (allow_wait) {
      Outcome parked;
      parked.wait_scope = a.wait_scope;
      parked.wait_key = a.wait_key;
      parked.wait_for = state.options().max_wait;
      return parked;
    }
    Response res = textError(req, http::status::service_unavailable,
                             "no elastic round after " + std::to_string(a.round) + " has begun yet; ask again");
    res.set(http::field::retry_after, "1");
    return {std::move(res)};
  }
  const SlotAssignment& p = a.slot;
  Response res = makeResponse(req, http::status::ok,
                              detail::concat(p.rank, ",", p.size, ",", p.local_rank, ",", p.local_size, ",",
                                             p.cross_rank, ",", p.cross_size));
  res.set(kRoundHeader, std::to_string(a.round));
  return {std::move(res)};
}

// GET /round_news/<N> (see the header).
Outcome handleRoundNews(const Request& req, const KvState& state, const RequestTarget& t) {
  if (!t.query.empty()) {
    return {textError(req, http::status::bad_request, "round_news takes no query parameters")};
  }
  const auto since = parseInt(t.key);
  if (!since || *since < 0) {
    return {textError(req, http::status::bad_request,
                      "round_news needs a non-negative round number, got '" + t.key + "'")};
  }
  const auto news = state.roundNews(static_cast<uint64_t>(*since));
  if (!news) return {textError(req, http::status::not_found, "not an elastic job: there are no rounds")};
  Response res = makeResponse(req, http::status::ok, detail::concat(news->round, ",", news->changes));
  res.set(kRoundHeader, std::to_string(news->round));
  return {std::move(res)};
}

}  // namespace

namespace {

// PUT /_hvd/report/<rank>: see the header.
constexpr std::string_view kReportPath = "/_hvd/report/";
Outcome handleReport(const Request& req, KvState& state, std::string_view target) {
  if (req.method() != http::verb::put) {
    Response res = textError(req, http::status::method_not_allowed, "reports are sent with PUT");
    res.set(http::field::allow, "PUT");
    return {std::move(res)};
  }
  const auto rank = parseInt(target.substr(kReportPath.size()));
  if (!rank || *rank < 0) {
    return {textError(req, http::status::bad_request,
                      "malformed rank in report target '" + std::string(target) + "'")};
  }
  RankReport report;
  try {
    report = reportFromJson(nlohmann::json::parse(req.body()));
  } catch (const std::exception& e) {
    return {textError(req, http::status::bad_request, std::string("malformed report: ") + e.what())};
  }
  if (report.rank != *rank) {
    return {textError(req, http::status::bad_request,
                      detail::concat("report of rank ", report.rank, " sent to ", target))};
  }
  state.monitor().report(std::move(report));
  return {makeResponse(req, http::status::ok)};
}

}  // namespace

namespace {
Outcome handleRequest(const Request& req, std::string* body, KvState& state, const PeerInfo& peer, bool allow_wait,
                      size_t wait_progress, std::shared_ptr<const WaitSet> wait_set);
}  // namespace

Outcome handle(const Request& req, KvState& state, const PeerInfo& peer, bool allow_wait,
               size_t wait_progress, std::shared_ptr<const WaitSet> wait_set) {
  return handleRequest(req, nullptr, state, peer, allow_wait, wait_progress, std::move(wait_set));
}

Outcome handleTakingBody(Request& req, KvState& state, const PeerInfo& peer, bool allow_wait,
                         size_t wait_progress, std::shared_ptr<const WaitSet> wait_set) {
  return handleRequest(req, &req.body(), state, peer, allow_wait, wait_progress, std::move(wait_set));
}

namespace {

// handle(); `body` (the request's own body, or nullptr) may be moved from: a PUT's value is then stored
// without a copy.
Outcome handleRequest(const Request& req, std::string* body, KvState& state, const PeerInfo& peer, bool allow_wait,
                      size_t wait_progress, std::shared_ptr<const WaitSet> wait_set) {
  const ServerOptions& options = state.options();
  const std::string_view target(req.target().data(), req.target().size());
  const http::verb method = req.method();

  if (method == http::verb::get && (target == "/status" || target.substr(0, 8) == "/status?")) {
    // Keys are arbitrary bytes; invalid UTF-8 is replaced rather than thrown on (json's default).
    return {makeResponse(req, http::status::ok,
                         state.status().dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
                         "application/json")};
  }
  if (method != http::verb::get && method != http::verb::put && method != http::verb::delete_ &&
      method != http::verb::post) {
    Response res = textError(req, http::status::method_not_allowed,
                             "method '" + std::string(req.method_string()) +
                                 "' not allowed; use GET, PUT, DELETE or POST");
    res.set(http::field::allow, "GET, PUT, DELETE, POST");
    return {std::move(res)};
  }
  if (options.token) {
    auto presented = req.find(kTokenHeader);
    if (presented == req.end()) {
      if (!options.trust_local_peers) {
        Outcome refused{textError(req, http::status::unauthorized,
                                  std::string("this rendezvous server requires the ") + kTokenHeader +
                                      " header (workers read it from " + kTokenEnv + ")")};
        refused.token_missing = true;
        return refused;
      }
      if (!peer.same_user) {
        Outcome refused{textError(req, http::status::forbidden,
                                  std::string("a request without the ") + kTokenHeader +
                                      " header is accepted only on a loopback connection from a process of "
                                      "this server's own user; this one: " +
                                      describePeer(peer))};
        refused.token_missing = true;
        return refused;
      }
    } else if (!tokensEqual(std::string_view(presented->value().data(), presented->value().size()),
                            *options.token)) {
      return {textError(req, http::status::forbidden, std::string("wrong ") + kTokenHeader)};
    }
  }
  if (target.size() > options.max_key_bytes + 64) {
    return {textError(req, http::status::payload_too_large,
                      "request target of " + std::to_string(target.size()) + " bytes exceeds the limit of " +
                          std::to_string(options.max_key_bytes) + " bytes for scope + key")};
  }
  if (target.substr(0, kReportPath.size()) == kReportPath) return handleReport(req, state, target);
  if (method == http::verb::post) {
    const std::string_view path = target.substr(0, target.find('?'));
    if (path.size() > 1 && path.find('/', 1) == std::string_view::npos) {
      const auto q = target.find('?');
      return handleMultiWait(req, state, path, q == std::string_view::npos ? "" : target.substr(q + 1), allow_wait,
                             wait_progress, std::move(wait_set));
    }
  }
  auto parsed = parseTarget(target);
  if (auto* error = std::get_if<std::string>(&parsed)) {
    return {textError(req, http::status::bad_request, *error + ": '" + std::string(target) + "'")};
  }
  RequestTarget& t = std::get<RequestTarget>(parsed);
  if (t.scope.size() + t.key.size() > options.max_key_bytes) {
    return {textError(req, http::status::payload_too_large,
                      "scope + key of " + std::to_string(t.scope.size() + t.key.size()) +
                          " bytes exceeds the limit of " + std::to_string(options.max_key_bytes))};
  }
  auto unexpectedQuery = [&](const char* allowed) -> std::optional<Outcome> {
    for (const auto& [name, value] : t.query) {
      if (name != allowed) {
        return Outcome{textError(req, http::status::bad_request,
                                 "unknown query parameter '" + name + "' for " +
                                     std::string(req.method_string()))};
      }
    }
    return std::nullopt;
  };

  switch (method) {
    case http::verb::put: {
      if (auto bad = unexpectedQuery("")) return std::move(*bad);
      if (req.find(http::field::content_length) == req.end() && !req.chunked()) {
        return {textError(req, http::status::length_required, "PUT needs a Content-Length header")};
      }
      if (req.body().size() > options.max_value_bytes) {
        return {textError(req, http::status::payload_too_large,
                          "value of " + std::to_string(req.body().size()) + " bytes exceeds the limit of " +
                              std::to_string(options.max_value_bytes) + " bytes")};
      }
      if (const auto round = roundOfScope(t.scope)) {
        if (const auto current = state.currentRound(); current && *round < *current) {
          return {textError(req, http::status::gone,
                            "scope '" + t.scope + "' belongs to elastic round " + std::to_string(*round) +
                                ", which is over (the job is at round " + std::to_string(*current) + ")")};
        }
      }
      state.put(t.scope, t.key, body ? std::move(*body) : req.body());
      return {makeResponse(req, http::status::ok)};
    }
    case http::verb::get: {
      if (t.scope == "rank_and_size") return handleRankAndSize(req, state, t, allow_wait);
      if (t.scope == "round_news") return handleRoundNews(req, state, t);
      if (auto bad = unexpectedQuery("wait_ms")) return std::move(*bad);
      std::chrono::milliseconds wait{0};
      const bool long_poll = t.query.count("wait_ms") > 0;
      if (long_poll) {
        auto ms = parseInt(t.query["wait_ms"]);
        if (!ms || *ms < 0) {
          return {textError(req, http::status::bad_request,
                            "wait_ms must be a non-negative integer, got '" + t.query["wait_ms"] + "'")};
        }
        wait = std::min(std::chrono::milliseconds(*ms), options.max_wait);
      }
      auto value = state.get(t.scope, t.key);
      if (!value && long_poll && allow_wait && wait.count() > 0) {
        Outcome parked;
        parked.wait_scope = std::move(t.scope);
        parked.wait_key = std::move(t.key);
        parked.wait_for = wait;
        return parked;
      }
      Response res = value ? makeResponse(req, http::status::ok, std::move(*value))
                           : makeResponse(req, http::status::not_found);
      if (long_poll) res.set(kLongPollHeader, "1");
      return {std::move(res)};
    }
    case http::verb::delete_: {
      if (auto bad = unexpectedQuery("")) return std::move(*bad);
      state.finalize(t.scope, t.key);
      return {makeResponse(req, http::status::ok)};
    }
    case http::verb::post: {
      if (auto bad = unexpectedQuery("add")) return std::move(*bad);
      auto delta = t.query.count("add") ? parseInt(t.query["add"]) : std::nullopt;
      if (!delta) {
        return {textError(req, http::status::bad_request,
                          "POST needs ?add=<integer>, got '" + std::string(target) + "'")};
      }
      auto value = state.add(t.scope, t.key, *delta);
      if (!value) {
        return {textError(req, http::status::conflict,
                          "key '" + t.scope + "/" + t.key + "' holds a value that is not a decimal integer")};
      }
      return {makeResponse(req, http::status::ok, std::to_string(*value), "text/plain")};
    }
    default:
      detail::throwInternal(__FILE__, __LINE__, "method", detail::concat("unhandled method ", req.method_string()));
  }
}

}  // namespace

}  // namespace hvd::rendezvous
