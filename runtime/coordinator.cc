#include "runtime/coordinator.h"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace hvd::runtime {

std::string formatRanks(const std::vector<int>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i + 1) {
      out += "-" + std::to_string(ranks[j]);
    } else if (j == i + 1) {
      out += ", " + std::to_string(ranks[j]);
    }
    i = j + 1;
  }
  return out + "]";
}

Coordinator::Coordinator(CoordinatorOptions options)
    : options_(options), waiting_(static_cast<size_t>(std::max(options.size, 0))) {
  std::vector<int> all(static_cast<size_t>(options_.size));
  std::iota(all.begin(), all.end(), 0);
  sets_[0] = std::move(all);
}

void Coordinator::addStaticSet(int32_t id, std::vector<int> ranks) {
  sets_[id] = std::move(ranks);
  next_set_id_ = std::max(next_set_id_, id + 1);
}

const std::vector<int>& Coordinator::members(int32_t id) const {
  static const std::vector<int> kNone;
  auto it = sets_.find(id);
  return it == sets_.end() ? kNone : it->second;
}

void Coordinator::add(int rank, const Request& request, Clock::time_point now) {
  HVD_INTERNAL_ASSERT(rank >= 0 && rank < options_.size, "request from rank ", rank);
  last_add_ = now;
  if (request.type == OpType::kJoin) {
    if (joined_.empty()) {
      join_since_ = now;
      join_warned_ = false;
    }
    // Names waiting only for this rank are ready now, with the joined ranks' zeros: the general path's work.
    demoteHits(now, Clock::duration::zero());
    joined_.insert(rank);
    last_joined_ = rank;
    for (auto& [key, p] : pending_) markReadyIfComplete(key, p);
    if (static_cast<int>(joined_.size()) == options_.size) {
      if (ready_.empty()) ready_since_ = now;
      ready_.push_back({0, {0, ""}});  // "" = the join itself
    }
    return;
  }
  uint32_t id = 0;
  if (const auto c = cache_ids_.find(SetNameView(request.process_set, request.name)); c != cache_ids_.end()) {
    id = c->second;
    const auto& d = cache_[id - 1].descriptors;
    const std::optional<Request>* cached = d.size() == 1 ? &d[0] : &d[static_cast<size_t>(rank)];
    if (mayHit(id) && *cached && sameDescriptor(**cached, request)) return hit(rank, id, now);
    // Submitted changed: the others' hits stand for their requests again, to be validated with this one.
    if (cache_[id - 1].hits > 0) demote(id, now);
  }
  addPending(rank, {request.process_set, request.name}, id, request, now, now);
}

void Coordinator::addPending(int rank, Key key, uint32_t id, const Request& request, Clock::time_point now,
                             Clock::time_point first_seen) {
  last_add_ = now;
  auto [it, inserted] = pending_.try_emplace(std::move(key));
  Pending& p = it->second;
  if (inserted) {
    p.by_rank.resize(options_.size);
    p.first_seen = first_seen;
    if (id) cache_[id - 1].in_pending = true;
  }
  HVD_INTERNAL_ASSERT(!p.by_rank[rank], "rank ", rank, " reported '", request.name, "' twice");
  p.by_rank[rank] = request;
  p.by_rank[rank]->input = nullptr;
  p.by_rank[rank]->output = nullptr;
  ++p.reported;
  markReadyIfComplete(it->first, p);
}

void Coordinator::addCached(int rank, uint32_t id, Clock::time_point now) {
  const Request& request = cachedRequest(id, rank);  // checks id and rank
  if (mayHit(id)) return hit(rank, id, now);
  const Cached& c = cache_[id - 1];
  if (c.hits > 0) demote(id, now);  // counted before its process set was removed
  addPending(rank, c.key, id, request, now, now);
}

bool Coordinator::mayHit(uint32_t id) const {
  const Cached& c = cache_[id - 1];
  // An unknown (removed) set is answered by validate()'s error on the general path.
  return options_.count_hits && c.may_hit && !c.in_pending && joined_.empty() &&
         (c.key.first == 0 || sets_.count(c.key.first));
}

void Coordinator::hit(int rank, uint32_t id, Clock::time_point now) {
  Cached& c = cache_[id - 1];
  HVD_INTERNAL_ASSERT(!c.hit_by[static_cast<size_t>(rank)], "rank ", rank, " reported '", c.key.second,
                      "' twice");
  last_add_ = now;
  if (c.hits == 0) {
    c.first_hit = now;
    c.hit_slot = hit_ids_.size();
    hit_ids_.push_back(id);
  }
  c.hit_by[static_cast<size_t>(rank)] = 1;
  if (++c.hits < static_cast<int>(members(c.key.first).size())) return;
  forgetHits(id);
  if (ready_.empty()) ready_since_ = now;
  ready_.push_back({id, {}});
}

void Coordinator::demote(uint32_t id, Clock::time_point now) {
  Cached& c = cache_[id - 1];
  std::vector<int> ranks;
  for (size_t r = 0; r < c.hit_by.size(); ++r) {
    if (c.hit_by[r]) ranks.push_back(static_cast<int>(r));
  }
  forgetHits(id);
  for (int r : ranks) addPending(r, c.key, id, cachedRequest(id, r), now, c.first_hit);
}

void Coordinator::forgetHits(uint32_t id) {
  Cached& c = cache_[id - 1];
  std::fill(c.hit_by.begin(), c.hit_by.end(), 0);
  c.hits = 0;
  // The last id takes this one's place: O(1), however many names are partly hit.
  const uint32_t last = hit_ids_.back();
  hit_ids_[c.hit_slot] = last;
  cache_[last - 1].hit_slot = c.hit_slot;
  hit_ids_.pop_back();
}

void Coordinator::demoteHits(Clock::time_point now, Clock::duration min_age) {
  for (size_t i = 0; i < hit_ids_.size();) {
    const uint32_t id = hit_ids_[i];
    if (now - cache_[id - 1].first_hit >= min_age) {
      demote(id, now);  // the last id takes slot i
    } else {
      ++i;
    }
  }
}

Coordinator::Clock::duration Coordinator::hitsAge() const {
  Clock::duration age = kHitsAge;
  if (options_.stall_check) age = std::min<Clock::duration>(age, options_.stall_warning_time);
  return age;
}

void Coordinator::erasePending(std::map<Key, Pending>::iterator it) {
  if (const auto c = cache_ids_.find(it->first); c != cache_ids_.end())
    cache_[c->second - 1].in_pending = false;
  pending_.erase(it);
}

const Request& Coordinator::cachedRequest(uint32_t id, int rank) const {
  HVD_CHECK(id >= 1 && id <= cache_.size(), BackendError, "unknown response cache id ", id, " (", cache_.size(),
            " cached)");
  const auto& d = cache_[id - 1].descriptors;
  const std::optional<Request>* q = nullptr;
  if (d.size() == 1) {
    q = &d[0];
  } else if (rank >= 0 && static_cast<size_t>(rank) < d.size()) {
    q = &d[static_cast<size_t>(rank)];
  }
  HVD_CHECK(q && *q, BackendError, "response cache id ", id, " has no descriptor of rank ", rank);
  return **q;
}

void Coordinator::markReadyIfComplete(const Key& key, Pending& p) {
  if (p.queued) return;
  const auto& ranks = members(key.first);
  // An unknown set is ready as soon as one rank asked: validate() answers with the error.
  if (!ranks.empty()) {
    for (int r : ranks) {
      if (!p.by_rank[r] && (key.first != 0 || !joined_.count(r))) return;
    }
  }
  p.queued = true;
  const Request* first = nullptr;
  for (const auto& q : p.by_rank) {
    if (q) {
      first = &*q;
      break;
    }
  }
  if (first && !first->group.empty() && first->group_size > 1) {
    // A group member: the group becomes ready when its last member does.
    Group& g = groups_[{key.first, first->group}];
    g.size = first->group_size;
    g.complete.push_back(key);
    if (static_cast<int32_t>(g.complete.size()) < g.size) return;
    if (ready_.empty()) ready_since_ = last_add_;
    for (auto& k : g.complete) ready_.push_back({0, std::move(k)});
    groups_.erase({key.first, first->group});
    return;
  }
  if (ready_.empty()) ready_since_ = last_add_;
  ready_.push_back({0, key});
}

std::optional<Coordinator::Clock::time_point> Coordinator::holdUntil(Clock::time_point now,
                                                                     std::chrono::microseconds window) const {
  if (ready_.empty() || shutdown_reason_ || window.count() <= 0) return std::nullopt;
  const auto until = ready_since_ + window;
  if (now >= until) return std::nullopt;
  if (!hit_ids_.empty()) return until;  // still arriving
  for (const auto& [key, p] : pending_) {
    if (!p.queued && !p.warned) return until;  // still arriving (a stalled name does not hold anything)
  }
  return std::nullopt;
}

void Coordinator::requestShutdown(int rank) {
  if (!shutdown_reason_) shutdown_reason_ = "";
  (void)rank;
}

void Coordinator::setWaiting(int rank, std::vector<std::pair<int32_t, std::string>> names) {
  if (rank >= 0 && static_cast<size_t>(rank) < waiting_.size()) waiting_[static_cast<size_t>(rank)] = std::move(names);
}

std::optional<std::string> Coordinator::deadlock() const {
  if (!ready_.empty() || pending_.empty()) return std::nullopt;
  std::string text;
  for (int r = 0; r < options_.size; ++r) {
    if (joined_.count(r)) {
      text += detail::concat(text.empty() ? "" : "; ", "rank ", r, " has joined");
      continue;
    }
    const auto& waits = waiting_[static_cast<size_t>(r)];
    if (waits.empty()) return std::nullopt;  // not blocked: it may still submit what the others wait for
    for (const auto& key : waits) {
      const auto it = pending_.find(key);
      // A name the coordinator does not hold pending has completed (or its request is still on its way):
      // that rank may go on.
      if (it == pending_.end() || it->second.queued) return std::nullopt;
      const Pending& p = it->second;
      std::vector<int> present, missing;
      for (int m : members(key.first)) {
        if (p.by_rank[static_cast<size_t>(m)]) {
          present.push_back(m);
        } else if (key.first != 0 || !joined_.count(m)) {
          missing.push_back(m);
        }
      }
      const char* op = present.empty() ? "operation" : runtime::name(p.by_rank[static_cast<size_t>(present[0])]->type);
      text += detail::concat(text.empty() ? "" : "; ", "rank ", r, " waits for ", op, " '", key.second, "'",
                             key.first ? detail::concat(" (process set ", key.first, ")") : std::string(),
                             ", submitted by ranks ", formatRanks(present), ", never by ranks ", formatRanks(missing));
    }
  }
  return text;
}

namespace {

// Whether two shapes agree beyond their first dimension (both empty: yes).
bool sameTail(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() != b.size()) return false;
  return a.size() <= 1 || std::equal(a.begin() + 1, a.end(), b.begin() + 1);
}

// Groups ranks by the value f(request) gives, for mismatch messages: "float32 on ranks [0], ...".
template <typename F>
std::optional<std::string> differing(const std::vector<std::optional<Request>>& by_rank, F f) {
  std::map<std::string, std::vector<int>> groups;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (by_rank[r]) groups[f(*by_rank[r])].push_back(static_cast<int>(r));
  }
  if (groups.size() <= 1) return std::nullopt;
  std::string out;
  for (const auto& [value, ranks] : groups) {
    if (!out.empty()) out += ", ";
    out += value + " on ranks " + formatRanks(ranks);
  }
  return out;
}

std::string str(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

std::optional<std::string> Coordinator::validate(const Key& key, const Pending& p) const {
  const std::string& name = key.second;
  const auto& ranks = members(key.first);
  if (ranks.empty()) {
    return detail::concat("process set ", key.first, " of tensor '", name,
                          "' is not registered (removed, or never added)");
  }
  const int set_size = static_cast<int>(ranks.size());
  const Request* first = nullptr;
  for (const auto& q : p.by_rank) {
    if (q) {
      first = &*q;
      break;
    }
  }
  const auto& v = p.by_rank;
  // Fast path (every steady-state step): identical descriptors on every rank. Allgather and alltoall
  // rows legitimately differ per rank.
  const bool variable_rows = first->type == OpType::kAllgather || first->type == OpType::kAlltoall;
  bool uniform = true;
  for (const auto& q : v) {
    if (q && !(variable_rows ? q->type == first->type && q->dtype == first->dtype &&
                                   q->row_elements == first->row_elements && q->has_shape == first->has_shape &&
                                   q->onGpu() == first->onGpu() && sameTail(q->shape, first->shape)
                             : sameDescriptor(*q, *first))) {
      uniform = false;
      break;
    }
  }
  // An alltoall's rows must also split evenly where a rank gave no splits (its own check, below).
  auto unevenAlltoall = [&]() -> std::optional<std::string> {
    for (int r : ranks) {
      const auto& q = *v[r];
      if (q.splits.empty() && q.rows % set_size != 0) {
        return detail::concat("alltoall of tensor '", name, "': rank ", r, " gave no splits and its ", q.rows,
                              " rows are not a multiple of the ", set_size, " ranks");
      }
    }
    return std::nullopt;
  };
  if (uniform && (joined_.empty() || key.first != 0)) {
    return first->type == OpType::kAlltoall ? unevenAlltoall() : std::nullopt;
  }

  auto mismatch = [&](const char* what, const std::string& detail) {
    return detail::concat("Mismatched ", what, " for tensor '", name, "': ", detail);
  };
  if (auto d = differing(v, [](const Request& q) { return std::string(runtime::name(q.type)); })) {
    return mismatch("operations", *d);
  }
  const char* op = runtime::name(first->type);
  if (auto d = differing(v, [](const Request& q) { return std::string(gloo_backend::name(q.dtype)); })) {
    return mismatch(detail::concat(op, " data types").c_str(), *d);
  }
  // A GPU tensor's data reaches libhvd through host staging, so mixing would run; Horovod refuses it, and
  // so do we, since it is almost always a rank that forgot to move its model.
  if (auto d = differing(v, [](const Request& q) { return std::string(q.onGpu() ? "GPU" : "CPU"); })) {
    return mismatch(detail::concat(op, " CPU/GPU device selection").c_str(), *d);
  }
  switch (first->type) {
    case OpType::kAllreduce:
    case OpType::kBroadcast:
    case OpType::kReducescatter:
      if (auto d = differing(v, [](const Request& q) {
            return q.type == OpType::kReducescatter
                       ? detail::concat(q.rows, "x", q.row_elements)
                       : detail::concat(q.elements(), " elements");
          })) {
        return mismatch(detail::concat(op, " shapes").c_str(), *d);
      }
      break;
    case OpType::kAllgather:
    case OpType::kAlltoall:
      if (auto d = differing(v, [](const Request& q) { return detail::concat(q.row_elements, " elements per row"); })) {
        return mismatch(detail::concat(op, " shapes (beyond the first dimension)").c_str(), *d);
      }
      break;
    default:
      break;
  }
  // Horovod compares shapes, not only element counts ([17, 1311] and [17, 23, 57] differ), where every rank
  // gave one.
  const bool shaped = std::all_of(v.begin(), v.end(), [](const auto& q) { return !q || q->has_shape; });
  if (shaped && first->type != OpType::kBarrier && first->type != OpType::kJoin &&
      first->type != OpType::kProcessSet) {
    if (auto d = differing(v, [variable_rows](const Request& q) {
          std::string text = "[";
          for (size_t i = variable_rows ? 1 : 0; i < q.shape.size(); ++i) {
            text += (text.size() > 1 ? ", " : "") + std::to_string(q.shape[i]);
          }
          return text + "]";
        })) {
      return mismatch(detail::concat(op, variable_rows ? " shapes (beyond the first dimension)" : " shapes").c_str(), *d);
    }
  }
  if (first->type == OpType::kAllreduce || first->type == OpType::kReducescatter) {
    if (auto d = differing(v, [](const Request& q) { return std::string(gloo_backend::name(q.op)); })) {
      return mismatch(detail::concat(op, " reduce operations").c_str(), *d);
    }
    if (auto d = differing(v, [](const Request& q) { return str(q.prescale); })) {
      return mismatch(detail::concat(op, " prescale factors").c_str(), *d);
    }
    if (auto d = differing(v, [](const Request& q) { return str(q.postscale); })) {
      return mismatch(detail::concat(op, " postscale factors").c_str(), *d);
    }
  }
  if (first->type == OpType::kProcessSet) {
    if (auto d = differing(v, [](const Request& q) {
          std::vector<int> r(q.members.begin(), q.members.end());
          return q.members.empty() ? detail::concat("remove ", q.root) : "add " + formatRanks(r);
        })) {
      return mismatch("process set registrations", *d);
    }
  }
  if (first->type == OpType::kBroadcast) {
    if (auto d = differing(v, [](const Request& q) { return detail::concat("root ", q.root); })) {
      return mismatch("broadcast root ranks", *d);
    }
  }
  if (key.first == 0 && !joined_.empty() && first->type != OpType::kAllreduce) {
    std::vector<int> joined(joined_.begin(), joined_.end());
    return detail::concat(op, " of tensor '", name, "' cannot run while ranks ", formatRanks(joined),
                          " have joined (join supports allreduce only)");
  }
  if (first->type == OpType::kAlltoall) return unevenAlltoall();
  return std::nullopt;
}

Response Coordinator::build(const Key& key, const Pending& p) const {
  const std::string& name = key.second;
  const auto& ranks = members(key.first);
  const Request* first = nullptr;
  for (const auto& q : p.by_rank) {
    if (q) {
      first = &*q;
      break;
    }
  }
  Response s;
  s.type = first->type;
  s.names = {name};
  s.dtype = first->dtype;
  s.op = first->op;
  s.prescale = first->prescale;
  s.postscale = first->postscale;
  s.root = first->root;
  s.row_elements = first->row_elements;
  s.process_set = key.first;
  if (key.first == 0) s.joined_ranks.assign(joined_.begin(), joined_.end());
  switch (first->type) {
    case OpType::kAllreduce:
    case OpType::kBroadcast:
      s.counts = {static_cast<int64_t>(first->elements())};
      break;
    case OpType::kReducescatter:
      s.counts = {first->rows};
      break;
    case OpType::kAllgather:
      for (int r : ranks) s.counts.push_back(p.by_rank[r]->rows);
      break;
    case OpType::kAlltoall: {
      const int n = static_cast<int>(ranks.size());
      s.splits.resize(static_cast<size_t>(n) * n);
      for (int from = 0; from < n; ++from) {
        const auto& q = *p.by_rank[ranks[from]];
        for (int to = 0; to < n; ++to) {
          s.splits[from * n + to] = q.splits.empty() ? q.rows / n : q.splits[to];
        }
      }
      break;
    }
    default:
      break;
  }
  return s;
}

Response Coordinator::processSet(const Key& key, const Pending& p) {
  // validate() passed: every rank submitted the same registration (none can have joined meanwhile).
  const Request& q = **std::find_if(p.by_rank.begin(), p.by_rank.end(), [](const auto& r) { return r.has_value(); });
  Response s;
  s.type = OpType::kProcessSet;
  s.names = {key.second};
  auto invalid = [&](std::string error) {
    s.kind = Response::Kind::kError;
    s.error_class = Response::ErrorClass::kInvalid;
    s.error = std::move(error);
    return s;
  };
  if (q.members.empty()) {  // remove set q.root
    const int32_t id = q.root;
    if (id == 0 || !sets_.count(id)) {
      return invalid(detail::concat("cannot remove process set ", id,
                                    id == 0 ? ": it is the global process set" : ": no such process set"));
    }
    sets_.erase(id);
    s.root = id;
    return s;
  }
  std::vector<int> ranks(q.members.begin(), q.members.end());
  for (const auto& [id, existing] : sets_) {
    if (existing == ranks) {
      return invalid(detail::concat("Attempted to add a duplicate process set: ranks ", formatRanks(ranks),
                                    " are already process set ", id));
    }
  }
  const int32_t id = next_set_id_++;
  sets_[id] = ranks;
  s.root = id;
  s.counts.assign(ranks.begin(), ranks.end());
  return s;
}

ResponseList Coordinator::next() {
  ResponseList list;
  // Fusion: allreduces with the same dtype, op and scale factors share a buffer up to the threshold.
  struct Group {
    size_t index;  // into list.responses
    size_t bytes;
  };
  std::vector<Group> open;
  // Adds s to the list, or its one name to an open fused response it fits.
  auto place = [&](auto&& s) {
    if (s.type == OpType::kAllreduce && options_.fusion_threshold > 0) {
      const size_t bytes = static_cast<size_t>(s.counts[0]) * gloo_backend::elementSize(s.dtype);
      for (auto& g : open) {
        auto& f = list.responses[g.index];
        if (f.process_set == s.process_set && f.dtype == s.dtype && f.op == s.op &&
            f.prescale == s.prescale && f.postscale == s.postscale &&
            g.bytes + bytes <= options_.fusion_threshold) {
          f.names.push_back(s.names[0]);
          f.cache_ids.push_back(s.cache_ids[0]);
          f.counts.push_back(s.counts[0]);
          g.bytes += bytes;
          return;
        }
      }
      if (bytes < options_.fusion_threshold) open.push_back({list.responses.size(), bytes});
    }
    list.responses.push_back(std::forward<decltype(s)>(s));
  };
  for (const auto& [hit_id, key] : ready_) {
    if (hit_id) {  // every member hit: the response built when the name was cached
      place(cache_[hit_id - 1].response);
      ++answered_by_hits_;
      continue;
    }
    const std::string& name = key.second;
    if (name.empty()) {  // every rank joined
      Response s;
      s.type = OpType::kJoin;
      s.last_joined_rank = last_joined_;
      list.responses.push_back(std::move(s));
      joined_.clear();
      join_warned_ = false;
      continue;
    }
    auto it = pending_.find(key);
    const Pending& p = it->second;
    std::optional<std::string> error = validate(key, p);
    if (error) {
      Response s;
      s.kind = Response::Kind::kError;
      s.type = OpType::kAllreduce;
      s.process_set = key.first;
      s.names = {name};
      s.error = *error;
      s.error_class = members(key.first).empty() ? Response::ErrorClass::kInvalid : Response::ErrorClass::kMismatch;
      list.responses.push_back(std::move(s));
      erasePending(it);
      continue;
    }
    const Request* first_request = nullptr;
    for (const auto& q : p.by_rank) {
      if (q) {
        first_request = &*q;
        break;
      }
    }
    if (first_request->type == OpType::kProcessSet) {
      list.responses.push_back(processSet(key, p));
      erasePending(it);
      continue;
    }
    Response s = build(key, p);
    // Cache every name that passed validation (not while ranks have joined): allgather's and alltoall's
    // descriptors per rank, the others' once (validation found them the same on every rank).
    uint32_t cache_id = 0;
    if (joined_.empty()) {
      if (auto c = cache_ids_.find(key); c != cache_ids_.end()) {
        cache_id = c->second;
      } else if (cache_.size() < options_.cache_capacity) {
        Cached& fresh = cache_.emplace_back();
        fresh.key = key;
        fresh.hit_by.assign(static_cast<size_t>(options_.size), 0);
        cache_id = static_cast<uint32_t>(cache_.size());
        cache_ids_[key] = cache_id;
      }
      // A new or changed descriptor under a cached name (the ranks resubmitted it in full, and validation
      // passed): the cached copy is refreshed, the id stays. A name used for another kind of operation than
      // before (per rank or not) starts its copies afresh: every member's request is here to fill them.
      if (cache_id) {
        const bool per_rank = s.type == OpType::kAllgather || s.type == OpType::kAlltoall;
        auto& d = cache_[cache_id - 1].descriptors;
        const size_t copies = per_rank ? p.by_rank.size() : 1;
        if (d.size() != copies) d.assign(copies, std::nullopt);
        for (size_t r = 0; r < p.by_rank.size(); ++r) {
          const auto& q = p.by_rank[r];
          if (!q) continue;
          auto& copy = d.size() == 1 ? d[0] : d[r];
          if (!copy || !sameDescriptor(*copy, *q)) copy = *q;
          if (d.size() == 1) break;
        }
      }
    }
    s.cache_ids = {cache_id};
    if (cache_id) {
      // What hits of these descriptors run from now on; a group's member keeps waiting for its group.
      Cached& c = cache_[cache_id - 1];
      c.response = s;
      c.may_hit = first_request->group.empty() || first_request->group_size <= 1;
    }
    erasePending(it);
    place(std::move(s));
  }
  ready_.clear();

  if (shutdown_reason_) {
    list.shutdown = true;
    list.shutdown_reason = *shutdown_reason_;
    for (const auto& [set, name] : stalled_names_) {
      Response s;
      s.kind = Response::Kind::kError;
      s.error_class = Response::ErrorClass::kStalled;
      s.process_set = set;
      s.names = {name};
      s.error = *shutdown_reason_;
      list.responses.push_back(std::move(s));
    }
    if (join_stalled_) {  // no name: every rank fails its pending join, if it has one
      Response s;
      s.kind = Response::Kind::kError;
      s.error_class = Response::ErrorClass::kStalled;
      s.type = OpType::kJoin;
      s.error = *shutdown_reason_;
      list.responses.push_back(std::move(s));
      join_stalled_ = false;
    }
  }
  return list;
}

std::string Coordinator::checkStalls(Clock::time_point now) {
  demoteHits(now, hitsAge());  // what waits that long is inspected on the general path
  if (!options_.stall_check || shutdown_reason_) return "";
  if (const auto cycle = deadlock()) {
    if (!deadlock_since_) deadlock_since_ = now;
    if (now - *deadlock_since_ >= options_.stall_warning_time) {
      // Every rank waits for an operation that a rank which is itself blocked never submitted: nothing can
      // ever complete. The job ends now, every pending operation failing with the account of who waits for what.
      shutdown_reason_ = detail::concat(
          "deadlock: every rank is blocked waiting for an operation that other blocked ranks never submitted (for ",
          std::chrono::duration_cast<std::chrono::seconds>(now - *deadlock_since_).count(),
          " s, HOROVOD_STALL_CHECK_TIME_SECONDS=", options_.stall_warning_time.count() / 1000.0, "): ", *cycle);
      for (const auto& [key, p] : pending_) {
        if (!p.queued) stalled_names_.push_back(key);
      }
      return "";
    }
  } else {
    deadlock_since_.reset();
  }
  std::string report;
  std::string first_shut;  // the stalled name that reached the shutdown time
  for (auto& [key, p] : pending_) {
    const std::string& name = key.second;
    if (p.queued) continue;
    const auto age = now - p.first_seen;
    if (age < options_.stall_warning_time) continue;
    std::vector<int> missing, present;
    for (int r : members(key.first)) {
      if (p.by_rank[r]) {
        present.push_back(r);
      } else if (key.first != 0 || !joined_.count(r)) {
        missing.push_back(r);
      }
    }
    if (present.empty()) continue;
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(age).count();
    const std::string line = detail::concat(
        "'", name, "' (", runtime::name(p.by_rank[present[0]]->type),
        key.first ? detail::concat(", process set ", key.first) : std::string(), ") submitted by ranks ",
        formatRanks(present), " ", seconds, " s ago, missing on ranks ", formatRanks(missing));
    if (!p.warned) {
      report += (report.empty() ? "" : "; ") + line;
      p.warned = true;
    }
    if (options_.stall_shutdown_time.count() > 0 && age >= options_.stall_shutdown_time && first_shut.empty()) {
      first_shut = line;
    }
  }
  // A join that some ranks never reach stalls like a name: the joined ranks wait in it.
  if (!joined_.empty() && static_cast<int>(joined_.size()) < options_.size &&
      now - join_since_ >= options_.stall_warning_time) {
    std::vector<int> present(joined_.begin(), joined_.end()), missing;
    for (int r = 0; r < options_.size; ++r) {
      if (!joined_.count(r)) missing.push_back(r);
    }
    const auto age = now - join_since_;
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(age).count();
    const std::string line = detail::concat("join submitted by ranks ", formatRanks(present), " ", seconds,
                                            " s ago, missing on ranks ", formatRanks(missing));
    if (!join_warned_) {
      report += (report.empty() ? "" : "; ") + line;
      join_warned_ = true;
    }
    const bool shut = options_.stall_shutdown_time.count() > 0 && age >= options_.stall_shutdown_time;
    if (shut && first_shut.empty()) first_shut = line;
  }
  if (!first_shut.empty()) {
    // Horovod's stall shutdown ends the job; every stalled operation reports why.
    shutdown_reason_ = detail::concat("stall shutdown (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=",
                                      options_.stall_shutdown_time.count() / 1000.0, "): ", first_shut);
    for (const auto& [key, p] : pending_) {
      if (p.warned && !p.queued) stalled_names_.push_back(key);
    }
    if (join_warned_) join_stalled_ = true;
  }
  if (report.empty()) return report;
  return "One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks "
         "and are waiting for remainder of ranks for more than " +
         std::to_string(options_.stall_warning_time.count() / 1000) + " seconds: " + report;
}

std::vector<CollectiveWait> Coordinator::waits(Clock::time_point now, Clock::duration min_age,
                                                           size_t limit) const {
  std::vector<std::pair<Clock::time_point, const std::pair<const Key, Pending>*>> old;
  for (const auto& entry : pending_) {
    const Pending& p = entry.second;
    if (!p.queued && p.reported > 0 && now - p.first_seen >= min_age) old.emplace_back(p.first_seen, &entry);
  }
  // Counted hits, as the requests they stand for would be in pending_.
  std::vector<std::pair<const Key, Pending>> hits;
  hits.reserve(hit_ids_.size());
  for (uint32_t id : hit_ids_) {
    const Cached& c = cache_[id - 1];
    if (now - c.first_hit < min_age) continue;
    Pending p;
    p.by_rank.resize(c.hit_by.size());
    for (size_t r = 0; r < c.hit_by.size(); ++r) {
      if (c.hit_by[r]) p.by_rank[r] = cachedRequest(id, static_cast<int>(r));
    }
    p.first_seen = c.first_hit;
    hits.emplace_back(c.key, std::move(p));
  }
  for (const auto& entry : hits) old.emplace_back(entry.second.first_seen, &entry);
  const size_t n = std::min(limit, old.size());
  std::partial_sort(old.begin(), old.begin() + static_cast<std::ptrdiff_t>(n), old.end(),
                    [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<CollectiveWait> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto& [key, p] = *old[i].second;
    CollectiveWait w;
    w.name = key.second;
    w.process_set = key.first;
    for (int r : members(key.first)) {
      if (p.by_rank[r]) {
        w.submitted.push_back(r);
        if (w.op.empty()) w.op = runtime::name(p.by_rank[r]->type);
      } else if (key.first != 0 || !joined_.count(r)) {
        w.missing.push_back(r);
      }
    }
    if (w.op.empty()) {  // an unknown process set: no members to go through
      for (const auto& q : p.by_rank) {
        if (q) {
          w.op = runtime::name(q->type);
          break;
        }
      }
    }
    w.seconds = std::chrono::duration<double>(now - p.first_seen).count();
    out.push_back(std::move(w));
  }
  return out;
}

std::optional<Coordinator::Clock::time_point> Coordinator::nextStallCheck() const {
  std::optional<Clock::time_point> next;
  for (uint32_t id : hit_ids_) {  // hits go to the general path then
    const auto t = cache_[id - 1].first_hit + hitsAge();
    if (!next || t < *next) next = t;
  }
  if (!options_.stall_check) return next;
  if (deadlock_since_) next = *deadlock_since_ + options_.stall_warning_time;
  for (const auto& [key, p] : pending_) {
    if (p.queued) continue;
    auto t = p.first_seen + (p.warned ? options_.stall_shutdown_time : options_.stall_warning_time);
    if (p.warned && options_.stall_shutdown_time.count() == 0) continue;
    if (!next || t < *next) next = t;
  }
  return next;
}

}  // namespace hvd::runtime
