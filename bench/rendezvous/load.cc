// Rendezvous server load benchmark: K concurrent keep-alive clients doing PUT/GET against an in-process
// server; reports requests/s and p50/p99 latency, as medians over rounds.
//
//   rendezvous_load [--quick] [--clients K] [--seconds S] [--rounds R] [--server-threads T]
//
// The clients are one epoll loop in its own thread (cheap on a 2-core machine: the server, not the load
// generator, should own the CPU), each connection alternating PUT and GET of its own 100-byte key.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "rendezvous/server.h"

using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  int clients = 32;
  double seconds = 3;
  int rounds = 5;
  int server_threads = 1;
};

struct Conn {
  int fd = -1;
  std::string put, get;
  bool next_put = true;
  std::string in;
  Clock::time_point sent;
};

struct RoundResult {
  double rps;
  double p50_us;
  double p99_us;
};

bool responseComplete(const std::string& in) {
  const auto end = in.find("\r\n\r\n");
  if (end == std::string::npos) return false;
  size_t length = 0;
  if (auto at = in.find("\r\nContent-Length: "); at != std::string::npos && at < end) length = std::stoul(in.substr(at + 18));
  return in.size() >= end + 4 + length;
}

RoundResult runRound(uint16_t port, const Options& o) {
  const int ep = ::epoll_create1(0);
  std::vector<Conn> conns(o.clients);
  const std::string value(100, 'v');
  for (int i = 0; i < o.clients; ++i) {
    Conn& c = conns[i];
    c.fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(c.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      std::perror("connect");
      std::exit(1);
    }
    int one = 1;
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const std::string path = "/load/c" + std::to_string(i);
    c.put = "PUT " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n" + value;
    c.get = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(i);
    ::epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
  }
  auto send = [](Conn& c) {
    const std::string& req = c.next_put ? c.put : c.get;
    c.next_put = !c.next_put;
    c.sent = Clock::now();
    if (::send(c.fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
      std::perror("send");
      std::exit(1);
    }
  };
  std::vector<uint32_t> latencies_ns;
  latencies_ns.reserve(1 << 22);
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(o.seconds);
  for (auto& c : conns) send(c);
  std::vector<epoll_event> events(o.clients);
  char buf[8192];
  Clock::time_point now = start;
  while (now < end) {
    const int n = ::epoll_wait(ep, events.data(), o.clients, 100);
    now = Clock::now();
    for (int e = 0; e < n; ++e) {
      Conn& c = conns[events[e].data.u32];
      const ssize_t got = ::recv(c.fd, buf, sizeof(buf), 0);
      if (got <= 0) {
        std::fprintf(stderr, "server closed a connection\n");
        std::exit(1);
      }
      c.in.append(buf, static_cast<size_t>(got));
      if (!responseComplete(c.in)) continue;
      if (c.in.compare(0, 12, "HTTP/1.1 200") != 0) {
        std::fprintf(stderr, "unexpected answer: %.40s\n", c.in.c_str());
        std::exit(1);
      }
      c.in.clear();
      latencies_ns.push_back(static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - c.sent).count()));
      if (now < end) send(c);
    }
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  for (auto& c : conns) ::close(c.fd);
  ::close(ep);
  std::sort(latencies_ns.begin(), latencies_ns.end());
  auto pct = [&](double p) { return latencies_ns.empty() ? 0.0 : latencies_ns[size_t(p * (latencies_ns.size() - 1))] / 1000.0; };
  return {latencies_ns.size() / elapsed, pct(0.5), pct(0.99)};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "rendezvous_load: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::string(argv[++i]);
    };
    if (a == "--quick") {
      o.seconds = 0.5;
      o.rounds = 3;
    } else if (a == "--clients") {
      o.clients = std::stoi(next());
    } else if (a == "--seconds") {
      o.seconds = std::stod(next());
    } else if (a == "--rounds") {
      o.rounds = std::stoi(next());
    } else if (a == "--server-threads") {
      o.server_threads = std::stoi(next());
    } else {
      std::fprintf(stderr, "rendezvous_load: unknown argument '%s'\nusage: rendezvous_load [--quick] [--clients K] "
                           "[--seconds S] [--rounds R] [--server-threads T]\n", a.c_str());
      return 2;
    }
  }
  boost::asio::io_context ioc;
  hvd::rendezvous::ServerOptions so;
  hvd::rendezvous::Server server(ioc, so);
  std::vector<std::thread> threads;
  for (int t = 0; t < o.server_threads; ++t) threads.emplace_back([&] { ioc.run(); });

  std::vector<double> rps, p50, p99;
  for (int r = 0; r < o.rounds; ++r) {
    auto res = runRound(server.port(), o);
    std::printf("round %d: %.0f req/s, p50 %.1f us, p99 %.1f us\n", r + 1, res.rps, res.p50_us, res.p99_us);
    rps.push_back(res.rps);
    p50.push_back(res.p50_us);
    p99.push_back(res.p99_us);
  }
  std::printf("rendezvous_load: clients=%d server_threads=%d rounds=%d x %.1f s: median %.0f req/s (min %.0f, max %.0f), "
              "p50 %.1f us, p99 %.1f us\n",
              o.clients, o.server_threads, o.rounds, o.seconds, median(rps), *std::min_element(rps.begin(), rps.end()),
              *std::max_element(rps.begin(), rps.end()), median(p50), median(p99));
  server.stop();
  ioc.stop();
  for (auto& t : threads) t.join();
  return 0;
}
