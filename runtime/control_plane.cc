// The control plane: rank 0's connections to every other rank (negotiation travels on them), the
// watcher that fails the data path when one closes, and rank 0's duties on them beside negotiation (the
// responses broadcast, the waits reported, the elastic round checks). See runtime_impl.h.

#include "runtime/runtime_impl.h"

#include <algorithm>
#include <random>
#include <sstream>
#include <sys/socket.h>
#include <unistd.h>

#include "rendezvous/round.h"
#include "runtime/shm/ring_channel.h"

namespace hvd::runtime {

// Rank 0 listens on TCP (every rank can reach it) and on an abstract unix socket (faster, for the ranks of its
// host and network namespace) and publishes "address port nonce unix-name"; a worker connects over the unix
// socket when it reaches it, else over TCP. Over the unix socket the worker asks for shared-memory rings
// (runtime/shm/ring_channel.h) unless HVD_SHARED_MEMORY=0.
void Runtime::Impl::connectControlPlane() {
  if (options_.size == 1) return;
  const std::string address = localAddress(options_.iface, singleHost(), options_.rendezvous_addr.value_or(""));
  if (options_.rank == 0) {
    uint16_t port = 0;
    std::string unix_name;
    std::vector<int> listen_fds{listenTcp(address, port)};
    try {
      listen_fds.push_back(listenUnix(unix_name));
      const uint64_t nonce = std::random_device{}() * (uint64_t{1} << 32) ^ std::random_device{}();
      const std::string value = detail::concat(address, " ", port, " ", nonce, " ", unix_name);
      store_->set(kControlKey, rendezvous::Bytes(value.begin(), value.end()));
      worker_channels_.resize(options_.size);
      const auto deadline = Clock::now() + options_.gloo_timeout;
      for (int joined = 1; joined < options_.size; ++joined) {
        std::string peer;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        auto channel = std::make_unique<Channel>(acceptAny(listen_fds, left, peer), peer);
        const Hello hello = decodeHello(channel->receiveOne(options_.gloo_timeout));
        HVD_CHECK(hello.magic == Hello::kMagic && hello.nonce == nonce, NetworkError,
                  "control connection from ", peer, " is not from this job's libhvd (bad hello)");
        HVD_CHECK(hello.rank > 0 && hello.rank < options_.size && !worker_channels_[hello.rank], NetworkError,
                  "control connection from ", peer, " claims rank ", hello.rank, " (invalid or duplicate)");
        if (hello.rings) {
          sockaddr_storage local{};
          socklen_t len = sizeof local;
          HVD_CHECK(::getsockname(channel->fd(), reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
                        local.ss_family == AF_UNIX,
                    NetworkError, "control connection from ", peer,
                    " asks for shared-memory rings but is not a unix socket");
          channel = shm::RingChannel::offer(channel->release(), peer, options_.gloo_timeout);
        }
        worker_channels_[hello.rank] = std::move(channel);
      }
    } catch (...) {
      for (int fd : listen_fds) ::close(fd);
      throw;
    }
    for (int fd : listen_fds) ::close(fd);
    store_->deleteKey(kControlKey);  // every rank has read it; a later init publishes a fresh one
    return;
  }
  const auto raw = store_->get(kControlKey, options_.rendezvousTimeout());
  std::istringstream in(std::string(raw.begin(), raw.end()));
  std::string host, unix_name;
  uint16_t port = 0;
  uint64_t nonce = 0;
  in >> host >> port >> nonce >> unix_name;
  HVD_CHECK(!host.empty() && port != 0 && !unix_name.empty(), StoreError, "malformed control-plane address '",
            std::string(raw.begin(), raw.end()), "' in ", store_->describe(), " key ", kControlKey);
  Hello hello;
  hello.nonce = nonce;
  hello.rank = options_.rank;
  if (const int fd = connectUnix(unix_name); fd >= 0) {
    coordinator_channel_ = std::make_unique<Channel>(fd, detail::concat("rank 0 at unix socket @", unix_name));
    // On rank 0's host the messages can travel through shared memory, unless the job keeps off it.
    hello.rings = options_.shared_memory;
  } else {
    coordinator_channel_ = std::make_unique<Channel>(connectTcp(host, port, options_.gloo_timeout),
                                                     detail::concat("rank 0 at ", host, ":", port));
  }
  coordinator_channel_->send(encode(hello));
  if (hello.rings) {
    const std::string peer = coordinator_channel_->peer();
    coordinator_channel_ = shm::RingChannel::accept(coordinator_channel_->release(), peer, options_.gloo_timeout);
  }
  log(LogLevel::kDebug, detail::concat("control plane: connected to ", coordinator_channel_->peer(),
                                       hello.rings ? " (messages through shared-memory rings)" : ""));
}

void Runtime::Impl::watchForLostPeers() {
  std::vector<std::pair<int, std::string>> fds;
  if (coordinator_channel_) fds.emplace_back(coordinator_channel_->fd(), "the coordinator (rank 0)");
  for (size_t r = 1; r < worker_channels_.size(); ++r) {
    if (worker_channels_[r]) fds.emplace_back(worker_channels_[r]->fd(), detail::concat("rank ", r));
  }
  if (fds.empty()) return;
  const bool worker = coordinator_channel_ != nullptr;
  watcher_ = std::make_unique<LossWatcher>(std::move(fds), [signal = abort_signal_, worker](const std::string& what) {
    // A worker: the coordinator stopped the job (it tells why in its abort list, read afterwards) or is gone.
    // The coordinator: a worker's process died or its host went away.
    const std::string why =
        worker ? detail::concat(what, " closed its control connection: the job is stopping (a peer was lost, or "
                                      "the coordinator failed)")
               : detail::concat(what, " closed its control connection to the coordinator: its process died or its "
                                      "host went away");
    signal->abort(std::make_exception_ptr(PeerLostError(why)));
  });
}

void Runtime::Impl::takeCoordinatorsReason() {
  if (!coordinator_channel_ || !abort_signal_->error()) return;
  std::vector<std::vector<char>> messages;
  coordinator_channel_->receive(messages);  // non-blocking: whatever came before the connection closed
  for (const auto& m : messages) {
    try {
      const ResponseList list = decodeResponseList(m);
      if (!list.abort) continue;
      reason_ = list.shutdown_reason;
      peer_lost_ = list.peer_lost;
      return;
    } catch (const std::exception&) {
      return;  // a cut-off message: keep the watcher's reason
    }
  }
}

std::optional<std::vector<WaitRegistry::Key>> Runtime::Impl::dueWaitReport() {
  const uint64_t version = waits_->version();
  if (version == waits_sent_version_) return std::nullopt;
  // changedAt() takes the registry's lock: read once per change, not on every call.
  if (version != waits_seen_version_) {
    waits_seen_version_ = version;
    waits_due_ = waits_->changedAt() + kWaitReportDelay;
  }
  if (Clock::now() < waits_due_) return std::nullopt;
  auto snap = waits_->snapshot();
  waits_sent_version_ = snap.version;
  if (snap.keys == waits_sent_) return std::nullopt;
  waits_sent_ = snap.keys;
  return std::move(snap.keys);
}

void Runtime::Impl::publishWaits() {
  const auto now = Clock::now();
  next_waits_ = now + ReportStats::kWaitsInterval;
  auto waits = coordinator_->waits(now, ReportStats::kWaitsMinAge, ReportStats::kMaxWaits);
  if (waits.empty() && !waits_shown_) return;
  waits_shown_ = !waits.empty();
  report_stats_->publishWaits(std::move(waits), now);
}

void Runtime::Impl::checkRoundNews() {
  next_round_check_ = Clock::now() + kRoundCheckInterval;
  rendezvous::RoundNews news;
  try {
    news = round_server_->roundNews(options_.elastic_round);
  } catch (const Error& e) {
    log(LogLevel::kDebug, detail::concat("elastic: cannot ask the rendezvous server for new rounds: ", e.what()));
    return;
  }
  // A round that only adds members waits for the next commit (hvd_elastic_check_host_updates); one without
  // a member of this round means a peer is gone, even if its connections never close (a host cut off).
  if (news.round <= options_.elastic_round || !(news.changes & rendezvous::kRoundRemoved)) return;
  ResponseList abort;
  abort.shutdown = true;
  abort.abort = true;
  abort.peer_lost = true;
  abort.shutdown_reason = detail::concat("the job re-formed without a member of elastic round ", options_.elastic_round,
                                         " (round ", news.round, " began): a peer was lost");
  broadcastToWorkers(abort);
  throw PeerLostError(abort.shutdown_reason);
}

void Runtime::Impl::broadcastToWorkers(const ResponseList& list) {
  if (list.abort) abort_sent_ = true;
  if (std::none_of(worker_channels_.begin(), worker_channels_.end(),
                   [](const auto& c) { return c != nullptr; })) {
    return;  // a job of one rank, or every worker gone
  }
  const auto bytes = encode(list);
  std::optional<PeerLostError> lost;
  for (size_t r = 0; r < worker_channels_.size(); ++r) {
    auto& c = worker_channels_[r];
    if (!c) continue;
    try {
      c->send(bytes);
    } catch (const std::exception& e) {
      // The worker is gone (its socket is closed or reset). The others still get this list; then the loop
      // stops, and run() tells them to abort.
      c.reset();
      if (!lost) lost.emplace(detail::concat("rank ", r, " is unreachable from the coordinator (", e.what(), ")"));
    }
  }
  if (lost && !list.abort) throw *lost;
}

}  // namespace hvd::runtime
