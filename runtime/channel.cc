#include "runtime/channel.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <random>
#include <thread>
#include <unistd.h>
#include <utility>

#include "base/error.h"

namespace hvd::runtime {
namespace {

using Clock = std::chrono::steady_clock;

int remainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

std::string formatAddress(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = {0};
  uint16_t port = 0;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
    return detail::concat(host, ":", port);
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
  inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
  port = ntohs(in6->sin6_port);
  return detail::concat("[", host, "]:", port);
}

// Fills addr from a numeric host and port.
socklen_t makeAddress(const std::string& host, uint16_t port, sockaddr_storage& addr) {
  std::memset(&addr, 0, sizeof addr);
  auto* in = reinterpret_cast<sockaddr_in*>(&addr);
  if (inet_pton(AF_INET, host.c_str(), &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    return sizeof(sockaddr_in);
  }
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
  HVD_CHECK(inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr) == 1, NetworkError, "'", host,
            "' is not a numeric IPv4 or IPv6 address");
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(port);
  return sizeof(sockaddr_in6);
}

// A no-op on a unix socket (the call fails there, harmlessly).
void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// The process at the other end of a unix socket, for messages: "pid N on this host (unix socket)".
std::string unixPeer(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return "a process on this host (unix socket)";
  return detail::concat("pid ", cred.pid, " on this host (unix socket)");
}

// One connect() to addr: the connected socket, non-blocking (Channel reads without blocking), or -1 with err
// set to connect()'s errno. Throws NetworkError when no socket can be made.
int tryConnect(const sockaddr* addr, socklen_t len, int& err) {
  const int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  HVD_CHECK(fd >= 0, NetworkError, "socket() failed: ", errnoText(errno));
  if (::connect(fd, addr, len) == 0) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
  }
  err = errno;
  ::close(fd);
  return -1;
}

}  // namespace

Channel::Channel(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) { setNoDelay(fd_); }

Channel::~Channel() {
  if (fd_ >= 0) ::close(fd_);
}

int Channel::release() {
  HVD_INTERNAL_ASSERT(buffer_.empty() && early_.empty(), "control connection to ", peer_, " released with ",
                      buffer_.size(), " bytes and ", early_.size(), " messages unread");
  return std::exchange(fd_, -1);
}

void Channel::send(const std::vector<char>& payload) {
  const uint32_t length = static_cast<uint32_t>(payload.size());
  HVD_INTERNAL_ASSERT(payload.size() == length, "control message of ", payload.size(), " bytes");
  char header[sizeof length];
  std::memcpy(header, &length, sizeof length);
  iovec iov[2] = {{header, sizeof header}, {const_cast<char*>(payload.data()), payload.size()}};
  size_t total = sizeof header + payload.size();
  size_t sent = 0;
  while (sent < total) {
    // Skip what was already written.
    size_t skip = sent;
    iovec parts[2];
    int n = 0;
    for (auto& v : iov) {
      if (skip >= v.iov_len) {
        skip -= v.iov_len;
        continue;
      }
      parts[n++] = {static_cast<char*>(v.iov_base) + skip, v.iov_len - skip};
      skip = 0;
    }
    msghdr msg{};
    msg.msg_iov = parts;
    msg.msg_iovlen = n;
    const ssize_t rv = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (rv < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        pollfd p{fd_, POLLOUT, 0};
        ::poll(&p, 1, -1);
        continue;
      }
      throw NetworkError(detail::concat("sending to ", peer_, " failed: ", errnoText(errno)));
    }
    sent += static_cast<size_t>(rv);
  }
}

bool Channel::receive(std::vector<std::vector<char>>& out) {
  for (auto& m : early_) out.push_back(std::move(m));
  early_.clear();
  char chunk[64 * 1024];
  bool open = true;
  for (;;) {
    const ssize_t rv = ::recv(fd_, chunk, sizeof chunk, MSG_DONTWAIT);
    if (rv > 0) {
      buffer_.insert(buffer_.end(), chunk, chunk + rv);
      if (static_cast<size_t>(rv) < sizeof chunk) break;
      continue;
    }
    if (rv == 0) {
      error_ = "connection closed by " + peer_;
      open = false;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    error_ = detail::concat("receiving from ", peer_, " failed: ", errnoText(errno));
    open = false;
    break;
  }
  size_t pos = 0;
  while (buffer_.size() - pos >= sizeof(uint32_t)) {
    uint32_t length;
    std::memcpy(&length, buffer_.data() + pos, sizeof length);
    if (buffer_.size() - pos - sizeof length < length) break;
    const char* begin = buffer_.data() + pos + sizeof length;
    out.emplace_back(begin, begin + length);
    pos += sizeof length + length;
  }
  buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(pos));
  return open;
}

std::vector<char> Channel::receiveOne(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::vector<std::vector<char>> messages;
  for (;;) {
    const bool open = receive(messages);
    if (!messages.empty()) {
      // The peer may already have sent more (a worker's first requests follow its hello at once).
      early_.assign(std::make_move_iterator(messages.begin() + 1), std::make_move_iterator(messages.end()));
      return std::move(messages.front());
    }
    HVD_CHECK(open, NetworkError, "control connection to ", peer_, " failed during setup: ", error_);
    pollfd p{fd_, POLLIN, 0};
    const int left = remainingMs(deadline);
    HVD_CHECK(left > 0 && ::poll(&p, 1, left) >= 0, NetworkError, "no message from ", peer_, " within ",
              timeout.count(), " ms during setup");
  }
}

int listenTcp(const std::string& host, uint16_t& port) {
  sockaddr_storage addr;
  const socklen_t len = makeAddress(host, port, addr);
  const int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  HVD_CHECK(fd >= 0, NetworkError, "socket() for ", host, " failed: ", errnoText(errno));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 1024) != 0) {
    const int err = errno;
    ::close(fd);
    throw NetworkError(detail::concat("cannot listen on ", host, ":", port, ": ", errnoText(err)));
  }
  socklen_t alen = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen);
  port = addr.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port)
                                   : ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return fd;
}

int acceptAny(const std::vector<int>& listen_fds, std::chrono::milliseconds timeout, std::string& peer) {
  const auto deadline = Clock::now() + timeout;
  std::vector<pollfd> fds;
  for (int fd : listen_fds) fds.push_back({fd, POLLIN, 0});
  for (;;) {
    const int left = remainingMs(deadline);
    const int rv = left > 0 ? ::poll(fds.data(), fds.size(), left) : 0;
    if (rv < 0 && errno == EINTR) continue;
    HVD_CHECK(rv > 0, NetworkError, "timed out after ", timeout.count(), " ms waiting for ranks to connect");
    for (const auto& p : fds) {
      if (!p.revents) continue;
      sockaddr_storage addr;
      socklen_t alen = sizeof addr;
      const int fd = ::accept4(p.fd, reinterpret_cast<sockaddr*>(&addr), &alen, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
        throw NetworkError(detail::concat("accept() failed: ", errnoText(errno)));
      }
      peer = addr.ss_family == AF_UNIX ? unixPeer(fd) : formatAddress(reinterpret_cast<sockaddr*>(&addr));
      return fd;
    }
  }
}

int connectTcp(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto delay = std::chrono::milliseconds(5);
  for (;;) {
    sockaddr_storage addr;
    const socklen_t len = makeAddress(host, port, addr);
    int err = 0;
    if (const int fd = tryConnect(reinterpret_cast<sockaddr*>(&addr), len, err); fd >= 0) return fd;
    HVD_CHECK((err == ECONNREFUSED || err == EINTR) && Clock::now() + delay < deadline, NetworkError,
              "cannot connect to the coordinator at ", host, ":", port, ": ", errnoText(err));
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(200));
  }
}

socklen_t abstractAddress(const std::string& name, sockaddr_un& addr) {
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  HVD_INTERNAL_ASSERT(name.size() + 1 < sizeof addr.sun_path, "socket name too long: ", name);
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

int listenUnix(std::string& name) {
  std::random_device random;
  name = detail::concat("hvd-ctl-", ::getpid(), "-", std::hex, random(), random());
  sockaddr_un addr;
  const socklen_t len = abstractAddress(name, addr);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  HVD_CHECK(fd >= 0, NetworkError, "socket(AF_UNIX) failed: ", errnoText(errno));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 1024) != 0) {
    const int err = errno;
    ::close(fd);
    throw NetworkError(detail::concat("cannot listen on unix socket @", name, ": ", errnoText(err)));
  }
  return fd;
}

int connectUnix(const std::string& name) {
  sockaddr_un addr;
  const socklen_t len = abstractAddress(name, addr);
  for (;;) {
    int err = 0;
    if (const int fd = tryConnect(reinterpret_cast<sockaddr*>(&addr), len, err); fd >= 0) return fd;
    if (err == EINTR) continue;
    if (err == ECONNREFUSED || err == ENOENT || err == EAGAIN) return -1;
    throw NetworkError(detail::concat("cannot connect to the coordinator at unix socket @", name, ": ",
                                      errnoText(err)));
  }
}

std::string localAddress(const std::string& iface, bool single_host, const std::string& route_to) {
  if (!iface.empty()) {
    ifaddrs* list = nullptr;
    HVD_CHECK(::getifaddrs(&list) == 0, NetworkError, "getifaddrs failed: ", errnoText(errno));
    std::string v4, v6;
    for (auto* a = list; a; a = a->ifa_next) {
      if (!a->ifa_addr || iface != a->ifa_name) continue;
      char host[INET6_ADDRSTRLEN] = {0};
      if (a->ifa_addr->sa_family == AF_INET && v4.empty()) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, host, sizeof host);
        v4 = host;
      } else if (a->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, host, sizeof host);
        v6 = host;
      }
    }
    ::freeifaddrs(list);
    HVD_CHECK(!v4.empty() || !v6.empty(), NetworkError, "network interface '", iface,
              "' (HOROVOD_GLOO_IFACE) has no IP address or does not exist");
    return v4.empty() ? v6 : v4;
  }
  if (single_host) return "127.0.0.1";
  if (!route_to.empty()) {
    // A UDP connect sends nothing: it only asks the kernel which local address routes to route_to.
    addrinfo hints{};
    hints.ai_socktype = SOCK_DGRAM;
    hints.ai_flags = AI_NUMERICHOST;
    addrinfo* res = nullptr;
    if (::getaddrinfo(route_to.c_str(), "9", &hints, &res) == 0 && res) {
      const int fd = ::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      sockaddr_storage local{};
      socklen_t len = sizeof local;
      const bool ok = fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
                      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
      if (fd >= 0) ::close(fd);
      ::freeaddrinfo(res);
      if (ok) {
        char host[INET6_ADDRSTRLEN] = {0};
        if (local.ss_family == AF_INET)
          inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, host, sizeof host);
        else
          inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, host, sizeof host);
        if (*host) return host;
      }
    }
  }
  char name[256] = {0};
  ::gethostname(name, sizeof name - 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rv = ::getaddrinfo(name, nullptr, &hints, &res);
  HVD_CHECK(rv == 0 && res, NetworkError, "cannot resolve this host's name '", name, "': ", gai_strerror(rv),
            " (set HOROVOD_GLOO_IFACE)");
  std::string text = formatAddress(res->ai_addr);
  ::freeaddrinfo(res);
  // formatAddress appends ":port"; keep the host part.
  if (text.front() == '[') return text.substr(1, text.find(']') - 1);
  return text.substr(0, text.rfind(':'));
}

}  // namespace hvd::runtime
