#include "launcher/ssh/tcp_link.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/write.hpp>

#include "launcher/ssh/proxy.h"
#include "launcher/ssh/remote.h"
#include "base/error.h"

namespace hvd::launcher::ssh {

namespace asio = boost::asio;

int listenForProxies(const std::string& address, uint16_t& port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(address.c_str(), "0", &hints, &found);
  HVD_CHECK(rc == 0, LaunchError, "cannot listen for hvd-proxy connections on '", address, "': ",
            ::gai_strerror(rc));
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool ok = fd >= 0 && ::bind(fd, found->ai_addr, found->ai_addrlen) == 0 && ::listen(fd, 1024) == 0;
  const int err = errno;
  ::freeaddrinfo(found);
  if (!ok) {
    if (fd >= 0) ::close(fd);
    throw LaunchError(detail::concat("cannot listen for hvd-proxy connections on ", address, ": ", errnoText(err)));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

std::string connectTarget(const std::string& address, uint16_t port) {
  return (address.find(':') != std::string::npos ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

std::optional<std::string> parseJoinLine(std::string_view line, std::string_view token) {
  const std::string_view prefix = kProxyJoinPrefix;
  if (line.substr(0, prefix.size()) != prefix) return std::nullopt;
  line.remove_prefix(prefix.size());
  const auto space = line.find(' ');
  if (space == std::string_view::npos || line.substr(0, space) != token) return std::nullopt;
  const std::string_view name = line.substr(space + 1);
  if (name.empty()) return std::nullopt;
  return std::string(name);
}

std::unique_ptr<Worker> ConnectBackTransport::startWithoutProxy(const LaunchSpec& spec, WorkerEvents&) {
  throw LaunchError(detail::concat("rank ", spec.rank, " on ", spec.host.name, ": no hvd-proxy"));
}

TcpLink::TcpLink(asio::io_context& io, int fd, ProxyHost& host, std::string node)
    : socket_(io), timer_(io), host_(&host), node_(std::move(node)) {
  boost::system::error_code ec;
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  socket_.assign(local.ss_family == AF_INET6 ? asio::ip::tcp::v6() : asio::ip::tcp::v4(), fd, ec);
  read();
  beat();
}

void TcpLink::write(std::string_view bytes) {
  out_.append(bytes);
  flush();
}

void TcpLink::close() {
  if (!socket_.is_open()) return;
  *alive_ = false;
  host_ = nullptr;
  timer_.cancel();
  // Best effort, without the loop (it may no longer run): what is queued, then EOF.
  const std::string rest = writing_ + out_;
  (void)::send(socket_.native_handle(), rest.data(), rest.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(socket_.native_handle(), SHUT_WR);
  boost::system::error_code ec;
  socket_.close(ec);
}

void TcpLink::read() {
  socket_.async_read_some(asio::buffer(buffer_), [this, alive = alive_](const boost::system::error_code& ec, size_t n) {
    if (!*alive) return;
    if (n > 0 && host_) host_->onData(Stream::kStdout, std::string_view(buffer_.data(), n));
    if (!*alive) return;
    if (ec) {
      ChannelEnd end;
      end.error = ec == asio::error::eof ? "hvd-proxy on " + node_ + " closed its connection"
                                         : "connection to hvd-proxy on " + node_ + ": " + ec.message();
      *alive_ = false;
      timer_.cancel();
      ProxyHost* host = std::exchange(host_, nullptr);
      if (host) host->onEnd(end);
      return;
    }
    read();
  });
}

void TcpLink::flush() {
  if (!writing_.empty() || out_.empty() || !socket_.is_open()) return;
  writing_.swap(out_);
  asio::async_write(socket_, asio::buffer(writing_), [this, alive = alive_](const boost::system::error_code& ec, size_t) {
    if (!*alive) return;
    writing_.clear();
    if (!ec) flush();  // a failed write shows up as the read's error
  });
}

void TcpLink::beat() {
  timer_.expires_after(kHeartbeatInterval);
  timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (ec || !*alive) return;
    write(PayloadWriter().frame(FrameType::kHeartbeat));
    beat();
  });
}

}  // namespace hvd::launcher::ssh
