// TCP loopback ceilings for bench/compare, between two processes (fork) over 127.0.0.1:
//   oneway SEND_BYTES TOTAL_BYTES REPS  one direction, send() calls of SEND_BYTES each
//   bidir  SEND_BYTES TOTAL_BYTES REPS  both directions at once (what a 2-rank ring does);
//                                      reported per direction
//   pingpong MSG_BYTES ITERS             blocking send/recv round trips, TCP_NODELAY
// Prints one JSON line per mode (median over REPS, or over round trips for pingpong).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "tcp_loopback: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

// All n bytes at p through `io` (::send or ::recv), again after EINTR; dies naming `what` on an error or
// a closed connection.
template <typename Io, typename Bytes>
void all(Io io, const char* what, int fd, Bytes p, size_t n) {
  while (n > 0) {
    ssize_t k = io(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) die(what);
    p += k;
    n -= size_t(k);
  }
}

void sendAll(int fd, const char* p, size_t n) { all(::send, "send", fd, p, n); }
void recvAll(int fd, char* p, size_t n) { all(::recv, "recv", fd, p, n); }

// Streams `total` bytes in send() calls of `chunk` bytes; the receiver reads in chunks too.
void stream(int fd, size_t chunk, size_t total, std::vector<char>& buf) {
  for (size_t done = 0; done < total; done += chunk) sendAll(fd, buf.data(), std::min(chunk, total - done));
}
void drain(int fd, size_t chunk, size_t total, std::vector<char>& buf) {
  for (size_t done = 0; done < total; done += chunk) recvAll(fd, buf.data(), std::min(chunk, total - done));
}

// Returns a connected socket pair over loopback TCP: [0] in this process, [1] for the child.
void connectedPair(int fds[2]) {
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 ||
      ::listen(lfd, 1) < 0)
    die("listen on 127.0.0.1");
  socklen_t len = sizeof addr;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  fds[1] = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(fds[1], reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) die("connect");
  fds[0] = ::accept(lfd, nullptr, nullptr);
  if (fds[0] < 0) die("accept");
  ::close(lfd);
  int one = 1;
  for (int i = 0; i < 2; ++i) ::setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void print(const char* op, size_t bytes, std::vector<double>& t, double bytesPerPass) {
  std::sort(t.begin(), t.end());
  const double med = t[t.size() / 2];
  std::printf("{\"op\":\"%s\",\"bytes\":%zu,\"iters\":%zu,\"median_us\":%.3f,\"min_us\":%.3f,"
              "\"gbps\":%.3f}\n",
              op, bytes, t.size(), med * 1e6, t[0] * 1e6, bytesPerPass / med / 1e9);
  std::fflush(stdout);
}

size_t parseSize(const char* s) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (!end || *end || v == 0) {
    std::fprintf(stderr, "tcp_loopback: bad number '%s'\n", s);
    std::exit(2);
  }
  return size_t(v);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool throughput = mode == "oneway" || mode == "bidir";
  if (!(throughput && argc == 5) && !(mode == "pingpong" && argc == 4)) {
    std::fprintf(stderr,
                 "usage: %s oneway|bidir SEND_BYTES TOTAL_BYTES REPS | pingpong MSG_BYTES ITERS\n",
                 argv[0]);
    return 2;
  }
  const size_t chunk = parseSize(argv[2]);
  const size_t total = throughput ? parseSize(argv[3]) : 0;
  const int reps = int(parseSize(argv[throughput ? 4 : 3]));
  int fds[2];
  connectedPair(fds);
  std::vector<char> buf(chunk, 'x'), rbuf(chunk);
  char ack = 0;
  pid_t child = ::fork();
  if (child < 0) die("fork");
  if (child == 0) {  // the peer: receives (and in bidir also sends), acks each pass
    ::close(fds[0]);
    const int fd = fds[1];
    for (int r = 0; r < (mode == "pingpong" ? reps + 100 : reps + 1); ++r) {
      if (mode == "pingpong") {
        recvAll(fd, rbuf.data(), chunk);
        sendAll(fd, buf.data(), chunk);
      } else {
        std::thread tx;
        if (mode == "bidir") tx = std::thread([&] { stream(fd, chunk, total, buf); });
        drain(fd, chunk, total, rbuf);
        if (tx.joinable()) tx.join();
        sendAll(fd, &ack, 1);
      }
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  const int fd = fds[0];
  std::vector<double> t;
  if (mode == "pingpong") {
    for (int r = -100; r < reps; ++r) {  // 100 warm-up round trips
      auto t0 = Clock::now();
      sendAll(fd, buf.data(), chunk);
      recvAll(fd, rbuf.data(), chunk);
      if (r >= 0) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    print("tcp_pingpong", chunk, t, 2.0 * chunk);
  } else {
    for (int r = -1; r < reps; ++r) {  // one warm-up pass
      auto t0 = Clock::now();
      std::thread rx;
      if (mode == "bidir") rx = std::thread([&] { drain(fd, chunk, total, rbuf); });
      stream(fd, chunk, total, buf);
      if (rx.joinable()) rx.join();
      recvAll(fd, &ack, 1);
      if (r >= 0) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    print(mode == "bidir" ? "tcp_bidir" : "tcp_oneway", chunk, t, double(total));
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
