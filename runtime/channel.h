// The control plane's transport: framed messages ([u32 length][payload]) over a stream socket between each
// worker and the coordinator (rank 0), separate from Gloo's data-plane pairs: a unix socket for the ranks of
// rank 0's host and network namespace, TCP for the others (runtime/control_plane.cc picks).
//
// Why not Gloo for negotiation: Gloo has no non-blocking receive and its timeouts close every pair, so
// an idle rank cannot wait for "someone has work" without either spinning (Horovod negotiates every
// 1 ms cycle, idle or not) or timing out when ranks are apart longer than HOROVOD_GLOO_TIMEOUT_SECONDS.
// A socket can be poll()ed together with the eventfd that wakes the background thread on a local
// submit, so the runtime is event-driven and an idle job costs nothing, and a dead peer shows up at
// once as EOF.
//
// The socket is the channel's transport here; shm::RingChannel (runtime/shm/ring_channel.h) carries the
// messages of a unix socket through shared memory instead and keeps the socket for wake-ups and its close.
//
// Threading: a Channel is used by one thread (the background thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <sys/socket.h>
#include <sys/un.h>

namespace hvd::runtime {

class Channel {
 public:
  Channel(int fd, std::string peer);
  virtual ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }

  // Writes one message; blocks until it is in the kernel. Throws NetworkError naming the peer.
  virtual void send(const std::vector<char>& payload);

  // Reads whatever is available without blocking and appends the complete messages to out.
  // Returns false when the peer closed the connection (or it failed: error() says how).
  virtual bool receive(std::vector<std::vector<char>>& out);

  // Blocks for one whole message (setup only). Throws NetworkError on timeout or EOF.
  std::vector<char> receiveOne(std::chrono::milliseconds timeout);

  const std::string& error() const { return error_; }

  // True when whole messages wait in memory (poll() on fd() would not report them).
  virtual bool hasBuffered() const { return !early_.empty(); }

  // Around a blocking poll() on fd(): prepareToBlock() returns false when a message is there already (then
  // the caller must not block); once the poll() returned, the caller calls unblocked() (after either answer).
  // A socket reports every message to poll() itself, so here they do nothing.
  virtual bool prepareToBlock() { return true; }
  virtual void unblocked() {}
  // A poll() found fd() readable (or closed). A channel whose receive() reads the socket only when told
  // (shm::RingChannel) reads it at the next receive(); a plain socket reads it every time anyway.
  virtual void readable() {}

  // Gives up the socket (this Channel no longer closes it); nothing may have been received yet.
  int release();

 private:
  int fd_;
  std::string peer_;
  std::vector<char> buffer_;  // bytes received, not yet a whole message
  std::vector<std::vector<char>> early_;  // whole messages that arrived behind receiveOne()'s
  std::string error_;
};

// Listening socket on host (numeric address), port 0: ephemeral. Returns the fd; sets port.
int listenTcp(const std::string& host, uint16_t& port);
// Connects to host:port, retrying refused connections until timeout. Throws NetworkError.
int connectTcp(const std::string& host, uint16_t port, std::chrono::milliseconds timeout);

// The same over a unix stream socket in the abstract namespace (a name, no file; gone with its last fd), for
// the ranks on the coordinator's host: a message and its answer between two busy-polling threads take about
// 3 us there against 5.5 us over TCP loopback (2 vCPUs). An abstract name belongs to one network namespace:
// a rank in another cannot reach it and connects over TCP.
// Listens on a fresh name ("hvd-ctl-<pid>-<random>"). Returns the fd; sets name. Throws NetworkError.
int listenUnix(std::string& name);
// Connects to the abstract name: the fd, or -1 when nothing listens there in this network namespace (or the
// listener's backlog is full). Throws NetworkError for any other failure.
int connectUnix(const std::string& name);
// `name` as an abstract unix socket address (sun_path[0] = 0, then the name, no terminator).
socklen_t abstractAddress(const std::string& name, sockaddr_un& addr);

// Accepts one connection on whichever of listen_fds is ready first (blocking up to timeout). Sets peer to the
// caller's address, or "pid N on this host (unix socket)". Throws NetworkError on timeout.
int acceptAny(const std::vector<int>& listen_fds, std::chrono::milliseconds timeout, std::string& peer);

// The numeric address this process should use for peers to reach it: the first IPv4 (else IPv6)
// address of iface when given; else 127.0.0.1 when the whole job is on this host; else the local address
// this host uses to reach `route_to` (the rendezvous server: the kernel's routing decision, which needs no
// interface name that every host shares); else the address the host name resolves to. Throws
// NetworkError naming the interface or host.
std::string localAddress(const std::string& iface, bool single_host, const std::string& route_to = "");

}  // namespace hvd::runtime
