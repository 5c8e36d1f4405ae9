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
//   PUT    /_hvd/report/<rank>        a worker's RankReport (JSON, monitor.h) for the status port; 200, or 400
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
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "rendezvous/store.h"

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>

#include "rendezvous/monitor.h"
#include "rendezvous/server.h"

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

// Slices of at most kBatchedSliceBytes (a rank's column of every peer's address list) are answered in
// windows of kSliceWindow neighbouring slices, built in one pass (KvState::valuesBody).
inline constexpr uint64_t kBatchedSliceBytes = 8;
inline constexpr size_t kSliceWindow = 64;

// How many sliced answers one key list keeps (per rank ranges come and go; each is cheap to rebuild).
inline constexpr size_t kRangeAnswersPerKeyList = 4;

// The body of a multi-key fetch: each value as its length (unsigned LEB128, 1 byte below 128) and its
// bytes. splitValues returns the values (views into body), or nullopt when body is not such a sequence.
void appendValue(std::string& out, std::string_view value);
// With &refs=1 (ValueRange::repeats) a value is either LEB128(length << 1) and its bytes, or
// LEB128((back - 1) << 1 | 1): the same bytes as the value `back` places earlier (back >= 1).
void appendValueOrRef(std::string& out, std::string_view value, std::optional<uint32_t> back);
// refs: body is in appendValueOrRef's encoding (a reference to a later or absent value is malformed).
std::optional<std::vector<std::string_view>> splitValues(std::string_view body, bool refs = false);

struct WaitSet;

// Response header of rank_and_size answers: the round the answer belongs to.
inline constexpr const char* kRoundHeader = "X-Hvd-Round";

// The key-value data, the scope sizes and the long-poll waiters.
class KvState {
 public:
  using Clock = std::chrono::steady_clock;

  explicit KvState(ServerOptions options);

  const ServerOptions& options() const { return options_; }

  // Clears all data and sets the sizes of the scopes that count finalizes (Horovod's init()).
  void setScopeSizes(const std::map<std::string, int>& sizes);

  void put(const std::string& scope, const std::string& key, std::string value);
  std::optional<std::string> get(const std::string& scope, const std::string& key) const;
  // Multi-key fetch (values=1): the key list of an earlier request to this scope with exactly this body,
  // or nullptr. rememberWaitSet keeps a few per scope (only of a scope that exists; they go with it), so
  // the N identical requests of a rendezvous are parsed once and share one answer.
  // numeric: text is keys=FIRST,COUNT's "FIRST,COUNT" rather than a body.
  std::shared_ptr<const WaitSet> cachedWaitSet(const std::string& scope, std::string_view text, bool numeric) const;
  void rememberWaitSet(const std::string& scope, std::shared_ptr<const WaitSet> set);
  // The answer to a multi-key fetch of set's keys (values, or their slices `range`, in the order of
  // set.keys, appendValue's encoding), built once per version of the scope (any change to one of its keys
  // makes a new version) and kept in set (at most kRangeAnswersPerKeyList ranges, the oldest dropped).
  // nullptr when a key is absent; *missing is then its index in set.keys.
  std::shared_ptr<const std::string> valuesBody(const std::string& scope, const WaitSet& set, size_t& missing,
                                                std::optional<ValueRange> range = std::nullopt);
  // The first i >= from (in the given order of key indices) whose key is absent from scope, or
  // order.size() when all are present.
  size_t firstMissing(const std::string& scope, const std::vector<std::string>& keys,
                      const std::vector<uint32_t>& order, size_t from) const;
  // Adds delta to the decimal integer at scope/key (absent = 0). nullopt when the stored value is not
  // an integer (the value is left unchanged).
  std::optional<int64_t> add(const std::string& scope, const std::string& key, int64_t delta);
  // DELETE semantics. Scope with a size: records key as finished; when every member has finished,
  // clears that scope's data and its finished list (and only its own: Horovod wipes every scope's list,
  // which strands partially finished local_/cross_ scopes). Other (ad-hoc) scopes: deletes the key and
  // the scope when it becomes empty.
  void finalize(const std::string& scope, const std::string& key);

  // Long poll. A waiter is called (from the thread that stored the key, with no lock held) once when
  // scope/key is next stored. Returns an id for cancelWaiter, or nullopt when the key is already
  // present (checked under the same lock, so no wake-up is lost).
  using Waiter = std::function<void()>;
  std::optional<uint64_t> addWaiter(const std::string& scope, const std::string& key, Waiter waiter);
  void cancelWaiter(uint64_t id);

  // Elastic jobs. beginRound: every key is dropped (Horovod's init() does the same), the round's scope
  // sizes are set, and rank_and_size requests waiting for this round are answered. The first round may
  // have any number; each later one is the previous number + 1 (StoreError otherwise).
  void beginRound(ElasticRound round);
  // The driver started the process of `slot` ("host:local_rank") in `round`: its first init reads its
  // place from its environment, so its next rank_and_size request is for a later round.
  void markStarted(const std::string& slot, uint64_t round);
  struct RoundAnswer {
    bool elastic = false;  // a round has begun: this is an elastic job
    bool ready = false;    // the answer is below; else wait until wait_scope/wait_key is stored
    uint64_t round = 0;
    SlotAssignment slot;
    std::string wait_scope, wait_key;  // stored when the round asked for begins (and kept from then on)
  };
  // The place of `slot` in the first round after `after` (absent: after the last one it was started in or
  // answered). A ready answer counts as answered.
  RoundAnswer askRound(const std::string& slot, std::optional<uint64_t> after);
  // The current round; nullopt before the first.
  std::optional<uint64_t> currentRound() const;
  // The last round `slot` was started in or answered (it re-initialized into it); nullopt when neither.
  std::optional<uint64_t> lastRound(const std::string& slot) const;
  // The rounds begun after `since` (RoundNews); nullopt before the first round (not an elastic job).
  std::optional<RoundNews> roundNews(uint64_t since) const;
  // Called (no lock held) for every rank_and_size request that has to wait: the driver learns which slots
  // are waiting for a new round.
  using RoundRequestObserver = std::function<void(const std::string& slot, uint64_t after)>;
  void onRoundRequest(RoundRequestObserver observer);

  std::map<std::string, ScopeStatus> scopes() const;
  nlohmann::json status() const;

  // Called once per sized scope, from the thread that stored the key and with no lock held, when the
  // last of its ranks joins for the first time since setScopeSizes() (hvdrun's "all ranks joined").
  using AllJoinedObserver = std::function<void(const std::string& scope)>;
  void onAllJoined(AllJoinedObserver observer);

  // The job's live view (monitor.h): reports from workers, ranks joining, request counters.
  Monitor& monitor() { return monitor_; }

  // Connection and request counters, shown in status().
  void connectionOpened() { ++connections_; }
  void connectionClosed() { --connections_; }
  size_t connections() const { return connections_; }

 private:
  struct Scope {
    std::map<std::string, std::string> data;
    std::set<std::string> finished;
    uint64_t version = 0;  // KvState::next_version_ at the last change to data
    std::vector<std::shared_ptr<const WaitSet>> wait_sets;  // of multi-key fetches, oldest first
  };
  void changed(Scope& scope) { scope.version = ++next_version_; }  // requires mutex_
  std::vector<Waiter> takeWaiters(const std::string& full_key);  // requires mutex_

  const ServerOptions options_;
  const Clock::time_point started_ = Clock::now();
  mutable std::mutex mutex_;
  std::map<std::string, Scope> scopes_;
  std::map<std::string, int> sizes_;
  // Ranks that have joined each sized scope since setScopeSizes(); survives the scope's completion.
  std::map<std::string, std::set<int>> ever_joined_;
  AllJoinedObserver all_joined_;
  uint64_t next_waiter_ = 1;
  uint64_t next_version_ = 0;
  std::multimap<std::string, std::pair<uint64_t, Waiter>> waiters_;  // "scope/key" -> waiters
  std::map<uint64_t, std::string> waiter_keys_;                       // id -> "scope/key"
  std::atomic<size_t> connections_{0};
  std::optional<ElasticRound> round_;
  std::map<std::string, uint64_t> last_round_;  // slot -> the last round it was started in or answered
  std::map<uint64_t, unsigned> round_changes_;  // round -> ElasticRound::changes
  RoundRequestObserver round_requests_;
  Monitor monitor_;
};

// The keys of a multi-key wait, parsed once per request and kept across wake-ups. They are checked in a
// random order: waiters then park on different keys, so one PUT wakes few of them (about ln N wake-ups
// per waiter whatever order the keys arrive in; a fixed order makes every PUT wake every waiter).
struct WaitSet {
  std::vector<std::string> keys;  // as sent
  std::vector<uint32_t> order;    // a random permutation of key indices
  // Multi-key fetches (values=1) only, where one WaitSet serves every request with the same body:
  std::string text;                         // that body, or keys=FIRST,COUNT's "FIRST,COUNT"
  bool numeric = false;                     // the keys came as keys=FIRST,COUNT
  mutable std::atomic<size_t> present{0};   // the keys before this index (in `order`) were all present
  mutable uint64_t body_version = 0;        // guarded by KvState's mutex: the answer and the scope version
  mutable std::shared_ptr<const std::string> body;  // it was built from
  struct RangeAnswer {
    ValueRange range;
    uint64_t version = 0;
    std::shared_ptr<const std::string> body;
  };
  mutable std::vector<RangeAnswer> ranges;  // guarded by KvState's mutex; oldest first
  // Guarded by KvState's mutex: the values of keys at scope version `resolved_version` (map nodes are
  // stable until the scope changes), so that N answers of N slices do not look up N keys each.
  mutable uint64_t resolved_version = 0;
  mutable std::vector<std::string_view> resolved;
  // Guarded by KvState's mutex: answers of small slices built alongside one that was asked for, by
  // offset (with their length), until asked for themselves (then removed); of scope version
  // batched_version only.
  mutable uint64_t batched_version = 0;
  mutable std::unordered_map<uint64_t, std::pair<uint64_t, std::shared_ptr<const std::string>>> batched;
  mutable uint64_t batched_bytes = 0;        // of the answers in batched
  mutable uint64_t longest = 0, total_bytes = 0;  // of the resolved values
};

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

// Decodes %XX escapes; nullopt for a malformed escape. Exposed for the client's tests.
std::optional<std::string> percentDecode(std::string_view text);
// Escapes every byte outside [A-Za-z0-9_.:~-] as %XX (so '/' in a key survives a path segment).
std::string percentEncode(std::string_view text);

// Rank of a Gloo rendezvous key: "<r>" or "rank_<r>" -> r; otherwise nullopt.
std::optional<int> rankOfKey(std::string_view key);

}  // namespace hvd::rendezvous
