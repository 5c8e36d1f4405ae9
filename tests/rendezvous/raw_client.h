// A blocking TCP client that speaks raw bytes, for tests that must control exactly what goes on the wire
// (Horovod's client bytes, malformed requests, half-sent requests, abrupt disconnects).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hvd::rendezvous::testing {

class RawClient {
 public:
  // Connects to 127.0.0.1:port; every read gives up after read_timeout.
  explicit RawClient(uint16_t port, std::chrono::milliseconds read_timeout = std::chrono::seconds(10))
      : RawClient("127.0.0.1", port, read_timeout) {}

  // Connects to a numeric IPv4 or IPv6 address.
  RawClient(const std::string& address, uint16_t port,
            std::chrono::milliseconds read_timeout = std::chrono::seconds(10)) {
    sockaddr_storage storage{};
    socklen_t length = 0;
    auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
    if (::inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      v4->sin_port = htons(port);
      length = sizeof *v4;
    } else if (::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(port);
      length = sizeof *v6;
    } else {
      throw std::runtime_error("not a numeric IP address: '" + address + "'");
    }
    fd_ = ::socket(storage.ss_family, SOCK_STREAM, 0);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&storage), length) != 0) {
      ::close(fd_);
      throw std::runtime_error("connect to " + address + ":" + std::to_string(port) + " failed");
    }
    timeval tv{};
    tv.tv_sec = read_timeout.count() / 1000;
    tv.tv_usec = (read_timeout.count() % 1000) * 1000;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  // False when the peer has closed the connection.
  bool send(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // Reads one response the way Horovod's client does: headers, then Content-Length bytes (the header
  // name matched case-sensitively) or until close. Returns headers and body; "" when closed or timed out
  // before anything arrived.
  std::string readResponse() {
    std::string data = pending_;
    pending_.clear();
    size_t header_end;
    while ((header_end = data.find("\r\n\r\n")) == std::string::npos) {
      if (!readMore(data)) return data;
    }
    header_end += 4;
    size_t length = std::string::npos;
    if (auto at = data.find("\r\nContent-Length: "); at != std::string::npos && at < header_end) {
      length = std::stoul(data.substr(at + 18));
    }
    if (length == std::string::npos) {
      while (readMore(data)) {
      }
      return data;
    }
    while (data.size() < header_end + length) {
      if (!readMore(data)) return data;
    }
    pending_ = data.substr(header_end + length);
    return data.substr(0, header_end + length);
  }

  // True when the server closes the connection (EOF or reset) before the read timeout.
  bool closedByPeer() {
    char buf[4096];
    while (true) {
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }

  // Reads whatever arrives, at most `piece` bytes at a time with `pause` between reads, until the peer
  // closes, the read timeout passes, or `bytes` have arrived; returns what arrived.
  std::string readSlowly(size_t bytes, size_t piece, std::chrono::milliseconds pause) {
    std::string data;
    std::vector<char> buf(piece);
    while (data.size() < bytes) {
      ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      data.append(buf.data(), static_cast<size_t>(n));
      std::this_thread::sleep_for(pause);
    }
    return data;
  }

  // Closes with a TCP reset instead of an orderly FIN.
  void reset() {
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    ::close(fd_);
    fd_ = -1;
  }

 private:
  bool readMore(std::string& data) {
    char buf[65536];
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    data.append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string pending_;
};

// Status code of a raw response ("HTTP/1.1 404 Not Found..." -> 404); 0 when there is none.
inline int statusOf(const std::string& response) {
  if (response.size() < 12 || response.compare(0, 5, "HTTP/") != 0) return 0;
  return std::stoi(response.substr(9, 3));
}

inline std::string bodyOf(const std::string& response) {
  auto at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

}  // namespace hvd::rendezvous::testing
