#include "runtime/shm/ring_channel.h"

#include <poll.h>
#include <sched.h>

#include "base/error.h"
#include "base/unique_fd.h"

namespace hvd::runtime::shm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kScope = "control";
// The mapping: the worker's ring to the coordinator, then the coordinator's to the worker.
const size_t kMappingBytes = 2 * Ring::bytes(RingChannel::kCapacity);

}  // namespace

RingChannel::RingChannel(int fd, std::string peer, Segment segment, bool coordinator,
                         std::chrono::milliseconds timeout)
    : Channel(fd, std::move(peer)),
      segment_(std::move(segment)),
      out_(segment_.data() + (coordinator ? Ring::bytes(kCapacity) : 0), kCapacity),
      in_(segment_.data() + (coordinator ? 0 : Ring::bytes(kCapacity)), kCapacity),
      timeout_(timeout) {}

std::unique_ptr<RingChannel> RingChannel::offer(int fd, std::string peer, std::chrono::milliseconds timeout) {
  UniqueFd socket(fd);
  UniqueFd mem;
  Segment segment = Segment::create(kMappingBytes, kScope, mem, /*prefault=*/true);
  sendFd(socket.get(), mem.get(), kScope);
  // The socket is non-blocking (Channel reads without blocking): sendFd's one byte fits in an empty buffer.
  return std::unique_ptr<RingChannel>(
      new RingChannel(socket.release(), std::move(peer), std::move(segment), true, timeout));
}

std::unique_ptr<RingChannel> RingChannel::accept(int fd, std::string peer,
                                                 std::chrono::milliseconds timeout) {
  UniqueFd socket(fd);
  pollfd p{socket.get(), POLLIN, 0};
  int rv;
  do {
    rv = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (rv < 0 && errno == EINTR);
  HVD_CHECK(rv > 0, NetworkError, "control connection to ", peer, ": no shared-memory rings from it within ",
            timeout.count(), " ms during setup");
  Segment segment = Segment::attach(UniqueFd(receiveFd(socket.get(), kScope)), kMappingBytes, kScope,
                                    "the coordinator runs another libhvd", /*prefault=*/true);
  return std::unique_ptr<RingChannel>(
      new RingChannel(socket.release(), std::move(peer), std::move(segment), false, timeout));
}

template <typename Push>
void RingChannel::pushWaiting(Push&& push) {
  if (push()) return;
  const auto deadline = Clock::now() + timeout_;
  for (long tries = 0;; ++tries) {
    wakeReader();  // it may have announced sleep before the ring filled; a full ring is read again soon
    if (tries < 1000) {
      ::sched_yield();
    } else {
      pollfd p{fd(), POLLRDHUP, 0};
      if (::poll(&p, 1, 1) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
        throw NetworkError(detail::concat("sending to ", peer(), " failed: the connection closed"));
      }
      HVD_CHECK(Clock::now() < deadline, NetworkError, "sending to ", peer(),
                " failed: its shared-memory ring stayed full for ", timeout_.count(),
                " ms (it stopped reading)");
    }
    if (push()) return;
  }
}

void RingChannel::wakeReader() {
  if (out_.takeSleeper()) Channel::send({});
}

void RingChannel::send(const std::vector<char>& payload) {
  if (payload.size() > out_.largest()) {
    // All of it is in the socket before its record appears, so the reader that meets the record finds it
    // there.
    Channel::send(payload);
    pushWaiting([&] { return out_.pushDiverted(); });
  } else {
    pushWaiting([&] { return out_.push(payload.data(), static_cast<uint32_t>(payload.size())); });
  }
  wakeReader();
}

bool RingChannel::receive(std::vector<std::vector<char>>& out) {
  std::vector<std::vector<char>> frames;
  bool open = true;
  if (socket_due_) {
    socket_due_ = false;
    open = Channel::receive(frames);
  }
  auto keep = [&] {
    for (auto& f : frames) {
      if (!f.empty()) diverted_.push_back(std::move(f));  // empty: a wake-up
    }
    frames.clear();
  };
  keep();
  std::vector<char> message;
  bool diverted = false;
  while (in_.pop(message, diverted)) {
    if (!diverted) {
      out.push_back(std::move(message));
      continue;
    }
    if (diverted_.empty()) {
      open = Channel::receive(frames) && open;  // sent in full before its record: in the socket now
      keep();
    }
    HVD_CHECK(!diverted_.empty(), NetworkError, "control connection to ", peer(),
              ": a message that its ring says went over the socket is not there");
    out.push_back(std::move(diverted_.front()));
    diverted_.pop_front();
  }
  return open;
}

bool RingChannel::hasBuffered() const { return Channel::hasBuffered() || !in_.empty(); }

bool RingChannel::prepareToBlock() { return in_.announceSleep(); }

void RingChannel::unblocked() { in_.awake(); }

}  // namespace hvd::runtime::shm
