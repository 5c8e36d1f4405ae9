#include "launcher/ssh/proxy_host.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include <csignal>
#include <iostream>

#include "base/error.h"

namespace hvd::launcher::ssh {

namespace asio = boost::asio;

WorkerState endState(const ExitStatus& status, bool stop_requested) {
  if (status.success()) return WorkerState::kSucceeded;
  if (stop_requested) return WorkerState::kStopped;
  if (status.kind == ExitStatus::Kind::kLost) return WorkerState::kUnknown;
  return WorkerState::kFailed;
}

void ProxyHost::attach(std::unique_ptr<ProxyLink> link) {
  if (state_ != State::kOpening) return;
  link_ = std::move(link);
}

void ProxyHost::close() {
  if (!link_) return;
  link_->close();
  link_.reset();
}

void ProxyHost::requestCheck(const std::string& address, uint16_t port) {
  check_done_ = false;
  check_error_.clear();
  check_ = PayloadWriter()
               .bytes(address)
               .u16(port)
               .u32(static_cast<uint32_t>(kCheckTimeout.count()))
               .frame(FrameType::kCheck);
  if (state_ == State::kReady) sendCheck();
  if (state_ == State::kFallback || state_ == State::kFailed) check_done_ = true;
}

void ProxyHost::sendCheck() {
  if (check_.empty() || !link_) return;
  link_->write(check_);
  check_.clear();
}

void ProxyHost::add(ProxyWorker* worker, int rank, asio::io_context& io) {
  switch (state_) {
    case State::kOpening:
      workers_[rank] = worker;
      return;
    case State::kReady:
      workers_[rank] = worker;
      worker->spawn(*this);
      return;
    case State::kFallback:
      worker->useFallback();
      return;
    case State::kFailed:
      // Not from inside start(): the job has not stored the worker yet.
      workers_[rank] = worker;
      asio::post(io, [weak = weak_from_this(), rank] {
        auto self = weak.lock();
        if (!self) return;
        if (auto it = self->workers_.find(rank); it != self->workers_.end()) {
          ProxyWorker* w = it->second;
          self->workers_.erase(it);
          w->lost(self->error_);
        }
      });
      return;
  }
}

void ProxyHost::onData(Stream stream, std::string_view bytes) {
  if (stream == Stream::kStderr) {
    // The proxy's own diagnostics (and whatever the login script says): shown, and kept for errors.
    stderr_tail_ += bytes;
    size_t nl;
    while ((nl = stderr_tail_.find('\n')) != std::string::npos) {
      const std::string line = stderr_tail_.substr(0, nl);
      stderr_tail_.erase(0, nl + 1);
      // One write per line: the job's output forwarder writes whole lines to the same stderr.
      if (!line.empty()) std::cerr << ("hvdrun: " + label_ + ": " + line + "\n");
      last_stderr_line_ = line.empty() ? last_stderr_line_ : line;
    }
    if (stderr_tail_.size() > 4096) stderr_tail_.erase(0, stderr_tail_.size() - 4096);
    return;
  }
  if (state_ == State::kFallback || state_ == State::kFailed) return;
  if (state_ == State::kOpening) {
    before_hello_ += bytes;
    const auto at = before_hello_.find(kProxyHelloMagic);
    if (at == std::string::npos) {
      if (before_hello_.size() > 65536)
        before_hello_.erase(0, before_hello_.size() - kProxyHelloMagic.size());
      return;
    }
    decoder_.feed(std::string_view(before_hello_).substr(at + kProxyHelloMagic.size()));
    before_hello_.clear();
  } else {
    decoder_.feed(bytes);
  }
  try {
    while (auto frame = decoder_.next()) {
      handle(*frame);
      if (state_ == State::kFallback || state_ == State::kFailed) return;
    }
  } catch (const Error& e) {
    fail(detail::concat("hvd-proxy on ", where_, ": ", e.what()));
    close();
  }
}

void ProxyHost::handle(const Frame& frame) {
  PayloadReader in(frame);
  if (state_ == State::kOpening) {
    if (frame.type != FrameType::kHello)
      throw LaunchError(detail::concat("expected a hello frame, got ", PayloadReader::typeName(frame.type)));
    const uint32_t version = in.u32();
    if (version != kProxyVersion) {
      fallBack(detail::concat(path_, " speaks protocol ", version, ", this hvdrun ", kProxyVersion));
      close();
      return;
    }
    becomeReady();
    return;
  }
  switch (frame.type) {
    case FrameType::kCheckResult: {
      const bool ok = in.u8() != 0;
      std::string why = in.bytes();
      in.end();
      check_done_ = true;
      check_error_ = ok ? "" : why;
      return;
    }
    case FrameType::kStarted:
      return;  // the pid is the remote host's: nothing to do with it here
    case FrameType::kOutput: {
      const int rank = in.i32();
      const uint8_t stream = in.u8();
      const std::string bytes = in.bytes();
      in.end();
      if (auto it = workers_.find(rank); it != workers_.end())
        it->second->onOutput(stream ? Stream::kStderr : Stream::kStdout, bytes);
      return;
    }
    case FrameType::kExit: {
      const int rank = in.i32();
      const uint8_t kind = in.u8();
      const int value = in.i32();
      in.end();
      ExitStatus status;
      if (kind == 1) {
        status.kind = ExitStatus::Kind::kSignaled;
        status.signal = value;
      } else {
        status.code = value;
      }
      if (auto it = workers_.find(rank); it != workers_.end()) {
        ProxyWorker* w = it->second;
        workers_.erase(it);
        w->onExit(status);
      }
      return;
    }
    default:
      throw LaunchError(detail::concat("unexpected ", PayloadReader::typeName(frame.type), " frame"));
  }
}

void ProxyHost::becomeReady() {
  state_ = State::kReady;
  sendCheck();
  auto workers = workers_;  // a spawn may end a worker at once (the host fails meanwhile)
  for (auto& [rank, w] : workers) {
    if (workers_.count(rank)) w->spawn(*this);
  }
}

void ProxyHost::fallBack(const std::string& why) {
  state_ = State::kFallback;
  std::cerr << ("hvdrun: " + label_ + ": " + why +
                "; " + fallback_ + "\n");
  check_done_ = true;
  auto workers = std::exchange(workers_, {});
  for (auto& [rank, w] : workers) w->useFallback();
}

void ProxyHost::fail(const std::string& why) {
  if (state_ == State::kFailed || state_ == State::kFallback) return;
  state_ = State::kFailed;
  error_ = why;
  if (!check_done_) {
    check_done_ = true;
    check_error_ = why;
  }
  auto workers = std::exchange(workers_, {});
  for (auto& [rank, w] : workers) w->lost(why);
}

void ProxyHost::onEnd(const ChannelEnd& end) {
  link_.reset();
  if (state_ == State::kOpening && end.error.empty() && end.exit_code == 127) {
    fallBack("no hvd-proxy at " + path_ + " there (exit code 127)");
    return;
  }
  if (!end.error.empty()) {
    fail(end.error);
    return;
  }
  std::string how = end.exit_signal ? "signal " + (end.signal_name.empty() ? std::to_string(*end.exit_signal)
                                                                           : end.signal_name)
                                    : "exit code " + std::to_string(end.exit_code.value_or(255));
  fail(detail::concat("hvd-proxy ", path_, " on ", where_, " ended (", how, ")",
                      last_stderr_line_.empty() ? "" : ": " + last_stderr_line_));
}

ProxyWorker::~ProxyWorker() {
  stopStdin();
  if (auto host = host_.lock()) {
    if (spawned_ && !ended_) host->send(signalFrame(SIGKILL));
    host->remove(spec_.rank);
  }
}

void ProxyWorker::signal(int signo) {
  if (fallback_) return fallback_->signal(signo);
  if (ended_) return;
  stop_requested_ = true;
  if (!spawned_) {
    pending_signals_.push_back(signo);
  } else if (auto host = host_.lock()) {
    host->send(signalFrame(signo));
  }
}

void ProxyWorker::spawn(ProxyHost& host) {
  SpawnRequest r{spec_.rank, spec_.host.name,     spec_.cwd,       spec_.argv,
                 spec_.env,  spec_.forward_stdin, spec_.bind_index};
  host.send(encodeSpawn(r));
  spawned_ = true;
  state_ = WorkerState::kRunning;
  for (int s : pending_signals_) host.send(signalFrame(s));
  pending_signals_.clear();
  if (spec_.forward_stdin) startStdin();
}

void ProxyWorker::useFallback() {
  if (spec_.bind_index >= 0) {  // a rank that ssh starts alone cannot be bound between fork and exec
    lost(detail::concat("--bind-to core: rank ", spec_.rank, " on ", spec_.host.name,
                        " needs hvd-proxy there to bind it to a core"));
    return;
  }
  fallback_ = transport_.startWithoutProxy(spec_, events_);
  for (int s : pending_signals_) fallback_->signal(s);
  pending_signals_.clear();
}

void ProxyWorker::onExit(const ExitStatus& status) {
  if (ended_) return;
  ended_ = true;
  stopStdin();
  state_ = endState(status, stop_requested_);
  events_.onStreamClosed(spec_.rank, Stream::kStdout);
  events_.onStreamClosed(spec_.rank, Stream::kStderr);
  events_.onExit(spec_.rank, status);
}

void ProxyWorker::lost(const std::string& why) {
  ExitStatus status;
  status.kind = ExitStatus::Kind::kLost;
  status.detail = why;
  onExit(status);
}

std::string ProxyWorker::signalFrame(int signo) const {
  return PayloadWriter().i32(spec_.rank).i32(signo).frame(FrameType::kSignal);
}

// Rank 0's stdin: hvdrun's stdin, read on the job loop and sent as frames. A terminal or pipe is
// reopened through /proc so that the non-blocking mode Asio sets stays on our own file description
// (the shell's terminal is left as it was); a regular file is read through a duplicate.
void ProxyWorker::startStdin() {
  const int source = transport_.stdinFd();
  // A background hvdrun reading its terminal would be stopped (SIGTTIN): rank 0 gets EOF instead.
  if (::isatty(source) && ::tcgetpgrp(source) != ::getpgrp()) {
    sendStdin("", true);
    return;
  }
  struct stat st {};
  int fd = -1;
  if (::fstat(source, &st) == 0 && !S_ISREG(st.st_mode))
    fd = ::open(("/proc/self/fd/" + std::to_string(source)).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fd = ::fcntl(source, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    sendStdin("", true);
    return;
  }
  stdin_ = std::make_unique<asio::posix::stream_descriptor>(transport_.jobLoop(), fd);
  stdin_timer_ = std::make_unique<asio::steady_timer>(transport_.jobLoop());
  readStdin();
}

void ProxyWorker::readStdin() {
  auto host = host_.lock();
  if (!stdin_ || !host) return;
  // Backpressure: a fast producer must not pile up megabytes in the channel's queue.
  if (host->queued() > kStdinQueueLimit) {
    stdin_timer_->expires_after(std::chrono::milliseconds(20));
    stdin_timer_->async_wait([this, alive = alive_](const boost::system::error_code& ec) {
      if (!ec && *alive) readStdin();
    });
    return;
  }
  stdin_->async_read_some(asio::buffer(stdin_buffer_),
                          [this, alive = alive_](const boost::system::error_code& ec, size_t n) {
                            if (!*alive || !stdin_) return;
                            if (n > 0) sendStdin(std::string_view(stdin_buffer_.data(), n), false);
                            if (ec) {
                              sendStdin("", true);
                              stopStdin();
                              return;
                            }
                            readStdin();
                          });
}

void ProxyWorker::sendStdin(std::string_view bytes, bool eof) {
  auto host = host_.lock();
  if (!host) return;
  if (eof)
    host->send(PayloadWriter().i32(spec_.rank).frame(FrameType::kStdinEof));
  else
    host->send(PayloadWriter().i32(spec_.rank).bytes(bytes).frame(FrameType::kStdin));
}

void ProxyWorker::stopStdin() {
  *alive_ = false;
  alive_ = std::make_shared<bool>(true);
  stdin_timer_.reset();
  stdin_.reset();
}

}  // namespace hvd::launcher::ssh
