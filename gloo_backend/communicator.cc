#include "gloo_backend/communicator.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <numeric>
#include <string_view>

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_ring.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "base/error.h"
#include "gloo_backend/address_list.h"
#include "gloo_backend/connect_watch.h"

namespace hvd::gloo_backend {

namespace {

// Gloo reports every transport failure as gloo::IoException; only the text tells a peer whose connection
// closed or was reset (it died, or its host went away) from a timeout, which stays a BackendError.
bool peerLost(const std::exception& e) {
  if (!dynamic_cast<const gloo::IoException*>(&e)) return false;
  const std::string_view what = e.what();
  for (const char* marker : {"Connection closed by peer", "Connection reset by peer", "Broken pipe", "No route to host",
                             "Network is unreachable"}) {
    if (what.find(marker) != std::string_view::npos) return true;
  }
  return false;
}

// A gloo::Context whose transport context is connected by Communicator::connect instead of
// gloo::rendezvous::Context::connectFullMesh (see communicator.h).
class MeshContext final : public gloo::Context {
 public:
  MeshContext(int rank, int size) : gloo::Context(rank, size) {}
  void attach(std::shared_ptr<gloo::transport::Device> device,
              std::shared_ptr<gloo::transport::Context> transport) {
    device_ = std::move(device);
    transportContext_ = std::move(transport);
  }
};

}  // namespace

// The buffers of one operation, attached to the abort signal while the operation runs. Declared after
// the Gloo options that own the buffers, so it detaches them before they are destroyed.
class Communicator::Watched {
 public:
  explicit Watched(const std::shared_ptr<AbortSignal>& signal) : signal_(signal.get()) {}
  ~Watched() {
    for (auto& t : targets_) signal_->detach(&t);
  }
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;

  std::unique_ptr<gloo::transport::UnboundBuffer> add(std::unique_ptr<gloo::transport::UnboundBuffer> buffer) {
    watch(buffer.get());
    return buffer;
  }
  void watch(gloo::transport::UnboundBuffer* buffer) {
    if (!signal_) return;
    targets_.emplace_back(buffer);
    signal_->attach(&targets_.back());
  }

 private:
  struct Target final : AbortSignal::Target {
    explicit Target(gloo::transport::UnboundBuffer* b) : buffer(b) {}
    void wake() noexcept override {
      buffer->abortWaitSend();
      buffer->abortWaitRecv();
    }
    gloo::transport::UnboundBuffer* buffer;
  };
  AbortSignal* signal_;
  std::list<Target> targets_;  // stable addresses
};

Communicator::Communicator(CommunicatorOptions options, std::shared_ptr<Device> device,
                           std::shared_ptr<gloo::Context> context)
    : options_(std::move(options)), device_(std::move(device)), context_(std::move(context)) {}

std::unique_ptr<gloo::transport::UnboundBuffer> Communicator::buffer(Watched& watched, const void* ptr, size_t bytes) {
  return watched.add(context_->createUnboundBuffer(const_cast<void*>(ptr), bytes));
}

std::unique_ptr<Communicator> Communicator::connect(std::shared_ptr<rendezvous::Store> store,
                                                    std::shared_ptr<Device> device,
                                                    const CommunicatorOptions& options) {
  HVD_CHECK(options.size >= 1 && options.rank >= 0 && options.rank < options.size, UsageError,
            "invalid identity for scope '", options.scope, "': rank ", options.rank, ", size ", options.size);
  auto context = std::make_shared<MeshContext>(options.rank, options.size);
  context->setTimeout(options.timeout);
  if (options.size == 1) {
    return std::unique_ptr<Communicator>(new Communicator(options, std::move(device), std::move(context)));
  }
  auto scoped = std::make_shared<rendezvous::PrefixStore>(options.scope, std::move(store));
  try {
    auto transport = device->gloo()->createContext(options.rank, options.size);
    transport->setTimeout(options.timeout);
    // Our pairs' addresses by rank (ours left empty), in the sliceable layout of address_list.h.
    const auto n = static_cast<size_t>(options.size), me = static_cast<size_t>(options.rank);
    std::vector<std::vector<char>> pairs(n);
    std::vector<std::string> keys;  // every rank, ours included: every member asks for the same list
    keys.reserve(n);
    for (int i = 0; i < options.size; ++i) {
      keys.push_back(std::to_string(i));
      if (i != options.rank) pairs[i] = transport->createPair(i)->address().bytes();
    }
    scoped->set(std::to_string(options.rank), encodeAddressList(pairs, me));
    pairs.clear();
    const auto waits = options.rendezvous_timeout.value_or(options.timeout);
    // Every rank's header prefix (one range, the same on every rank: the server builds that answer once;
    // the prefixes of the ranks of one host are equal, so each host's comes once, the rest as references) ...
    auto header_bytes = scoped->waitAndGet(keys, waits, rendezvous::ValueRange{0, kAddressListPeerBytes, true});
    // ... or, when a peer's address is IPv6 (longer than the prefix holds), every whole header.
    bool ipv6 = false;
    for (size_t peer = 0; peer < n && !ipv6; ++peer) ipv6 = AddressListHeader::needsFullHeader(header_bytes[peer]);
    if (ipv6) header_bytes = scoped->waitAndGet(keys, waits, rendezvous::ValueRange{0, kAddressListHeaderBytes});
    std::vector<AddressListHeader> headers;
    headers.reserve(n);
    std::vector<size_t> entry_sizes;  // distinct, of the peers: one in practice (every rank runs one Gloo)
    for (size_t peer = 0; peer < n; ++peer) {
      // The publisher's rank is the key's; a whole header's own-rank field is checked against it.
      headers.emplace_back(header_bytes[peer], peer, detail::concat(scoped->describe(), " key ", peer));
      const auto& header = headers.back();
      HVD_CHECK(header.size() == n, StoreError, "Gloo address list at ", scoped->describe(), " key ", peer,
                " was published for a scope of ", header.size(), " ranks, read by rank ", me, " of ", n,
                " (a peer of another job?)");
      if (peer != me && std::find(entry_sizes.begin(), entry_sizes.end(), header.entryBytes()) == entry_sizes.end()) {
        entry_sizes.push_back(header.entryBytes());
      }
    }
    // ... then our column: our entry in every list (every key again, so the server reuses the parsed list).
    std::vector<std::pair<int, std::vector<char>>> addresses;  // peer rank, its pair's address for us
    addresses.reserve(n - 1);
    for (const size_t entry : entry_sizes) {
      rendezvous::ValueList column;
      if (entry > 0) {
        column = scoped->waitAndGet(keys, waits, rendezvous::ValueRange{kAddressListHeaderBytes + me * entry, entry});
      }
      for (size_t peer = 0; peer < n; ++peer) {
        if (peer == me || headers[peer].entryBytes() != entry) continue;
        addresses.emplace_back(static_cast<int>(peer),
                               headers[peer].address(me, entry > 0 ? column[peer] : std::string_view()));
      }
    }
    {
      // A peer may publish and then leave for a later elastic round without connecting: the watch ends
      // the wait once the round's keys are gone (connect_watch.h).
      std::vector<gloo::transport::Pair*> pairs;
      for (const auto& [peer, address] : addresses) pairs.push_back(transport->getPair(peer).get());
      ConnectWatch watch(scoped, std::to_string(options.rank), pairs);
      auto ticking = device->keepTicking();
      try {
        for (size_t i = 0; i < pairs.size() && !watch.fired(); ++i) pairs[i]->connect(addresses[i].second);
      } catch (const std::exception&) {
        watch.stop();
        if (!watch.fired()) throw;  // a connect that failed by itself; else the watch closed its pair
      }
      watch.stop();
      HVD_CHECK(!watch.fired(), StoreError, "Gloo rendezvous of scope '", options.scope, "' on rank ",
                options.rank, " of ", options.size,
                " stopped waiting for its peers to connect: ", *watch.reason(),
                " (an elastic job's driver drops every key when it begins a later round)");
    }
    context->attach(device->gloo(), std::move(transport));
    // "Don't finalize the store until all clients have had a chance to connect." (Horovod)
    gloo::BarrierOptions barrier(context);
    barrier.setTimeout(options.timeout);
    gloo::barrier(barrier);
  } catch (const hvd::Error&) {
    throw;  // store errors already name the server, scope and keys
  } catch (const std::exception& e) {
    const std::string message = detail::concat("Gloo rendezvous of scope '", options.scope, "' failed on rank ",
                                               options.rank, " of ", options.size, ": ", e.what());
    if (peerLost(e)) throw PeerLostError(message);
    throw BackendError(message);
  }
  scoped->deleteKey(std::to_string(options.rank));
  return std::unique_ptr<Communicator>(new Communicator(options, std::move(device), std::move(context)));
}

Communicator::~Communicator() { close(); }

template <typename F>
void Communicator::guarded(const char* what, F&& body) {
  HVD_CHECK(!failed_ && context_, BackendError, "Gloo context '", options_.scope, "' on rank ", options_.rank,
            " is unusable after an earlier failure (", what, ")");
  try {
    body();
    // Waits the signal woke return as if done: an operation that overlapped it has failed.
    if (const auto error = options_.abort ? options_.abort->error() : nullptr) std::rethrow_exception(error);
  } catch (const std::exception& e) {
    failed_ = true;
    // Raised while the operation ran: that is why it failed (Gloo's own error then only echoes it), unless
    // Gloo's own wait expired first (a stopped peer: the abort that followed is the others' reaction).
    std::string why = e.what();
    bool lost = peerLost(e);
    const bool timed_out = why.find("Timed out waiting") != std::string::npos;
    if (const auto error = options_.abort && !timed_out ? options_.abort->error() : nullptr) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& raised) {
        why = raised.what();
        lost = dynamic_cast<const PeerLostError*>(&raised) != nullptr;
      }
    }
    const std::string message = detail::concat("Gloo ", what, " on scope '", options_.scope, "' failed on rank ",
                                               options_.rank, " of ", options_.size, ": ", why);
    if (lost) throw PeerLostError(message);
    throw BackendError(message);
  }
}

namespace {

// Gloo's allreduce templates take the element type only for its size; the reduction itself is ours.
template <typename T>
void runAllreduce(gloo::AllreduceOptions& opts, std::unique_ptr<gloo::transport::UnboundBuffer> data, DataType type,
                  ReduceOp op, uint32_t tag, std::chrono::milliseconds timeout) {
  opts.setOutput<T>(std::move(data));
  opts.setTag(tag);
  opts.setTimeout(timeout);
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
  opts.setReduceFunction([type, op](void* out, const void* a, const void* b, size_t n) {
    reduce(type, op, out, a, b, n);
  });
  gloo::allreduce(opts);
}

}  // namespace

namespace {

template <typename T>
const gloo::ReductionFunction<T>* reductionOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum: return gloo::ReductionFunction<T>::sum;
    case ReduceOp::kMin: return gloo::ReductionFunction<T>::min;
    case ReduceOp::kMax: return gloo::ReductionFunction<T>::max;
    case ReduceOp::kProduct: return gloo::ReductionFunction<T>::product;
  }
  return nullptr;
}

template <typename T>
std::unique_ptr<gloo::Algorithm> makeRing(const std::shared_ptr<gloo::Context>& context, void* buffer, size_t count,
                                          ReduceOp op) {
  return std::make_unique<gloo::AllreduceRing<T>>(context, std::vector<T*>{static_cast<T*>(buffer)},
                                                  static_cast<int>(count), reductionOf<T>(op));
}

}  // namespace

bool Communicator::allreduceSmall(void* data, size_t count, DataType type, ReduceOp op) {
  const size_t bytes = count * elementSize(type);
  // Two ranks only (see allreduce() in the header); there a+b == b+a, so every type and op gives
  // bit-identical results although each rank accumulates in its own order.
  if (bytes > kLegacyRingBytes || size() != 2) return false;
  if (type != DataType::kFloat32 && type != DataType::kFloat64 && type != DataType::kInt32 &&
      type != DataType::kInt64) {
    return false;
  }
  if (!warmed_up_) {
    // Every rank reaches this point at the same operation, so the warm-up's slots agree too.
    std::vector<float> zeros(kLegacyRingBytes / sizeof(float));
    makeRing<float>(context_, zeros.data(), zeros.size(), ReduceOp::kSum)->run();
    warmed_up_ = true;
  }
  std::byte* staging = stagingBuffer(bytes);
  const bool staged = data == staging;  // packed there by the caller
  auto it = small_algorithms_.begin();
  while (it != small_algorithms_.end() && !(it->count == count && it->type == type && it->op == op)) ++it;
  if (it == small_algorithms_.end()) {
    if (small_algorithms_.size() == kMaxSmallAlgorithms) small_algorithms_.pop_back();
    SmallAlgorithm a{count, type, op, nullptr};
    void* buffer = staging;
    switch (type) {
      case DataType::kFloat32: a.algorithm = makeRing<float>(context_, buffer, count, op); break;
      case DataType::kFloat64: a.algorithm = makeRing<double>(context_, buffer, count, op); break;
      case DataType::kInt32: a.algorithm = makeRing<int32_t>(context_, buffer, count, op); break;
      default: a.algorithm = makeRing<int64_t>(context_, buffer, count, op); break;
    }
    small_algorithms_.push_front(std::move(a));
  } else if (it != small_algorithms_.begin()) {
    small_algorithms_.splice(small_algorithms_.begin(), small_algorithms_, it);
  }
  if (!staged) std::memcpy(staging, data, bytes);
  small_algorithms_.front().algorithm->run();
  if (!staged) std::memcpy(data, staging, bytes);
  return true;
}

std::byte* Communicator::stagingBuffer(size_t bytes) {
  if (bytes > kLegacyRingBytes) return nullptr;
  if (small_buffer_.empty()) small_buffer_.resize(kLegacyRingBytes);
  return small_buffer_.data();
}

void Communicator::allreduce(void* data, size_t count, DataType type, ReduceOp op) {
  if (count == 0 || size() == 1) return;
  guarded("allreduce", [&] {
    if (allreduceSmall(data, count, type, op)) return;
    if (count * elementSize(type) > kSmallAllreduceBytes) {
      // Ours rather than Gloo's ring, whose receive scratch buffer no abort can reach (abort_signal.h).
      const auto n = static_cast<size_t>(size());
      std::vector<size_t> counts(n, count / n);
      for (size_t p = 0; p < count % n; ++p) ++counts[p];
      return ring(data, counts, type, op, true);
    }
    const uint32_t tag = nextTag();
    gloo::AllreduceOptions opts(context_);
    Watched watched(options_.abort);
    auto buf = buffer(watched, data, count * elementSize(type));
    switch (elementSize(type)) {
      case 1: return runAllreduce<uint8_t>(opts, std::move(buf), type, op, tag, options_.timeout);
      case 2: return runAllreduce<uint16_t>(opts, std::move(buf), type, op, tag, options_.timeout);
      case 4: return runAllreduce<uint32_t>(opts, std::move(buf), type, op, tag, options_.timeout);
      case 8: return runAllreduce<uint64_t>(opts, std::move(buf), type, op, tag, options_.timeout);
    }
  });
}

void Communicator::broadcast(void* data, size_t bytes, int root) {
  HVD_CHECK(root >= 0 && root < size(), UsageError, "broadcast root ", root, " out of range for scope '",
            options_.scope, "' of size ", size());
  if (bytes == 0 || size() == 1) return;
  guarded("broadcast", [&] {
    gloo::BroadcastOptions opts(context_);
    Watched watched(options_.abort);
    opts.setOutput<uint8_t>(buffer(watched, data, bytes));
    opts.setRoot(root);
    opts.setTag(nextTag());
    opts.setTimeout(options_.timeout);
    gloo::broadcast(opts);
  });
}

void Communicator::allgatherv(const void* in, void* out, const std::vector<size_t>& bytesPerRank) {
  HVD_INTERNAL_ASSERT(bytesPerRank.size() == static_cast<size_t>(size()), "allgatherv counts for ",
                      bytesPerRank.size(), " ranks, scope size ", size());
  const size_t mine = bytesPerRank[rank()];
  if (size() == 1) {
    if (mine && in != out) std::memmove(out, in, mine);
    return;
  }
  if (std::accumulate(bytesPerRank.begin(), bytesPerRank.end(), size_t{0}) == 0) return;
  guarded("allgatherv", [&] {
    gloo::AllgathervOptions opts(context_);
    Watched watched(options_.abort);
    // Gloo wants a non-null input even for zero bytes; it copies it into its slot of out.
    const size_t total = std::accumulate(bytesPerRank.begin(), bytesPerRank.end(), size_t{0});
    opts.setInput<uint8_t>(buffer(watched, in ? in : out, mine));
    opts.setOutput<uint8_t>(buffer(watched, out, total), bytesPerRank);
    opts.setTag(nextTag());
    opts.setTimeout(options_.timeout);
    gloo::allgatherv(opts);
  });
}

void Communicator::alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                             const std::vector<size_t>& recvBytes) {
  HVD_INTERNAL_ASSERT(sendBytes.size() == static_cast<size_t>(size()) &&
                          recvBytes.size() == static_cast<size_t>(size()),
                      "alltoallv counts for ", sendBytes.size(), "/", recvBytes.size(), " ranks, scope size ",
                      size());
  if (size() == 1) {
    if (sendBytes[0] && in != out) std::memmove(out, in, sendBytes[0]);
    return;
  }
  guarded("alltoallv", [&] {
    gloo::AlltoallvOptions opts(context_);
    std::vector<int64_t> send(sendBytes.begin(), sendBytes.end());
    std::vector<int64_t> recv(recvBytes.begin(), recvBytes.end());
    // Gloo rejects null pointers even for empty buffers.
    static uint8_t empty;
    const auto sum = [](const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); };
    Watched watched(options_.abort);
    opts.setInput<uint8_t>(buffer(watched, in ? in : &empty, sum(sendBytes)), send);
    opts.setOutput<uint8_t>(buffer(watched, out ? out : &empty, sum(recvBytes)), recv);
    opts.setTag(nextTag());
    opts.setTimeout(options_.timeout);
    gloo::alltoallv(opts);
  });
}

namespace {
// Gloo's own collectives use slot prefixes 0x01-0x08 (gloo/types.h).
constexpr uint8_t kReduceScatterSlotPrefix = 0x40;
constexpr uint8_t kAllgatherSlotPrefix = 0x42;
// The ring's segment (see ring()): small enough that reducing one overlaps the next one's transfer, large
// enough that per-message costs stay small.
constexpr size_t kRingSegmentBytes = size_t{1} << 20;
// Segments the ring receives ahead (its inbox: kRingWindow segments).
constexpr size_t kRingWindow = 4;
}  // namespace

void Communicator::reduceScatter(void* data, const std::vector<size_t>& counts, DataType type, ReduceOp op) {
  const int n = size();
  HVD_INTERNAL_ASSERT(counts.size() == static_cast<size_t>(n), "reduceScatter counts for ", counts.size(),
                      " ranks, scope size ", n);
  if (n == 1) return;
  if (*std::max_element(counts.begin(), counts.end()) == 0) return;
  guarded("reducescatter", [&] { ring(data, counts, type, op, false); });
}

void Communicator::ring(void* data, const std::vector<size_t>& counts, DataType type, ReduceOp op, bool gather) {
  const int n = size();
  const size_t esize = elementSize(type);
  std::vector<size_t> offsets(n, 0);
  for (int p = 1; p < n; ++p) offsets[p] = offsets[p - 1] + counts[p - 1];
  const size_t total = offsets[n - 1] + counts[n - 1];
  auto* bytes = static_cast<std::byte*>(data);
  const int me = rank(), right = (me + 1) % n, left = (me + n - 1) % n;
  // Blocks move in segments, so that a rank reduces (or forwards) one segment while the next ones arrive,
  // and passes each on as soon as it is complete. A pair delivers in order and both ends cut a block alike,
  // so one slot per phase matches every segment's send with its receive, and receives complete in the order
  // they were posted (the k-th completion on a buffer is its k-th receive).
  const size_t seg = std::max<size_t>(1, kRingSegmentBytes / esize);  // elements
  const auto segments = [&](int b) { return (counts[b] + seg - 1) / seg; };
  const auto length = [&](int b, size_t k) { return std::min(seg, counts[b] - k * seg); };  // elements
  const uint32_t tag = nextTag();
  const auto rs_slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
  const auto ag_slot = gloo::Slot::build(kAllgatherSlotPrefix, tag);
  // Reduce-scatter. Step s receives block me-s-2 from the left (holding s+1 contributions) and adds ours;
  // the block this rank sends at step s+1 is that one, so each segment goes right once reduced. Step 0
  // sends our own block me-1. After n-1 steps block me holds all n; a block is never written after it was
  // sent. With gather, block me's segments start the allgather as they complete. Received segments land
  // in a window of kRingWindow slots of the inbox, kept full across steps: segment i of the whole phase in
  // slot i % kRingWindow, its receive posted when segment i - kRingWindow was reduced.
  struct Piece {
    int step, block;
    size_t k;
  };
  std::vector<Piece> pieces;
  for (int s = 0; s < n - 1; ++s) {
    const int b = (me - s - 2 + 2 * n) % n;
    for (size_t k = 0; k < segments(b); ++k) pieces.push_back({s, b, k});
  }
  const size_t window = std::min(kRingWindow, pieces.size());
  // At least a byte: Gloo refuses a null buffer, also an empty one.
  if (inbox_.size() < std::max<size_t>(1, window * seg * esize)) inbox_.resize(std::max<size_t>(1, window * seg * esize));
  auto out = context_->createUnboundBuffer(bytes, total * esize);
  auto in = context_->createUnboundBuffer(inbox_.data(), window * seg * esize);
  // Declared after the buffers: it detaches them before they are destroyed (the signal may wake them
  // from another thread until then).
  Watched watched(options_.abort);
  watched.watch(out.get());
  watched.watch(in.get());
  size_t sends = 0;
  const auto send = [&](int b, size_t k, const gloo::Slot& slot) {
    out->send(right, slot, (offsets[b] + k * seg) * esize, length(b, k) * esize);
    ++sends;
  };
  const auto post = [&](size_t i) {
    in->recv(left, rs_slot, (i % kRingWindow) * seg * esize, length(pieces[i].block, pieces[i].k) * esize);
  };
  const int first = (me - 1 + n) % n;
  for (size_t k = 0; k < segments(first); ++k) send(first, k, rs_slot);
  for (size_t i = 0; i < window; ++i) post(i);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto [s, b, k] = pieces[i];
    in->waitRecv(options_.timeout);
    std::byte* segment = bytes + (offsets[b] + k * seg) * esize;
    reduce(type, op, segment, segment, inbox_.data() + (i % kRingWindow) * seg * esize, length(b, k));
    if (i + kRingWindow < pieces.size()) post(i + kRingWindow);
    if (s < n - 2) {
      send(b, k, rs_slot);
    } else if (gather) {
      send(b, k, ag_slot);
    }
  }
  // Allgather. Step s receives block me-s-1 straight into place (every receive is posted at once: a
  // segment's region is read by this rank's earlier sends only, which its arrival proves consumed) and
  // forwards each segment but at the last step. Every rank ends with the same bytes.
  for (int s = 0; gather && s < n - 1; ++s) {
    const int b = (me - s - 1 + n) % n;
    for (size_t k = 0; k < segments(b); ++k) {
      out->recv(left, ag_slot, (offsets[b] + k * seg) * esize, length(b, k) * esize);
    }
  }
  for (int s = 0; gather && s < n - 1; ++s) {
    const int b = (me - s - 1 + n) % n;
    for (size_t k = 0; k < segments(b); ++k) {
      out->waitRecv(options_.timeout);
      if (s < n - 2) send(b, k, ag_slot);
    }
  }
  for (size_t i = 0; i < sends; ++i) out->waitSend(options_.timeout);
}

namespace {
constexpr uint8_t kBarrierSlotPrefix = 0x41;
}  // namespace

void Communicator::barrier() {
  if (size() == 1) return;
  // Dissemination barrier (log2(n) rounds: send a byte to rank + 2^k, receive one from rank - 2^k) on
  // buffers of ours, which the abort signal can fail; Gloo's own barrier keeps its buffer to itself. Each
  // round talks to a different pair in each direction, so one slot serves every round.
  guarded("barrier", [&] {
    const int n = size(), me = rank();
    char token = 0, inbox = 0;
    auto out = context_->createUnboundBuffer(&token, 1);
    auto in = context_->createUnboundBuffer(&inbox, 1);
    Watched watched(options_.abort);
    watched.watch(out.get());
    watched.watch(in.get());
    const auto slot = gloo::Slot::build(kBarrierSlotPrefix, nextTag());
    for (int k = 1; k < n; k <<= 1) {
      in->recv((me - k + n) % n, slot);
      out->send((me + k) % n, slot);
      in->waitRecv(options_.timeout);
      out->waitSend(options_.timeout);
    }
  });
}

void Communicator::close(bool orderly) noexcept {
  if (!context_) return;
  small_algorithms_.clear();
  if (orderly && !failed_ && size() > 1) {
    try {
      barrier();
    } catch (const std::exception&) {
      // A peer is gone: its sockets are closed already, nothing outstanding can be released by it.
    }
  }
  const auto ticking = device_->keepTicking();  // each pair's close waits for a loop tick
  context_.reset();
}

}  // namespace hvd::gloo_backend
