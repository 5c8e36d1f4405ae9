#include "rendezvous/handler.h"

#include <algorithm>
#include <charconv>
#include <numeric>
#include <random>
#include <unordered_map>
#include <cstdint>
#include <cstring>
#include <variant>

#include <boost/beast/http/error.hpp>

#include "base/error.h"
#include "rendezvous/token.h"

namespace hvd::rendezvous {

namespace http = boost::beast::http;

namespace {

std::string fullKey(const std::string& scope, const std::string& key) { return scope + "/" + key; }

std::optional<int64_t> parseInt(std::string_view text) {
  int64_t value = 0;
  if (text.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

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

// A parsed "/<scope>/<key>[?query]" target.
struct Target {
  std::string scope;
  std::string key;
  std::map<std::string, std::string> query;
};

// Returns the target, or an error message for a 400.
std::variant<Target, std::string> parseTarget(std::string_view target) {
  if (target.empty() || target[0] != '/') return std::string("request target must start with '/'");
  std::string_view path = target;
  std::string_view query;
  if (auto q = target.find('?'); q != std::string_view::npos) {
    path = target.substr(0, q);
    query = target.substr(q + 1);
  }
  path.remove_prefix(1);
  const auto slash = path.find('/');
  if (slash == std::string_view::npos) return std::string("path must be /<scope>/<key>");
  if (path.find('/', slash + 1) != std::string_view::npos) {
    return std::string("path must be /<scope>/<key>, with exactly two segments (escape '/' in a key as %2F)");
  }
  Target out;
  auto scope = percentDecode(path.substr(0, slash));
  auto key = percentDecode(path.substr(slash + 1));
  if (!scope || !key) return std::string("malformed %-escape in path");
  if (scope->empty() || key->empty()) return std::string("scope and key must not be empty");
  out.scope = std::move(*scope);
  out.key = std::move(*key);
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string_view::npos) return "query parameter '" + std::string(item) + "' has no value";
    out.query.emplace(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
  }
  return out;
}

}  // namespace

std::optional<std::string> percentDecode(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int hi = hex(text[i + 1]);
    const int lo = hex(text[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

std::string percentEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
        c == ':' || c == '~' || c == '-') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::optional<int> rankOfKey(std::string_view key) {
  if (key.substr(0, 5) == "rank_") key.remove_prefix(5);
  if (key.empty() || key.size() > 9) return std::nullopt;
  for (char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return static_cast<int>(*parseInt(key));
}


namespace {

// Unsigned LEB128: 7 bits a byte, low first, the high bit set on all but the last.
size_t leb128Bytes(uint64_t n) {
  size_t k = 1;
  while (n >>= 7) ++k;
  return k;
}

char* putLeb128(char* out, uint64_t n) {
  do {
    const auto low = static_cast<unsigned char>(n & 0x7f);
    n >>= 7;
    *out++ = static_cast<char>(n ? (low | 0x80) : low);
  } while (n);
  return out;
}

void appendLeb128(std::string& out, uint64_t n) {
  char bytes[10];
  out.append(bytes, putLeb128(bytes, n));
}

std::optional<uint64_t> readLeb128(std::string_view body, size_t& at) {
  uint64_t n = 0;
  for (int shift = 0;; shift += 7) {
    if (at == body.size() || shift > 56) return std::nullopt;
    const auto byte = static_cast<unsigned char>(body[at++]);
    n |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return n;
  }
}

}  // namespace

void appendValue(std::string& out, std::string_view value) {
  appendLeb128(out, value.size());
  out.append(value);
}

void appendValueOrRef(std::string& out, std::string_view value, std::optional<uint32_t> back) {
  if (back) {
    HVD_INTERNAL_ASSERT(*back >= 1, "a value cannot refer to itself");
    appendLeb128(out, (uint64_t{*back - 1} << 1) | 1);
  } else {
    appendLeb128(out, uint64_t{value.size()} << 1);
    out.append(value);
  }
}

std::optional<std::vector<std::string_view>> splitValues(std::string_view body, bool refs) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at < body.size()) {
    auto n = readLeb128(body, at);
    if (!n) return std::nullopt;
    if (refs && (*n & 1)) {
      const uint64_t back = (*n >> 1) + 1;
      if (back > out.size()) return std::nullopt;  // only an earlier value can be referred to
      out.push_back(out[out.size() - back]);
      continue;
    }
    if (refs) *n >>= 1;
    if (*n > body.size() - at) return std::nullopt;
    out.push_back(body.substr(at, *n));
    at += *n;
  }
  return out;
}

// ---- KvState ----

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
        if (first_time && scope.substr(round ? scope.find('.') + 1 : 0) == "global") joined_global = {*rank, round};
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

namespace {

// A multi-key answer in appendValue's encoding, sized exactly and filled in place: a column answer is N
// slices of a few bytes each, where a call to append() per slice would cost more than the bytes.
std::string encodePacked(const std::vector<std::string_view>& values, ValueRange range) {
  size_t bytes = 0;
  for (const std::string_view value : values) {
    const size_t size = range.of(value).size();
    bytes += leb128Bytes(size) + size;
  }
  std::string body(bytes, '\0');
  char* out = body.data();
  for (const std::string_view value : values) {
    const std::string_view part = range.of(value);
    out = putLeb128(out, part.size());
    if (part.size() <= 8) {
      for (const char c : part) *out++ = c;
    } else {
      std::memcpy(out, part.data(), part.size());
      out += part.size();
    }
  }
  HVD_INTERNAL_ASSERT(out == body.data() + body.size(), "values answer of ", body.size(), " bytes filled to ",
                      out - body.data());
  return body;
}

// The answers for `count` slices of `length` bytes at first, first + length, ... (appendValue's encoding,
// each value's slice clipped to its end), built in one pass over the values: the slices of one value lie
// side by side, so a value costs one or two cache misses for all of them instead of one per answer.
std::vector<std::string> encodePackedWindow(const std::vector<std::string_view>& values, uint64_t first,
                                            uint64_t length, size_t count) {
  static_assert(kBatchedSliceBytes < 128, "a slice's length must be one LEB128 byte");
  const auto slice = [&](std::string_view value, size_t i) { return ValueRange{first + i * length, length}.of(value); };
  std::vector<size_t> bytes(count, 0);
  for (const std::string_view value : values) {
    for (size_t i = 0; i < count; ++i) bytes[i] += 1 + slice(value, i).size();
  }
  std::vector<std::string> answers(count);
  std::vector<char*> out(count);
  for (size_t i = 0; i < count; ++i) {
    answers[i].assign(bytes[i], '\0');
    out[i] = answers[i].data();
  }
  for (const std::string_view value : values) {
    for (size_t i = 0; i < count; ++i) {
      const std::string_view part = slice(value, i);
      *out[i]++ = static_cast<char>(part.size());
      for (const char c : part) *out[i]++ = c;
    }
  }
  for (size_t i = 0; i < count; ++i) {
    HVD_INTERNAL_ASSERT(out[i] == answers[i].data() + answers[i].size(), "windowed answer ", i, " of ",
                        answers[i].size(), " bytes filled to ", out[i] - answers[i].data());
  }
  return answers;
}

// The same in appendValueOrRef's encoding: each distinct slice once, the others as the distance back to
// its nearest occurrence (1 for consecutive ranks of one host: one byte).
std::string encodeWithRefs(const std::vector<std::string_view>& values, ValueRange range) {
  std::string body;
  std::unordered_map<std::string_view, uint32_t> last;  // where each distinct slice was last seen
  last.reserve(values.size());
  for (uint32_t i = 0; i < values.size(); ++i) {
    const auto [at, added] = last.emplace(range.of(values[i]), i);
    appendValueOrRef(body, at->first, added ? std::nullopt : std::optional<uint32_t>(i - at->second));
    at->second = i;
  }
  return body;
}

}  // namespace

std::shared_ptr<const std::string> KvState::valuesBody(const std::string& scope, const WaitSet& set, size_t& missing,
                                                      std::optional<ValueRange> range) {
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
    if (auto it = set.batched.find(range->offset); it != set.batched.end() && it->second.first == range->length) {
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
    shared = std::make_shared<const std::string>(range && range->repeats ? encodeWithRefs(set.resolved, *range)
                                                                         : encodePacked(set.resolved, range.value_or(whole)));
  }
  if (!range) {
    set.body = shared;
    set.body_version = version;
  } else {
    // Answers of older versions are of no use again; then the oldest range goes.
    auto& ranges = set.ranges;
    ranges.erase(std::remove_if(ranges.begin(), ranges.end(), [&](const auto& a) { return a.version != version; }),
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
  for (const auto& [name, ranks] : ever_joined_) out[name].ever_joined_ranks.assign(ranks.begin(), ranks.end());
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
  for (auto it = round_changes_.upper_bound(since); it != round_changes_.end(); ++it) news.changes |= it->second;
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

// ---- handle ----

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
Outcome handleRankAndSize(const Request& req, KvState& state, Target& t, bool allow_wait) {
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
Outcome handleRoundNews(const Request& req, const KvState& state, const Target& t) {
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
  Target& t = std::get<Target>(parsed);
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
