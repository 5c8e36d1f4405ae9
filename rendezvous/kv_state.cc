#include "rendezvous/kv_state.h"

#include <algorithm>
#include <charconv>

#include "base/error.h"
#include "rendezvous/request_target.h"
#include "rendezvous/value_list.h"

namespace hvd::rendezvous {

namespace {

std::string fullKey(const std::string& scope, const std::string& key) { return scope + "/" + key; }

}  // namespace

std::optional<int> rankOfKey(std::string_view key) {
  if (key.substr(0, 5) == "rank_") key.remove_prefix(5);
  if (key.empty() || key.size() > 9) return std::nullopt;
  for (char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return static_cast<int>(*parseInt(key));
}

KvState::KvState(ServerOptions options) : options_(std::move(options)), monitor_(options_.job_name) {}

void KvState::setScopeSizes(const std::map<std::string, int>& sizes) {
  std::lock_guard<std::mutex> lock(mutex_);
  scopes_.clear();
  sizes_ = sizes;
  ever_joined_.clear();
}

std::vector<KvState::Waiter> KvState::takeWaiters(const std::string& full_key) {
  std::vector<Waiter> out;
  auto [first, last] = waiters_.equal_range(full_key);
  for (auto it = first; it != last; ++it) {
    waiter_keys_.erase(it->second.first);
    out.push_back(std::move(it->second.second));
  }
  waiters_.erase(first, last);
  return out;
}

void KvState::put(const std::string& scope, const std::string& key, std::string value) {
  std::vector<Waiter> wake;
  AllJoinedObserver all_joined;
  std::optional<std::pair<int, std::optional<uint64_t>>> joined_global;  // rank, round
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Scope& s = scopes_[scope];
    s.data[key] = std::move(value);
    changed(s);
    if (auto size = sizes_.find(scope); size != sizes_.end()) {
      if (auto rank = rankOfKey(key)) {
        auto& joined = ever_joined_[scope];
        const bool first_time = joined.insert(*rank).second;
        if (first_time && static_cast<int>(joined.size()) == size->second) all_joined = all_joined_;
        const auto round = roundOfScope(scope);
        if (first_time && scope.substr(round ? scope.find('.') + 1 : 0) == "global")
          joined_global = {*rank, round};
      }
    }
    if (!waiters_.empty()) wake = takeWaiters(fullKey(scope, key));
  }
  for (auto& waiter : wake) waiter();
  if (joined_global) monitor_.workerJoined(joined_global->first, joined_global->second);
  if (all_joined) all_joined(scope);
}

void KvState::onAllJoined(AllJoinedObserver observer) {
  std::lock_guard<std::mutex> lock(mutex_);
  all_joined_ = std::move(observer);
}

std::optional<std::string> KvState::get(const std::string& scope, const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto s = scopes_.find(scope);
  if (s == scopes_.end()) return std::nullopt;
  auto it = s->second.data.find(key);
  if (it == s->second.data.end()) return std::nullopt;
  return it->second;
}

size_t KvState::firstMissing(const std::string& scope, const std::vector<std::string>& keys,
                             const std::vector<uint32_t>& order, size_t from) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto s = scopes_.find(scope);
  if (s == scopes_.end()) return std::min(from, order.size());
  while (from < order.size() && s->second.data.count(keys[order[from]])) ++from;
  return from;
}

std::shared_ptr<const WaitSet> KvState::cachedWaitSet(const std::string& scope, std::string_view text,
                                                      bool numeric) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto s = scopes_.find(scope);
  if (s == scopes_.end()) return nullptr;
  for (const auto& set : s->second.wait_sets) {
    if (set->numeric == numeric && set->text == text) return set;
  }
  return nullptr;
}

void KvState::rememberWaitSet(const std::string& scope, std::shared_ptr<const WaitSet> set) {
  constexpr size_t kWaitSetsPerScope = 4;
  std::lock_guard<std::mutex> lock(mutex_);
  auto s = scopes_.find(scope);
  if (s == scopes_.end()) return;
  auto& sets = s->second.wait_sets;
  for (const auto& known : sets) {
    if (known->numeric == set->numeric && known->text == set->text) return;  // another request got here first
  }
  if (sets.size() == kWaitSetsPerScope) sets.erase(sets.begin());
  sets.push_back(std::move(set));
}

std::shared_ptr<const std::string> KvState::valuesBody(const std::string& scope, const WaitSet& set,
                                                       size_t& missing, std::optional<ValueRange> range) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto s = scopes_.find(scope);
  if (s == scopes_.end()) {
    missing = 0;
    if (!set.keys.empty()) return nullptr;
    return std::make_shared<const std::string>();
  }
  const uint64_t version = s->second.version;
  if (!range && set.body && set.body_version == version) return set.body;
  if (range) {
    for (const auto& answer : set.ranges) {
      if (answer.range == *range && answer.version == version) return answer.body;
    }
  }
  if (set.resolved_version != version || set.resolved.size() != set.keys.size()) {
    const auto& data = s->second.data;
    set.resolved.clear();
    set.resolved.reserve(set.keys.size());
    for (size_t i = 0; i < set.keys.size(); ++i) {
      auto it = data.find(set.keys[i]);
      if (it == data.end()) {
        set.resolved.clear();
        missing = i;
        return nullptr;
      }
      set.resolved.emplace_back(it->second);
    }
    set.resolved_version = version;
    set.longest = set.total_bytes = 0;
    for (const std::string_view value : set.resolved) {
      set.longest = std::max<uint64_t>(set.longest, value.size());
      set.total_bytes += value.size();
    }
  }
  std::shared_ptr<const std::string> shared;
  if (range && !range->repeats && range->length > 0 && range->length <= kBatchedSliceBytes &&
      range->offset < set.longest) {
    // A rank's column: the columns of its neighbours (slices of the same length whose offsets are equal
    // modulo it, up to kSliceWindow of them, those that start inside the longest value) are built in the
    // same pass and wait in set.batched until their ranks ask, once each (a value's slices for all of
    // them share a cache line or two, and with N values of N slices each, building columns one at a time
    // is N^2 cache misses). What waits is at most twice the values' bytes: a job's N columns of N
    // 3-byte entries are 1.5 times its N lists of 2-byte entries, and requests for other ranges cannot
    // make the server hold more.
    if (set.batched_version != version) {
      set.batched.clear();
      set.batched_bytes = 0;
      set.batched_version = version;
    }
    if (auto it = set.batched.find(range->offset);
        it != set.batched.end() && it->second.first == range->length) {
      shared = std::move(it->second.second);
      set.batched_bytes -= shared->size();
      set.batched.erase(it);
    } else {
      const uint64_t length = range->length;
      const uint64_t first = range->offset - ((range->offset / length) % kSliceWindow) * length;
      const size_t count =
          static_cast<size_t>(std::min<uint64_t>(kSliceWindow, (set.longest - first + length - 1) / length));
      auto answers = encodePackedWindow(set.resolved, first, length, count);
      const uint64_t budget = 2 * set.total_bytes;
      for (size_t i = 0; i < count; ++i) {
        const uint64_t offset = first + i * length;
        auto body = std::make_shared<const std::string>(std::move(answers[i]));
        if (offset == range->offset) {
          shared = std::move(body);
        } else if (set.batched_bytes + body->size() <= budget && !set.batched.count(offset)) {
          set.batched_bytes += body->size();
          set.batched.emplace(offset, std::make_pair(length, std::move(body)));
        }
      }
    }
  } else {
    const ValueRange whole{0, UINT64_MAX};
    shared = std::make_shared<const std::string>(range && range->repeats
                                                     ? encodeWithRefs(set.resolved, *range)
                                                     : encodePacked(set.resolved, range.value_or(whole)));
  }
  if (!range) {
    set.body = shared;
    set.body_version = version;
  } else {
    // Answers of older versions are of no use again; then the oldest range goes.
    auto& ranges = set.ranges;
    ranges.erase(
        std::remove_if(ranges.begin(), ranges.end(), [&](const auto& a) { return a.version != version; }),
        ranges.end());
    if (ranges.size() >= kRangeAnswersPerKeyList) ranges.erase(ranges.begin());
    ranges.push_back({*range, version, shared});
  }
  return shared;
}

std::optional<int64_t> KvState::add(const std::string& scope, const std::string& key, int64_t delta) {
  std::vector<Waiter> wake;
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Scope& s = scopes_[scope];
    auto& stored = s.data[key];
    if (!stored.empty()) {
      auto current = parseInt(stored);
      if (!current) return std::nullopt;
      value = *current;
    }
    value += delta;
    stored = std::to_string(value);
    changed(s);
    if (!waiters_.empty()) wake = takeWaiters(fullKey(scope, key));
  }
  for (auto& waiter : wake) waiter();
  return value;
}

void KvState::finalize(const std::string& scope, const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto size = sizes_.find(scope);
  if (size != sizes_.end()) {
    auto& s = scopes_[scope];
    // A set, not Horovod's list: a rank that finalizes twice must not count as two ranks.
    s.finished.insert(key);
    if (static_cast<int>(s.finished.size()) >= size->second) scopes_.erase(scope);
    return;
  }
  auto s = scopes_.find(scope);
  if (s == scopes_.end()) return;
  if (s->second.data.erase(key)) changed(s->second);
  if (s->second.data.empty() && s->second.finished.empty()) scopes_.erase(s);
}

std::optional<uint64_t> KvState::addWaiter(const std::string& scope, const std::string& key, Waiter waiter) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto s = scopes_.find(scope);
  if (s != scopes_.end() && s->second.data.count(key)) return std::nullopt;
  const uint64_t id = next_waiter_++;
  std::string full = fullKey(scope, key);
  waiter_keys_.emplace(id, full);
  waiters_.emplace(std::move(full), std::make_pair(id, std::move(waiter)));
  return id;
}

void KvState::cancelWaiter(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto k = waiter_keys_.find(id);
  if (k == waiter_keys_.end()) return;  // already woken
  auto [first, last] = waiters_.equal_range(k->second);
  for (auto it = first; it != last; ++it) {
    if (it->second.first == id) {
      waiters_.erase(it);
      break;
    }
  }
  waiter_keys_.erase(k);
}

std::map<std::string, ScopeStatus> KvState::scopes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, ScopeStatus> out;
  for (const auto& [name, size] : sizes_) out[name].size = size;
  for (const auto& [name, ranks] : ever_joined_)
    out[name].ever_joined_ranks.assign(ranks.begin(), ranks.end());
  for (const auto& [name, scope] : scopes_) {
    auto& status = out[name];
    std::set<int> joined;
    for (const auto& [key, value] : scope.data) {
      status.keys.push_back(key);
      if (auto rank = rankOfKey(key)) joined.insert(*rank);
    }
    status.joined_ranks.assign(joined.begin(), joined.end());
    std::set<int> finished;
    for (const auto& key : scope.finished) {
      if (auto rank = rankOfKey(key)) finished.insert(*rank);
    }
    status.finished_ranks.assign(finished.begin(), finished.end());
  }
  return out;
}

std::string roundScope(uint64_t round, const std::string& scope) {
  return "r" + std::to_string(round) + "." + scope;
}

std::optional<uint64_t> roundOfScope(const std::string& scope) {
  if (scope.size() < 3 || scope[0] != 'r') return std::nullopt;
  const auto dot = scope.find('.');
  if (dot == std::string::npos || dot == 1 || dot > 20) return std::nullopt;
  uint64_t round = 0;
  const auto [end, ec] = std::from_chars(scope.data() + 1, scope.data() + dot, round);
  if (ec != std::errc() || end != scope.data() + dot) return std::nullopt;
  return round;
}

namespace {
constexpr const char* kElasticScope = "__hvd_elastic";  // holds "round_<N>" once round N has begun
std::string roundKey(uint64_t round) { return "round_" + std::to_string(round); }
}  // namespace

void KvState::beginRound(ElasticRound round) {
  std::vector<Waiter> wake;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    HVD_CHECK(!round_ || round.number == round_->number + 1, StoreError, "elastic round ", round.number,
              " does not follow round ", round_ ? round_->number : 0);
    // Every key goes, but the marks of the rounds begun so far stay: a request that parks on a round's
    // mark after the round began must find it.
    Scope marks = std::move(scopes_[kElasticScope]);
    scopes_.clear();
    scopes_[kElasticScope] = std::move(marks);
    sizes_ = round.scope_sizes;
    ever_joined_.clear();
    const std::string key = roundKey(round.number);
    scopes_[kElasticScope].data[key] = std::to_string(round.number);
    changed(scopes_[kElasticScope]);  // answers built from the old data must not be reused
    round_changes_[round.number] = round.changes;
    round_ = std::move(round);
    if (!waiters_.empty()) wake = takeWaiters(fullKey(kElasticScope, key));
  }
  for (auto& waiter : wake) waiter();
}

void KvState::markStarted(const std::string& slot, uint64_t round) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_round_[slot] = round;
}

KvState::RoundAnswer KvState::askRound(const std::string& slot, std::optional<uint64_t> after) {
  RoundAnswer answer;
  RoundRequestObserver observer;
  uint64_t waits_after = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!round_) return answer;
    answer.elastic = true;
    answer.round = round_->number;
    auto last = last_round_.find(slot);
    if (!after && last != last_round_.end()) after = last->second;
    if (after && *after >= round_->number) {
      observer = round_requests_;
      waits_after = *after;
      answer.wait_scope = kElasticScope;
      answer.wait_key = roundKey(*after + 1);
    } else {
      answer.ready = true;
      if (auto it = round_->slots.find(slot); it != round_->slots.end()) answer.slot = it->second;
      last_round_[slot] = round_->number;
    }
  }
  if (observer) observer(slot, waits_after);
  return answer;
}

std::optional<uint64_t> KvState::currentRound() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!round_) return std::nullopt;
  return round_->number;
}

std::optional<uint64_t> KvState::lastRound(const std::string& slot) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = last_round_.find(slot);
  if (it == last_round_.end()) return std::nullopt;
  return it->second;
}

std::optional<RoundNews> KvState::roundNews(uint64_t since) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!round_) return std::nullopt;
  RoundNews news{std::max(since, round_->number), 0};
  for (auto it = round_changes_.upper_bound(since); it != round_changes_.end(); ++it)
    news.changes |= it->second;
  return news;
}

void KvState::onRoundRequest(RoundRequestObserver observer) {
  std::lock_guard<std::mutex> lock(mutex_);
  round_requests_ = std::move(observer);
}

nlohmann::json KvState::status() const {
  nlohmann::json scopes = nlohmann::json::object();
  for (const auto& [name, s] : this->scopes()) {
    scopes[name] = {{"size", s.size},
                    {"keys", s.keys},
                    {"joined_ranks", s.joined_ranks},
                    {"finished_ranks", s.finished_ranks}};
  }
  size_t waiting = 0;
  nlohmann::json elastic = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    waiting = waiters_.size();
    if (round_) {
      nlohmann::json members = nlohmann::json::object();
      for (const auto& [slot, a] : round_->slots) {
        members[slot] = {{"rank", a.rank},           {"size", a.size},
                         {"local_rank", a.local_rank}, {"local_size", a.local_size},
                         {"cross_rank", a.cross_rank}, {"cross_size", a.cross_size}};
      }
      elastic = {{"round", round_->number},
                 {"changes", round_->changes},
                 {"members", std::move(members)},
                 {"blacklist", round_->blacklist}};
    }
  }
  const double uptime = std::chrono::duration<double>(Clock::now() - started_).count();
  return {{"uptime_s", uptime},
          {"connections", connections_.load()},
          {"long_polls_waiting", waiting},
          {"token_required", options_.token.has_value()},
          {"local_peers_trusted", options_.token.has_value() && options_.trust_local_peers},
          {"scopes", std::move(scopes)},
          {"elastic", std::move(elastic)}};
}

}  // namespace hvd::rendezvous
