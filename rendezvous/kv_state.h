// The rendezvous server's state (handler.h serves it): the key-value data of every scope, the sizes of
// the scopes that count finalizes, the long-poll waiters, the key lists and answers of multi-key fetches
// (cached per scope version), the elastic rounds and the job's Monitor.
//
// Threading: safe to use from any number of threads (one mutex). Waiters and observers are called with no
// lock held, from the thread whose call caused them. Errors: beginRound throws StoreError for a round out
// of sequence; every other call reports what it cannot do in its result (nullopt, nullptr).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/job_monitor.h"
#include "rendezvous/round.h"
#include "rendezvous/server.h"
#include "rendezvous/store.h"

namespace hvd::rendezvous {

// How many sliced answers one key list keeps (per rank ranges come and go; each is cheap to rebuild).
inline constexpr size_t kRangeAnswersPerKeyList = 4;

struct WaitSet;

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
  std::shared_ptr<const WaitSet> cachedWaitSet(const std::string& scope, std::string_view text,
                                               bool numeric) const;
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

  // The job's live view (base/job_monitor.h): reports from workers, ranks joining, request counters.
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

// Rank of a Gloo rendezvous key: "<r>" or "rank_<r>" -> r; otherwise nullopt.
std::optional<int> rankOfKey(std::string_view key);

}  // namespace hvd::rendezvous
