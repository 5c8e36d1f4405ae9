// The launcher's side of hvd-proxy (launcher/ssh/proxy.h): one ProxyHost per host speaks the frames of
// launcher/ssh/proxy_protocol.h over a ProxyLink, and one ProxyWorker per rank started through it.
//
// Two transports use it, and differ only in the link:
//   ssh    an exec channel that runs hvd-proxy on the host (launcher/ssh/launcher.cc); a host without a
//          usable hvd-proxy falls back to one channel per rank;
//   slurm  a TCP connection that hvd-proxy, started on every node by one srun step, opens back to hvdrun
//          (launcher/slurm/launcher.h); there is no fallback.
// Bytes from the proxy reach ProxyHost::onData (the link's stdout; stderr carries the proxy's own
// diagnostics, unframed), and the link's end ProxyHost::onEnd, as ssh channel events (ChannelEnd).
//
// Threading: everything on the loop that services the link (the transport's private loop during the
// reachability check, then the job's loop).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/launcher.h"
#include "launcher/ssh/proxy_protocol.h"
#include "launcher/ssh/session.h"

namespace hvd::launcher::ssh {

// The state a remote worker (per-rank channel or hvd-proxy rank) ends in.
WorkerState endState(const ExitStatus& status, bool stop_requested);

// The byte stream to one hvd-proxy.
class ProxyLink {
 public:
  virtual ~ProxyLink() = default;
  // Queues bytes for the proxy.
  virtual void write(std::string_view bytes) = 0;
  // Bytes queued and not yet sent (backpressure on forwarded stdin).
  virtual size_t queued() const = 0;
  // EOF to the proxy once the queued bytes are out (it then ends, SIGTERM to its ranks if any still run);
  // no event reaches the ProxyHost after this.
  virtual void close() = 0;
};

// What a ProxyWorker needs from the transport that made it.
class ProxyTransport {
 public:
  virtual ~ProxyTransport() = default;
  virtual boost::asio::io_context& jobLoop() = 0;
  // Where rank 0's forwarded stdin is read from.
  virtual int stdinFd() const = 0;
  // A worker for a rank whose host has no usable hvd-proxy (ssh: a channel of its own).
  virtual std::unique_ptr<Worker> startWithoutProxy(const LaunchSpec& spec, WorkerEvents& events) = 0;
};

class ProxyWorker;

// One host's hvd-proxy. Owned by the transport; workers hold weak references.
class ProxyHost : public ChannelHandler, public std::enable_shared_from_this<ProxyHost> {
 public:
  enum class State {
    kOpening,   // link requested, no hello yet
    kReady,     // hello received: frames flow
    kFallback,  // no usable hvd-proxy there: its ranks start without it
    kFailed,    // link or proxy failed: error() says why
  };

  // `label` starts the lines of the proxy's diagnostics ("ssh user@host", "srun node3"); `where` names
  // the host in errors; `path` is the proxy program there; `fallback` says what happens to the ranks of
  // a host without a usable proxy ("starting its workers with one ssh channel each").
  ProxyHost(std::string label, std::string where, std::string path, std::string fallback = "")
      : label_(std::move(label)), where_(std::move(where)), path_(std::move(path)), fallback_(std::move(fallback)) {}
  ~ProxyHost() override { close(); }

  // The link is open (the proxy's hello is still to come).
  void attach(std::unique_ptr<ProxyLink> link);
  void failToOpen(const std::string& error) { fail(error); }
  // EOF to the proxy: it ends (its ranks get SIGTERM if any still run).
  void close();

  State state() const { return state_; }
  const std::string& error() const { return error_; }
  size_t queued() const { return link_ ? link_->queued() : 0; }

  // Asks the proxy to connect to address:port; checkDone() turns true with checkError() set on failure
  // (also when the host fails or falls back: then the caller checks another way).
  void requestCheck(const std::string& address, uint16_t port);
  bool checkDone() const { return check_done_; }
  const std::string& checkError() const { return check_error_; }

  void add(ProxyWorker* worker, int rank, boost::asio::io_context& io);
  void remove(int rank) { workers_.erase(rank); }
  // No rank of this proxy is running or waiting to start.
  bool idle() const { return workers_.empty(); }
  void send(const std::string& frame) {
    if (link_ && state_ == State::kReady) link_->write(frame);
  }

  void onData(Stream stream, std::string_view bytes) override;
  void onEnd(const ChannelEnd& end) override;

  static constexpr std::chrono::milliseconds kCheckTimeout{5000};

 private:
  void sendCheck();
  void handle(const Frame& frame);
  void becomeReady();
  void fallBack(const std::string& why);
  void fail(const std::string& why);

  std::string label_, where_, path_, fallback_;
  State state_ = State::kOpening;
  std::unique_ptr<ProxyLink> link_;
  std::string before_hello_;  // stdout before the magic (a chatty login script)
  FrameDecoder decoder_;
  std::string stderr_tail_;       // an unfinished line of the proxy's diagnostics
  std::string last_stderr_line_;  // the last complete one, for error messages
  std::string error_;
  std::string check_;  // a check frame waiting for the hello
  bool check_done_ = true;
  std::string check_error_;
  std::map<int, ProxyWorker*> workers_;  // ranks sent or waiting for the hello, until their exit
};

// A rank started through its host's proxy; on a host without one, the transport's own worker takes its
// place.
class ProxyWorker : public Worker {
 public:
  ProxyWorker(ProxyTransport& transport, LaunchSpec spec, WorkerEvents& events, std::shared_ptr<ProxyHost> host)
      : transport_(transport), spec_(std::move(spec)), events_(events), host_(host) {}
  ~ProxyWorker() override;

  int rank() const override { return spec_.rank; }
  WorkerState state() const override { return fallback_ ? fallback_->state() : state_; }
  void signal(int signo) override;

  // The host is ready: send this rank's description, then what was asked meanwhile.
  void spawn(ProxyHost& host);
  // No proxy on that host.
  void useFallback();
  void onOutput(Stream stream, std::string_view bytes) { events_.onOutput(spec_.rank, stream, bytes); }
  void onExit(const ExitStatus& status);
  void lost(const std::string& why);

 private:
  std::string signalFrame(int signo) const;
  void startStdin();
  void readStdin();
  void sendStdin(std::string_view bytes, bool eof);
  void stopStdin();

  static constexpr size_t kStdinQueueLimit = 1u << 20;

  ProxyTransport& transport_;
  LaunchSpec spec_;
  WorkerEvents& events_;
  std::weak_ptr<ProxyHost> host_;
  std::unique_ptr<Worker> fallback_;
  WorkerState state_ = WorkerState::kInit;
  std::vector<int> pending_signals_;
  bool spawned_ = false;
  bool stop_requested_ = false;
  bool ended_ = false;
  std::unique_ptr<boost::asio::posix::stream_descriptor> stdin_;
  std::unique_ptr<boost::asio::steady_timer> stdin_timer_;
  std::array<char, 16 * 1024> stdin_buffer_{};
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // guards pending stdin handlers
};

}  // namespace hvd::launcher::ssh
