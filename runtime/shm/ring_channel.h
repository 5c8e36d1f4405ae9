// RingChannel: a control-plane Channel (runtime/channel.h) between two processes of one host whose messages
// travel through shared memory: two Rings (ring.h) in a mapping that the coordinator's side creates and hands
// over the channel's unix socket (SCM_RIGHTS) when the worker asks for it in its hello.
//
// Why: between two busy-polling threads a message and its answer take about 3 us over a unix socket (two
// system calls and a wake-up each way) and a fraction of a microsecond through memory the polling thread
// reads; a small collective is two such messages.
//
// The socket stays, for three things (receive() reads it only when a poll() found it readable, or for a
// diverted message):
//   - wake-ups: a reader that blocks in poll() announces it (Ring::announceSleep, through prepareToBlock());
//     a writer that finds the announcement sends a zero-length frame, which the reader drops;
//   - messages too big for the ring (above Ring::largest()): the whole message goes over the socket first,
//     then a diverted record takes its place in the ring, so the reader gets every message in order;
//   - the connection itself: its close is how a lost peer shows (LossWatcher, receive()'s EOF), as for any
//     Channel. A message written to the ring of a peer that died is lost like one left in its socket buffer.
// A writer whose ring stays full (the reader stopped reading) waits up to `timeout`, then throws
// NetworkError naming the peer; it fails at once when the peer closes the socket meanwhile.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "runtime/channel.h"
#include "runtime/shm/ring.h"
#include "runtime/shm/segment.h"

namespace hvd::runtime::shm {

class RingChannel final : public Channel {
 public:
  // Bytes of each direction's ring. A cached operation's request or response takes tens of bytes, a first
  // negotiation of many new names some kilobytes; messages above a quarter of the ring go through the socket.
  // The mapping is prefaulted when the channel is made (Segment's prefault): with pages faulted in one by
  // one, the rings' first lap cost a fused batch of 100 operations about 15 % (a 256 KiB ring took about
  // 9,000 operations to wrap), and a smaller ring has fewer cache lines for the two threads to pass around.
  static constexpr size_t kCapacity = 64 * 1024;

  // The coordinator's side: creates the mapping and hands it to the peer at the other end of fd (a unix
  // socket; the peer asked for it and waits in accept()). Takes fd. Throws BackendError naming the peer.
  static std::unique_ptr<RingChannel> offer(int fd, std::string peer, std::chrono::milliseconds timeout);
  // The worker's side: waits up to timeout for the mapping from the coordinator. Takes fd. Throws
  // NetworkError (nothing came) or BackendError (a wrong mapping) naming the peer.
  static std::unique_ptr<RingChannel> accept(int fd, std::string peer, std::chrono::milliseconds timeout);

  void send(const std::vector<char>& payload) override;
  bool receive(std::vector<std::vector<char>>& out) override;
  bool hasBuffered() const override;
  bool prepareToBlock() override;
  void unblocked() override;
  void readable() override { socket_due_ = true; }

 private:
  RingChannel(int fd, std::string peer, Segment segment, bool coordinator, std::chrono::milliseconds timeout);
  // Retries push until it succeeds; throws NetworkError when the peer closed or timeout_ passed.
  template <typename Push>
  void pushWaiting(Push&& push);
  void wakeReader();

  Segment segment_;
  Ring out_, in_;
  std::chrono::milliseconds timeout_;
  std::deque<std::vector<char>> diverted_;  // messages from the socket, each waiting for its record
  // Whether receive() reads the socket: a poll() saw it readable (readable()), or a diverted record is met.
  // Not on every call: a thread polling for a reply calls receive() millions of times a second, and a
  // system call each time was a third of its loop.
  bool socket_due_ = true;
};

}  // namespace hvd::runtime::shm
