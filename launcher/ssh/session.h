// One authenticated SSH connection (libssh2) driven by a boost::asio event loop, and its channels.
//
// Threading and I/O model. libssh2 runs in non-blocking mode on a socket owned by an Asio io_context;
// every call into libssh2 for a session happens on that context's thread (sessions are not thread-safe,
// and need not be: no call blocks). Connecting (TCP, key exchange, host key check, authentication) is a
// coroutine that retries each libssh2 call after waiting for the direction libssh2 reports blocked.
// Once connected, ONE pump per session services all of its channels (opening, exec, stdin, stdout,
// stderr, exit, close) in rounds until no call makes progress, then waits for the socket. A per-channel
// wait would be wrong: reading for one channel may pull another channel's packets into libssh2's queue,
// leaving the socket quiet while data waits. libssh2 also requires that a call which blocked half-way
// through sending a packet be repeated before any other call sends; the pump honours that.
// Why not a thread pool with blocking libssh2: 32 ranks on 8 hosts would need 8 threads on a 2-core
// machine, and teardown (signal, cancel) would need cross-thread wake-ups; the event loop needs none.
#pragma once

#include <utility>  // before Boost.Asio: its awaitable.hpp uses std::exchange without including it

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/launcher.h"
#include "launcher/options.h"

struct _LIBSSH2_SESSION;
struct _LIBSSH2_CHANNEL;

namespace hvd::launcher::ssh {

// A connection whose sent bytes stay unacknowledged this long is dropped (TCP_USER_TIMEOUT).
inline constexpr std::chrono::milliseconds kDeadConnection{10000};

// Where to connect and as whom, after ~/.ssh/config and the command line are applied.
struct Target {
  std::string alias;     // as the user wrote it (-H); used in messages
  std::string hostname;  // what is resolved and looked up in known_hosts
  std::string user;
  uint16_t port = 22;
  std::vector<std::string> identity_files;  // -i first, then the config's IdentityFile; empty: defaults

  // "user@hostname:port", plus " (alias)" when the alias differs: the prefix of every message.
  std::string describe() const;
};

struct ConnectOptions {
  KnownHostsPolicy known_hosts = KnownHostsPolicy::kAcceptNew;
  std::string known_hosts_file;  // absolute path
  std::string home;              // for the default identities ~/.ssh/id_{ed25519,ecdsa,rsa}
  bool use_agent = true;         // SSH_AUTH_SOCK
  std::chrono::milliseconds timeout = SshOptions::kDefaultConnectTimeout;  // TCP + handshake + auth
};

// How a channel ended.
struct ChannelEnd {
  std::optional<int> exit_code;    // exit-status from the server
  std::optional<int> exit_signal;  // exit-signal from the server (number; 0 if the name is unknown)
  std::string signal_name;         // as sent ("KILL")
  std::string error;               // non-empty: the channel or the connection failed; text says why
};

// Receives one channel's events on the session's thread: any number of onData, then one onEnd.
class ChannelHandler {
 public:
  virtual ~ChannelHandler() = default;
  virtual void onData(Stream stream, std::string_view bytes) = 0;
  virtual void onEnd(const ChannelEnd& end) = 0;
};

class Session;

// A command running on the remote host. Owned by its session; the handle stays valid while the caller
// holds the shared_ptr, and methods become no-ops once the channel ended.
class Channel {
 public:
  // Queues bytes for the remote command's stdin.
  void write(std::string_view bytes);
  // Sends EOF on stdin once the queued bytes are out.
  void closeStdin();
  // Writes `beat` every kHeartbeatInterval while the channel runs (the remote watchdog's pulse): an empty
  // line for the bootstrap's watchdog, a heartbeat frame for hvd-proxy.
  void enableHeartbeat(std::string beat = "\n") { heartbeat_ = std::move(beat); }
  // stdin bytes queued and not yet accepted by libssh2 (for backpressure on forwarded stdin).
  size_t queued() const { return out_.size(); }
  // Detaches the handler: no more events (used when the owner goes away first).
  void detach() { handler_ = nullptr; }
  bool ended() const { return state_ == State::kDone; }

 private:
  friend class Session;
  enum class State { kOpening, kExec, kRunning, kDraining, kClosing, kDone };
  std::weak_ptr<Session> session_;
  ChannelHandler* handler_ = nullptr;
  _LIBSSH2_CHANNEL* channel_ = nullptr;
  State state_ = State::kOpening;
  std::string command_;
  std::string out_;  // stdin bytes not yet accepted by libssh2
  bool close_stdin_ = false;
  bool stdin_closed_ = false;
  std::string heartbeat_;  // empty: no heartbeat
  bool stdout_eof_ = false;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Connects, checks the host key, authenticates. Throws LaunchError with ONE line:
  // "ssh <target>: <cause>", the cause being one of: cannot resolve, connection refused, unreachable,
  // timed out after Ns (during <phase>), handshake failed, host key mismatch / unknown host key (with
  // SHA256 fingerprint), authentication failed (tried: ...). Prints one line to stderr when accept-new
  // adds a key to known_hosts.
  static boost::asio::awaitable<std::shared_ptr<Session>> connect(Target target, ConnectOptions options);

  // Starts `command` on a new channel; `input` is queued for its stdin right after exec. Events go to
  // `handler`. Never throws for remote failures: they arrive as onEnd with an error.
  std::shared_ptr<Channel> exec(std::string command, std::string input, ChannelHandler* handler);

  // Moves the socket to another event loop; open channels carry on there (hvd-proxy channels opened for
  // the reachability check stay open for the job).
  void rebind(boost::asio::io_context& io);

  const Target& target() const { return target_; }
  // Channels not yet ended.
  size_t openChannels() const;
  bool broken() const { return !error_.empty(); }

 private:
  friend class Channel;  // write() and closeStdin() wake the pump
  enum class Op { kOpen, kExec, kWrite, kEof, kRead, kReadStderr, kWaitClosed, kFree };

  Session(boost::asio::any_io_executor executor, Target target);
  boost::asio::awaitable<void> handshake(const ConnectOptions& options);
  boost::asio::awaitable<void> waitSocket();
  void checkHostKey(const ConnectOptions& options);
  boost::asio::awaitable<void> authenticate(const ConnectOptions& options);
  [[noreturn]] void fail(const std::string& cause) const;
  std::string lastError() const;

  void schedule();
  void service();
  // One step of `ch`: returns true if anything progressed. Sets blocked_ when libssh2 must be re-called.
  bool step(Channel& ch);
  int run(Channel& ch, Op op);
  void finish(Channel& ch, ChannelEnd end);
  void breakSession(const std::string& why);
  void armWaits();
  // Waits for the socket to be ready for `wait` (armed, until then, in *armed), then services the session.
  void armSocketWait(boost::asio::ip::tcp::socket::wait_type wait, bool Session::*armed);
  void onHeartbeat();

  boost::asio::ip::tcp::socket socket_;
  Target target_;
  _LIBSSH2_SESSION* session_ = nullptr;
  std::list<std::shared_ptr<Channel>> channels_;
  std::string error_;                   // set once the connection is unusable
  Channel* blocked_channel_ = nullptr;  // libssh2 wants this call repeated first
  Op blocked_op_ = Op::kOpen;
  bool scheduled_ = false;
  bool read_armed_ = false;
  bool write_armed_ = false;
  bool heartbeat_armed_ = false;
  std::unique_ptr<boost::asio::steady_timer> heartbeat_timer_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace hvd::launcher::ssh
