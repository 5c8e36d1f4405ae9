// hvd-proxy over TCP: the pieces shared by the transports whose proxies connect back to hvdrun (srun,
// launcher agents) instead of speaking over an ssh channel.
//
//   int fd = listenForProxies("10.0.0.1", port);          // the kernel picks the port
//   ... a proxy started with `hvd-proxy --connect 10.0.0.1:PORT` connects and sends its join line ...
//   if (auto name = parseJoinLine(line, token)) host->attach(std::make_unique<TcpLink>(io, fd, *host, *name));
//
// The join line is kProxyJoinPrefix + token + " " + name (launcher/ssh/proxy.h). TcpLink carries frames both
// ways on the job's loop and sends a heartbeat every kHeartbeatInterval (the proxy's watchdog needs one); the
// connection's end reaches the ProxyHost as a ChannelEnd naming the proxy.
// Errors: listenForProxies throws LaunchError naming the address. Threading: TcpLink on the job's loop only.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "launcher/ssh/proxy_host.h"

namespace hvd::launcher::ssh {

// A listening socket (close-on-exec, backlog 1024) on `address`, a numeric IPv4 or IPv6 address, at a port
// the kernel picks, returned in `port`.
int listenForProxies(const std::string& address, uint16_t& port);

// "ADDRESS:PORT", with brackets around an IPv6 address: what `hvd-proxy --connect` takes.
std::string connectTarget(const std::string& address, uint16_t port);

// The name in a join line presenting `token`; nullopt for any other line (not a proxy of this job).
std::optional<std::string> parseJoinLine(std::string_view line, std::string_view token);

// The ProxyTransport of a launcher whose proxies connect back (srun, agents): the job's loop, rank 0's stdin,
// and no fallback (a rank without its proxy cannot start another way).
class ConnectBackTransport : public ProxyTransport {
 public:
  ConnectBackTransport(boost::asio::io_context& io, int stdin_fd) : io_(io), stdin_fd_(stdin_fd) {}
  boost::asio::io_context& jobLoop() override { return io_; }
  int stdinFd() const override { return stdin_fd_; }
  std::unique_ptr<Worker> startWithoutProxy(const LaunchSpec& spec, WorkerEvents&) override;

 private:
  boost::asio::io_context& io_;
  int stdin_fd_;
};

// One proxy's connection, on the job's loop: frames out (and heartbeats), bytes in to the ProxyHost.
class TcpLink : public ProxyLink {
 public:
  // Takes `fd`, a connected socket; `node` names the proxy in the ChannelEnd.
  TcpLink(boost::asio::io_context& io, int fd, ProxyHost& host, std::string node);
  ~TcpLink() override { close(); }

  void write(std::string_view bytes) override;
  size_t queued() const override { return out_.size() + writing_.size(); }
  void close() override;

 private:
  void read();
  void flush();
  void beat();

  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  ProxyHost* host_;
  std::string node_;
  std::string out_, writing_;
  std::array<char, 64 * 1024> buffer_{};
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace hvd::launcher::ssh
