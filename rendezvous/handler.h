// The rendezvous server's request handling, without sockets: HTTP request in, HTTP response out.
//
// Routes (Horovod's RendezvousServer protocol, plus our extensions):
//   PUT    /<scope>/<key>             store the body (binary); 200, empty body
//   GET    /<scope>/<key>             200 with the value, or 404 with an empty body
//   GET    /<scope>/<key>?wait_ms=N   long poll: as GET, but waits up to N ms for the key (extension)
//   DELETE /<scope>/<key>             Horovod's "finalize" (see KvState::finalize); always 200
//   POST   /<scope>/<key>?add=N       atomic add to a decimal integer; 200, body = new value (extension)
//   POST   /<scope>?wait_ms=N         wait for many keys at once; body: %-escaped keys, one per line;
//                                     200 when all exist, else 404 after N ms with the missing keys as body
//                                     (extension: one request per rank instead of one per peer)
//   POST   /<scope>?wait_ms=N&values=1  the same, and the 200 carries every value (multi-key fetch,
//                                     extension): in request order, each as its length (LEB128) and its
//                                     bytes, marked with X-Hvd-Values. Built once per (scope, key list,
//                                     scope version) and shared by every request that sends the same list.
//   POST   /<scope>?wait_ms=N&values=1&range=OFFSET,LENGTH
//                                     the same, but of each value only the bytes [OFFSET, OFFSET+LENGTH)
//                                     (clipped to its end; empty past it), same framing, marked with
//                                     X-Hvd-Range as well (extension: a rank reads only its own column of
//                                     every peer's value). Built once per (scope, key list, range, scope
//                                     version); a key list keeps a few ranges' answers, the oldest dropped.
//                                     A malformed range is 400 naming it.
//   POST   /<scope>?wait_ms=N&values=1&keys=FIRST,COUNT[&range=...]
//                                     the same with the keys named in the query instead of the body (which
//                                     must be empty): the decimal numbers FIRST .. FIRST+COUNT-1, the ranks
//                                     of a scope (extension: a rank of N sends ~20 bytes instead of a list
//                                     of N keys, and the server never parses or compares that list).
//                                     COUNT is at most kMaxNumericKeys; anything malformed is 400 naming it.
//   POST   /<scope>?wait_ms=N&values=1&refs=1[&range=...][&keys=...]
//                                     the same, but a value (or slice) equal to an earlier one in the answer
//                                     is sent as how far back it is (appendValueOrRef), marked X-Hvd-Refs
//                                     (extension: the headers of N ranks on a few hosts are a few distinct
//                                     values, so every rank receives ~N bytes instead of N headers).
//   GET    /status                    JSON: scopes, keys, joined ranks, uptime, elastic round (extension)
//   GET    /rank_and_size/<host>:<local_rank>[?round=N]
//                                     elastic jobs (Horovod's protocol): the slot's place in the next
//                                     round, "rank,size,local_rank,local_size,cross_rank,cross_size", all -1
//                                     when the slot is not in it; X-Hvd-Round names the round. "Next" is
//                                     the first round after N, or, without ?round= (Horovod's workers),
//                                     after the last round this slot was started in or answered; the
//                                     request waits (up to ServerOptions::max_wait, then 503) until the
//                                     driver begins that round. 404 when the job is not elastic.
//   PUT    /_hvd/report/<rank>        a worker's RankReport (JSON, base/report.h) for the status port; 200, or 400
//                                     naming what is wrong with it (extension; the token rules apply)
//   GET    /round_news/<N>            elastic jobs: "round,changes", the latest round and the OR of the
//                                     changes (1 removed, 2 added) of every round after N; "N,0" when
//                                     none began since (rank 0 asks between steps). 404 when not elastic.
// Elastic rounds also version the scopes: "r<N>.<scope>" belongs to round N, and a PUT into the scope of
// a round that is over is 410, so a late worker of an old round cannot mix its address into a new one.
// Scope and key are single path segments; %XX escapes are decoded (Horovod's keys never contain '%', so
// this is compatible, and lets our clients send keys holding '/').
//
// Token: with ServerOptions::token, a request without X-Hvd-Token is 401, or, when the server trusts local
// peers, accepted if the connection's PeerInfo says same_user and 403 otherwise; a wrong token is 403.
//
// Threading: KvState is safe to use from any number of threads (one mutex). handle() is pure apart from
// the KvState it is given: what it knows about the connection comes in as a PeerInfo.
//
// The parts handle() routes to have their own headers, included here: the state (kv_state.h), the request
// target and its %-escapes (request_target.h), and the bodies of multi-key fetches (value_list.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "rendezvous/kv_state.h"
#include "rendezvous/request_target.h"
#include "rendezvous/server.h"
#include "rendezvous/value_list.h"

namespace hvd::rendezvous {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;

// Response header our server sets on every answer to a GET with ?wait_ms=, so clients can tell a server
// that long-polls from one that ignores the query (Horovod's), and fall back to polling.
inline constexpr const char* kLongPollHeader = "X-Hvd-Long-Poll";

// Response header of a multi-key fetch's 200 (POST /<scope>?wait_ms=N&values=1): the body holds the values,
// so a client can tell our server from one that ignores the query and fall back to reading key by key.
inline constexpr const char* kValuesHeader = "X-Hvd-Values";
// Response header of a sliced multi-key fetch's 200 (&range=): the values are the requested slices. A
// server that answers values without it sent them whole.
inline constexpr const char* kRangeHeader = "X-Hvd-Range";

// The most keys one keys=FIRST,COUNT names (the list is built in memory: ~40 bytes a key).
inline constexpr uint64_t kMaxNumericKeys = 1u << 20;

// Response header of a multi-key fetch asked with &refs=1: the body is in appendValueOrRef's encoding.
inline constexpr const char* kRefsHeader = "X-Hvd-Refs";

// Response header of rank_and_size answers: the round the answer belongs to.
inline constexpr const char* kRoundHeader = "X-Hvd-Round";

// What the server should do with a request: answer now, or park it until scope/key is stored (long
// poll) and then call handle() again, at most until wait_for has passed.
struct Outcome {
  Outcome() = default;
  Outcome(Response r) : response(std::move(r)) {}  // implicit: `return {response};` reads best

  std::optional<Response> response;
  std::string wait_scope;
  std::string wait_key;
  std::chrono::milliseconds wait_for{0};
  // Multi-key wait: keys before this index were present; pass it back to handle() after a wake-up so
  // the request does not rescan them (they stay counted even if deleted meanwhile, as in a client that
  // waits key by key).
  size_t wait_progress = 0;
  std::shared_ptr<const WaitSet> wait_set;  // multi-key wait: pass back to handle() with wait_progress
  // When set, the response's body: the Response holds the headers (Content-Length included) and an empty
  // body, and the server sends this buffer after them, shared by every waiter of a multi-key fetch.
  std::shared_ptr<const std::string> shared_body;
  // The response refuses the request because it carried no token (401, or 403 on a server that trusts
  // local peers); the server reports these (Server::onTokenlessRejection).
  bool token_missing = false;
};

// The whole protocol. peer: what the server learnt about the connection when it accepted it.
// wait_progress, wait_set: from the Outcome that parked this request. allow_wait=false turns a long poll
// into a plain GET (used when its time is up).
Outcome handle(const Request& request, KvState& state, const PeerInfo& peer, bool allow_wait = true,
               size_t wait_progress = 0, std::shared_ptr<const WaitSet> wait_set = nullptr);
// The same, but a PUT's body is moved into the store instead of copied (the server's sessions, which
// read a new request after answering): request.body() may be empty afterwards.
Outcome handleTakingBody(Request& request, KvState& state, const PeerInfo& peer, bool allow_wait = true,
                         size_t wait_progress = 0, std::shared_ptr<const WaitSet> wait_set = nullptr);
// The same for a connection the server knows nothing about (PeerInfo{}: not trusted).
inline Outcome handle(const Request& request, KvState& state, bool allow_wait = true,
                      size_t wait_progress = 0, std::shared_ptr<const WaitSet> wait_set = nullptr) {
  return handle(request, state, PeerInfo{}, allow_wait, wait_progress, std::move(wait_set));
}

// The limits the server puts on each request's parser: body <= max_value_bytes, request line and
// headers <= max_key_bytes + kHeaderAllowance.
inline constexpr size_t kHeaderAllowance = 8192;  // Host, Content-Length, the token, curl's or urllib's extras
void applyLimits(boost::beast::http::request_parser<boost::beast::http::string_body>& parser,
                 const ServerOptions& options);

// The answer to a request the parser rejected with ec: 413 (body too large), 431 (headers too large),
// 400 (malformed). nullopt when there is nobody to answer (end of stream, reset, cancelled).
std::optional<Response> parseErrorResponse(const boost::system::error_code& ec, const ServerOptions& options,
                                           unsigned version);

// A response for errors found before a request could be parsed (bad request line, body too large,
// read timeout); always closes the connection.
Response errorResponse(boost::beast::http::status status, const std::string& message, unsigned version = 11);

}  // namespace hvd::rendezvous
