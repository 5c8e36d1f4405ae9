// Executing one negotiated response on this rank: the data path of its process set (Gloo, shared memory or
// hierarchical), the fusion buffer, the results kept for allgather/alltoall/reducescatter, process-set
// registration, the timeline and autotune's records. See runtime_impl.h.

#include "runtime/runtime_impl.h"

#include <algorithm>
#include <cstring>

#include "runtime/gloo_transport.h"
#include "runtime/hierarchical.h"

namespace hvd::runtime {

std::optional<Runtime::Impl::Key> Runtime::Impl::pendingJoin() const {
  for (const auto& [key, entry] : table_) {
    if (entry.request.type == OpType::kJoin) return key;
  }
  return std::nullopt;
}

std::byte* Runtime::Impl::scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

void Runtime::Impl::execute(const Response& s) {
  if (s.kind == Response::Kind::kError) {
    std::exception_ptr error;
    if (s.error_class == Response::ErrorClass::kStalled) {
      error = std::make_exception_ptr(StalledError(s.error));
    } else if (s.error_class == Response::ErrorClass::kInvalid) {
      error = std::make_exception_ptr(UsageError(s.error));
    } else {
      error = std::make_exception_ptr(MismatchError(s.error));
    }
    for (const auto& name : s.names) complete(s.process_set, name, error);
    if (s.type == OpType::kJoin && s.names.empty()) {  // the stalled join: each rank's has its own name
      if (const auto key = pendingJoin()) complete(key->first, key->second, error);
    }
    return;
  }
  if (s.type == OpType::kProcessSet) return executeProcessSet(s);
  auto comm = set_comms_.find(s.process_set);
  if (comm == set_comms_.end()) return;  // a set this rank is not a member of
  // Not for a response agreed without the coordinator (agreement.cc): this table mirrors what rank 0 keeps
  // for this rank, which saw nothing of it.
  if (!coordinator_ && !agreed_execution_) {
    for (size_t i = 0; i < s.cache_ids.size() && i < s.names.size(); ++i) {
      if (!s.cache_ids[i]) continue;
      if (Entry* e = find(s.process_set, s.names[i])) {
        auto& cached = response_cache_[{s.process_set, s.names[i]}];
        if (cached.first == s.cache_ids[i] && sameDescriptor(cached.second, e->request)) continue;  // kept
        cached.first = s.cache_ids[i];
        cached.second = e->request;
        cached.second.input = nullptr;
        cached.second.output = nullptr;
      }
    }
  }
  if (agreement_ && !agreed_execution_) rememberAlone(s);
  try {
    timelineStart(s);
    if (s.type == OpType::kAllreduce) {
      executeAllreduce(s, *comm->second);
    } else {
      executeOther(s, *comm->second, comm->second->rank());
    }
    timelineEnd(s);
  } catch (const std::exception& e) {
    // The context is dead after a failed collective: fail these works with the cause, then stop.
    const auto error = std::current_exception();
    for (const auto& name : s.names) complete(s.process_set, name, error);
    throw;
  }
}

void Runtime::Impl::executeProcessSet(const Response& s) {
  const int32_t id = s.root;
  Entry* e = find(0, s.names[0]);
  const bool is_static = e && e->static_set;
  if (s.counts.empty()) {  // removed
    if (auto comm = set_comms_.find(id); comm != set_comms_.end()) {
      comm->second->close(true);  // every member removes it at this point of the same order
      set_comms_.erase(comm);
    }
    std::lock_guard lock(sets_mutex_);
    set_info_.erase(id);
  } else {
    SetInfo info;
    info.ranks.assign(s.counts.begin(), s.counts.end());
    info.is_static = is_static;
    const auto me = std::lower_bound(info.ranks.begin(), info.ranks.end(), options_.rank);
    if (me != info.ranks.end() && *me == options_.rank) {
      CommunicatorOptions o;
      o.scope = detail::concat("process_set_", id);
      o.rank = static_cast<int>(me - info.ranks.begin());
      o.size = static_cast<int>(info.ranks.size());
      o.timeout = options_.gloo_timeout;
      o.abort = abort_signal_;
      log(LogLevel::kDebug, detail::concat(o.scope, " rendezvous started for rank=", o.rank, ", size=", o.size));
      set_comms_[id] = std::make_shared<GlooTransport>(Communicator::connect(store_, gloo_device_, o));
    }
    std::lock_guard lock(sets_mutex_);
    set_info_[id] = std::move(info);
  }
  if (e) e->work->result_int = id;
  complete(0, s.names[0]);
}

void Runtime::Impl::timelineStart(const Response& s) {
  if (s.type == OpType::kJoin) return;
  for (const auto& name : s.names) timeline_->start(name, s.type);
}

void Runtime::Impl::timelineEnd(const Response& s) {
  if (s.type == OpType::kJoin || !timeline_->enabled()) return;  // no shape text per tensor for nothing
  for (size_t i = 0; i < s.names.size(); ++i) {
    std::string shape;
    if (s.type == OpType::kAllreduce) {
      shape = detail::concat("[", s.counts[i], "]");
    } else if (s.type == OpType::kBroadcast) {
      shape = detail::concat("[", s.counts[0], "]");
    } else if (s.type != OpType::kBarrier) {
      shape = detail::concat("[-1, ", s.row_elements, "]");  // first dimension differs between ranks
    }
    timeline_->end(s.names[i], gloo_backend::name(s.dtype), shape);
  }
}

std::shared_ptr<Transport> Runtime::Impl::globalTransport() {
  if (shm_ && singleHost()) return shm_;
  if (!flat_global_) flat_global_ = std::make_shared<GlooTransport>(global_);
  if (!hierarchical_ && !hierarchical_allgather_) return flat_global_;
  return std::make_shared<HierarchicalTransport>(shm_, std::make_shared<GlooTransport>(cross_), flat_global_,
                                                 hierarchical_, hierarchical_allgather_);
}

void Runtime::Impl::autotune(const ResponseList& list) {
  // One record per executed list, timed at its end: the fused allreduces of a cycle are one step of work.
  std::vector<std::string> names;
  size_t bytes = 0;
  for (const auto& r : list.responses) {
    if (r.type != OpType::kAllreduce || r.process_set != 0 || !r.error.empty()) continue;
    names.insert(names.end(), r.names.begin(), r.names.end());
    size_t elements = 0;
    for (int64_t c : r.counts) elements += static_cast<size_t>(c);
    bytes += elements * gloo_backend::elementSize(r.dtype);
  }
  if (names.empty()) return;
  if (const auto tuned = autotuner_->record(names, bytes, Clock::now())) {
    coordinator_->setFusionThreshold(tuned->fusion_threshold);
    cycle_time_ = tuned->cycle_time;
    // Against the path the executed list left in force (hierarchical_ is up to date on rank 0 too).
    if (tuned->hierarchical != hierarchical_)
      pending_path_ = tuned->hierarchical ? ResponseList::kPathHierarchical : ResponseList::kPathFlat;
    log(LogLevel::kInfo, detail::concat("autotune: fusion threshold ", tuned->fusion_threshold, " bytes, cycle time ",
                                        tuned->cycle_time.count(), " us, ",
                                        tuned->hierarchical ? "hierarchical" : "flat", " allreduce"));
  }
  if (autotuner_->done()) {
    log(LogLevel::kInfo, autotuner_->summary());
    autotuner_.reset();
  }
}

void Runtime::Impl::executeAllreduce(const Response& s, Transport& comm) {
  const size_t esize = gloo_backend::elementSize(s.dtype);
  const double post = s.postscale * (s.op == ReduceOp::kAverage ? 1.0 / comm.size() : 1.0);
  Entry* single = s.names.size() == 1 ? find(s.process_set, s.names[0]) : nullptr;
  if (single) {
    // Unfused: reduce in the caller's output buffer.
    const Request& q = single->request;
    const size_t n = static_cast<size_t>(s.counts[0]);
    if (n && q.input != q.output) std::memcpy(q.output, q.input, n * esize);
    gloo_backend::scale(s.dtype, q.output, n, s.prescale);
    timeline_->activityStart(s.names, comm.pathOf("ALLREDUCE"), "ALLREDUCE");
    comm.allreduce(q.output, n, s.dtype, s.op);
    timeline_->activityEnd(s.names);
    gloo_backend::scale(s.dtype, q.output, n, post);
    complete(s.process_set, s.names[0]);
    return;
  }
  // Fused, every tensor submitted here and no prescaling: the transport may reduce them where they are.
  std::vector<Entry*> entries;  // null: a name this rank did not submit (it joined)
  for (const auto& name : s.names) entries.push_back(find(s.process_set, name));
  if (s.prescale == 1.0 && std::find(entries.begin(), entries.end(), nullptr) == entries.end()) {
    std::vector<Transport::Part> parts;
    for (size_t i = 0; i < entries.size(); ++i) {
      parts.push_back(
          {entries[i]->request.input, entries[i]->request.output, static_cast<size_t>(s.counts[i])});
    }
    timeline_->activityStart(s.names, comm.pathOf("ALLREDUCE"), "ALLREDUCE");
    const bool done = comm.allreduceParts(parts, s.dtype, s.op);
    timeline_->activityEnd(s.names);
    if (done) {
      for (size_t i = 0; i < parts.size(); ++i) {
        gloo_backend::scale(s.dtype, parts[i].out, parts[i].count, post);
        complete(s.process_set, s.names[i]);
      }
      return;
    }
  }
  // Fused (or this rank joined and contributes zeros): pack into the reused fusion buffer.
  size_t total = 0;
  for (auto c : s.counts) total += static_cast<size_t>(c);
  // Up to 1 MiB the fusion buffer is the communicator's staging buffer: no second copy in and out.
  std::byte* buffer = comm.stagingBuffer(total * esize);
  if (!buffer) buffer = scratch(total * esize);
  timeline_->activityStart(s.names, "MEMCPY_IN_FUSION_BUFFER");
  size_t offset = 0;
  for (size_t i = 0; i < s.names.size(); ++i) {
    const size_t bytes = static_cast<size_t>(s.counts[i]) * esize;
    if (const Entry* e = entries[i]) {
      if (bytes) std::memcpy(buffer + offset, e->request.input, bytes);
    } else {
      std::memset(buffer + offset, 0, bytes);
    }
    offset += bytes;
  }
  timeline_->activityEnd(s.names);
  gloo_backend::scale(s.dtype, buffer, total, s.prescale);
  timeline_->activityStart(s.names, comm.pathOf("ALLREDUCE"), "ALLREDUCE");
  comm.allreduce(buffer, total, s.dtype, s.op);
  timeline_->activityEnd(s.names);
  gloo_backend::scale(s.dtype, buffer, total, post);
  timeline_->activityStart(s.names, "MEMCPY_OUT_FUSION_BUFFER");
  offset = 0;
  for (size_t i = 0; i < s.names.size(); ++i) {
    const size_t bytes = static_cast<size_t>(s.counts[i]) * esize;
    if (const Entry* e = entries[i]) {
      if (bytes) std::memcpy(e->request.output, buffer + offset, bytes);
      complete(s.process_set, s.names[i]);
    }
    offset += bytes;
  }
}

void Runtime::Impl::executeOther(const Response& s, Transport& comm, int set_rank) {
  const size_t esize = gloo_backend::elementSize(s.dtype);
  const size_t row_bytes = static_cast<size_t>(s.row_elements) * esize;
  const int n = comm.size();
  const int me = set_rank;
  Entry* e = s.names.empty() ? nullptr : find(s.process_set, s.names[0]);  // join has no name
  HVD_INTERNAL_ASSERT(e || s.type == OpType::kJoin, runtime::name(s.type), " '",
                      s.names.empty() ? "" : s.names[0], "' not submitted on rank ", options_.rank);
  switch (s.type) {
    case OpType::kBroadcast: {
      const size_t bytes = static_cast<size_t>(s.counts[0]) * esize;
      if (bytes && e->request.input && e->request.input != e->request.output) {
        std::memcpy(e->request.output, e->request.input, bytes);
      }
      timeline_->activityStart(s.names, comm.pathOf("BCAST"), "BCAST");
      // The root is a global rank; the set's context numbers its members by set rank.
      // set_info_ changes only on this thread, so reading it here needs no lock.
      const auto& ranks = set_info_.at(s.process_set).ranks;
      const int root = static_cast<int>(std::lower_bound(ranks.begin(), ranks.end(), s.root) - ranks.begin());
      comm.broadcast(e->request.output, bytes, root);
      timeline_->activityEnd(s.names);
      complete(s.process_set, s.names[0]);
      return;
    }
    case OpType::kAllgather: {
      std::vector<size_t> bytes(n);
      int64_t rows = 0;
      for (int r = 0; r < n; ++r) {
        bytes[r] = static_cast<size_t>(s.counts[r]) * row_bytes;
        rows += s.counts[r];
      }
      Work& w = *e->work;
      w.result.allocate(result_pool_, static_cast<size_t>(rows) * row_bytes);
      w.result_rows = rows;
      timeline_->activityStart(s.names, comm.pathOf("ALLGATHER"), "ALLGATHER");
      comm.allgatherv(e->request.input, w.result.data(), bytes);
      timeline_->activityEnd(s.names);
      complete(s.process_set, s.names[0]);
      return;
    }
    case OpType::kAlltoall: {
      std::vector<size_t> send(n), recv(n);
      Work& w = *e->work;
      w.received_splits.assign(n, 0);
      int64_t rows = 0;
      for (int p = 0; p < n; ++p) {
        send[p] = static_cast<size_t>(s.splits[me * n + p]) * row_bytes;
        w.received_splits[p] = s.splits[p * n + me];
        recv[p] = static_cast<size_t>(w.received_splits[p]) * row_bytes;
        rows += w.received_splits[p];
      }
      w.result.allocate(result_pool_, static_cast<size_t>(rows) * row_bytes);
      w.result_rows = rows;
      timeline_->activityStart(s.names, comm.pathOf("ALLTOALL"), "ALLTOALL");
      comm.alltoallv(e->request.input, send, w.result.data(), recv);
      timeline_->activityEnd(s.names);
      complete(s.process_set, s.names[0]);
      return;
    }
    case OpType::kReducescatter: {
      // This rank keeps its block of rows (the first rows % n ranks one more): reduced straight from the
      // input into the result where the transport can (and no prescale changes the input), else by a ring
      // reduce-scatter of the whole tensor in the scratch buffer.
      const int64_t rows = s.counts[0];
      const size_t elements = static_cast<size_t>(rows) * static_cast<size_t>(s.row_elements);
      const int64_t base = rows / n, extra = rows % n;
      std::vector<size_t> block_elements(n);
      for (int p = 0; p < n; ++p) {
        block_elements[p] = static_cast<size_t>((base + (p < extra ? 1 : 0)) * s.row_elements);
      }
      const double post = s.postscale * (s.op == ReduceOp::kAverage ? 1.0 / n : 1.0);
      const int64_t mine = base + (me < extra ? 1 : 0);
      const int64_t first = me * base + std::min<int64_t>(me, extra);
      Work& w = *e->work;
      w.result.allocate(result_pool_, static_cast<size_t>(mine) * row_bytes);
      w.result_rows = mine;
      timeline_->activityStart(s.names, comm.pathOf("REDUCESCATTER"), "REDUCESCATTER");
      const bool direct = s.prescale == 1.0 && comm.reduceScatterInto(e->request.input, w.result.data(),
                                                                      block_elements, s.dtype, s.op);
      if (!direct) {
        std::byte* buffer = scratch(elements * esize);
        if (elements) std::memcpy(buffer, e->request.input, elements * esize);
        gloo_backend::scale(s.dtype, buffer, elements, s.prescale);
        comm.reduceScatter(buffer, block_elements, s.dtype, s.op);
        if (mine) std::memcpy(w.result.data(), buffer + first * row_bytes, w.result.size());
      }
      timeline_->activityEnd(s.names);
      gloo_backend::scale(s.dtype, w.result.data(), static_cast<size_t>(mine * s.row_elements), post);
      complete(s.process_set, s.names[0]);
      return;
    }
    case OpType::kBarrier:
      timeline_->activityStart(s.names, comm.pathOf("BARRIER"), "BARRIER");
      comm.barrier();
      timeline_->activityEnd(s.names);
      complete(s.process_set, s.names[0]);
      return;
    case OpType::kJoin:
      if (const auto key = pendingJoin()) {
        table_.at(*key).work->result_int = s.last_joined_rank;
        complete(key->first, key->second);
      }
      return;
    case OpType::kAllreduce:
    case OpType::kProcessSet:
      break;
  }
  HVD_INTERNAL_ASSERT(false, "unexpected response type ", static_cast<int>(s.type));
}

}  // namespace hvd::runtime
