// Rendezvous scale simulation: N simulated workers making exactly the requests of Communicator::connect
// (gloo_backend) against a real hvd-rendezvous process, with the address lists this machine's Gloo
// produces (Debian's libgloo-dev listens once per pair: shape kPorts of address_list.h, a 44-byte header
// whose first 20 bytes are what peers read, and a 2-byte entry per rank). The ranks sit K to a host
// (--ranks-per-host, default 8 as on a node of 8 GPUs): the ranks of one host publish the same host
// address, so their header prefixes are equal. Each worker:
//   PUT    /<scope>/<r>                                             its address list (real encoder layout)
//   POST   /<scope>?wait_ms=..&values=1&keys=0,N&range=0,20&refs=1  every rank's header prefix, each host's
//                                                                   once (one answer shared by all)
//   POST   /<scope>?wait_ms=..&values=1&keys=0,N&range=44+2r,2      its column: its entry in every list
//   (Gloo's barrier over the new pairs: every worker has fetched)
//   DELETE /<scope>/<r>
// It checks the size of every answer (exactly what the encodings give) and, for a sample of workers, the
// decoded headers (host addresses) and every entry of its column against what the peers published.
// Reports time to completion (from the release of the workers to the last DELETE answered) and the
// server's peak RSS (VmHWM), medians over rounds.
//
//   rendezvous_scale [--quick] [--n N[,N...]] [--rounds R] [--daemon PATH] [--per-process W]
//                    [--ranks-per-host K]
//
// Workers are not threads (thousands of threads on a few cores measure the clients, not the server): the
// N workers are split over client processes of at most W (default 4096) each, every process driving its
// workers' keep-alive connections from one epoll loop. Each process stays below the file descriptor limit
// (one socket per worker); the daemon needs one descriptor per worker and runs with --max-connections
// N + 1024, so N is bounded by the hard limit (ulimit -Hn) as well.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <fstream>
#include <regex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gloo_backend/address_list.h"
#include "rendezvous/handler.h"
#include "tests/common/child.h"

using Clock = std::chrono::steady_clock;
namespace gb = hvd::gloo_backend;

namespace {

pid_t g_daemon = -1;  // the running daemon, stopped when the bench fails (in the bench process only)

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "rendezvous_scale: %s\n", message.c_str());
  if (g_daemon > 0) ::kill(g_daemon, SIGTERM);
  std::fflush(stderr);
  ::_exit(1);
}

struct Daemon {
  pid_t pid = -1;
  uint16_t port = 0;
};

Daemon startDaemon(const std::string& path, int max_connections) {
  const auto child = hvd::test::startAndReadFirstLine(
      path, {path, "--no-token", "--threads", "2", "--max-connections", std::to_string(max_connections)});
  if (child.pid < 0) die("cannot start " + path + ": pipe or fork failed");
  Daemon d;
  d.pid = child.pid;
  const std::string& line = child.first_line;
  std::smatch m;
  if (!std::regex_search(line, m, std::regex(R"(:(\d+)$)"))) die("cannot start " + path + " (printed '" + line + "')");
  d.port = static_cast<uint16_t>(std::stoi(m[1]));
  return d;
}

long peakRssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// The port of publisher r's pair to peer i (never 0).
uint16_t portOf(int r, int i) { return static_cast<uint16_t>(32768 + (static_cast<int64_t>(r) * 7919 + i) % 28000); }

int g_ranks_per_host = 8;  // --ranks-per-host

// The IPv4 address of rank r's host: 127.0.0.1 for the first host, 127.0.0.2 for the next, and so on
// (addresses only: the simulation never connects to them).
uint32_t hostAddress(int r) { return INADDR_LOOPBACK + static_cast<uint32_t>(r / g_ranks_per_host); }

std::vector<char> gloAddress(uint32_t host, uint16_t port) {
  std::vector<char> a(gb::kGlooAddressBytes, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(host);
  sin.sin_port = htons(port);
  std::memcpy(a.data(), &sin, sizeof sin);
  const int64_t seq = -1;  // Debian's Gloo leaves it unset
  std::memcpy(a.data() + 128, &seq, sizeof seq);
  return a;
}

// Rank r's value, as the runtime's encoder builds it from its pairs' addresses (on host `host`).
std::vector<char> encodeReal(int n, int r, uint32_t host) {
  std::vector<std::vector<char>> by_rank(n);
  for (int i = 0; i < n; ++i) {
    if (i != r) by_rank[i] = gloAddress(host, portOf(r, i));
  }
  return gb::encodeAddressList(by_rank, static_cast<size_t>(r));
}
std::vector<char> encodeReal(int n, int r) { return encodeReal(n, r, hostAddress(r)); }

// Where two header encodings first differ, found in [from, kAddressListHeaderBytes).
size_t firstDifference(const std::vector<char>& a, const std::vector<char>& b) {
  for (size_t i = 0; i < gb::kAddressListHeaderBytes; ++i) {
    if (a[i] != b[i]) return i;
  }
  die("two encodings that should differ have the same header");
}

// The same, without materializing N addresses per rank: a template from the real encoder with rank r's
// own-rank field, host address and ports patched in. Checked byte for byte against encodeReal for a
// sample of ranks.
struct Values {
  std::vector<char> base;  // rank 0's
  size_t own_at = 0;       // where the own-rank field lies (found by diffing real encodings)
  size_t host_at = 0;      // where the IPv4 address lies (likewise)
  size_t headers_bytes = 0;  // the answer to the headers' fetch (every peer prefix, refs=1)
  Values(int n) : base(encodeReal(n, 0, INADDR_LOOPBACK)) {
    if (n < 2) die("N must be at least 2");
    own_at = firstDifference(base, encodeReal(n, 1, INADDR_LOOPBACK));
    host_at = firstDifference(base, encodeReal(n, 0, 0x0a010203));  // 10.1.2.3: every byte differs
    const gb::AddressListHeader parsed(std::string_view(base.data(), gb::kAddressListHeaderBytes), "rank 0's list");
    if (parsed.shape() != gb::AddressListShape::kPorts || parsed.entryBytes() != 2 ||
        own_at + 4 > gb::kAddressListHeaderBytes || host_at + 4 > gb::kAddressListPeerBytes) {
      die("the encoder did not produce the ports shape with 2-byte entries and the IPv4 address in the peer prefix");
    }
    for (int r : {0, 1, n / 2, n - 1}) {
      if (make(n, r) != encodeReal(n, r)) die("a patched address list differs from the encoder's, rank " + std::to_string(r));
    }
    // The prefixes of the ranks of one host are equal: each host's comes once, the others as references.
    std::unordered_map<std::string, uint32_t> last;
    std::string answer;
    for (uint32_t r = 0; r < static_cast<uint32_t>(n); ++r) {
      const std::string prefix = header(static_cast<int>(r)).substr(0, gb::kAddressListPeerBytes);
      const auto [at, added] = last.emplace(prefix, r);
      hvd::rendezvous::appendValueOrRef(answer, prefix, added ? std::nullopt : std::optional<uint32_t>(r - at->second));
      at->second = r;
    }
    headers_bytes = answer.size();
  }
  // Rank r's header (the first kAddressListHeaderBytes of its value).
  std::string header(int r) const {
    std::string h(base.data(), gb::kAddressListHeaderBytes);
    for (int b = 0; b < 4; ++b) h[own_at + b] = static_cast<char>(static_cast<uint32_t>(r) >> (8 * b));
    const uint32_t host = htonl(hostAddress(r));
    std::memcpy(h.data() + host_at, &host, 4);
    return h;
  }
  std::vector<char> make(int n, int r) const {
    std::vector<char> v = base;
    const std::string h = header(r);
    std::memcpy(v.data(), h.data(), h.size());
    for (int i = 0; i < n; ++i) {
      char* at = v.data() + gb::kAddressListHeaderBytes + 2 * i;
      if (i == r) {
        at[0] = at[1] = 0;
      } else {
        const uint16_t port = htons(portOf(r, i));
        std::memcpy(at, &port, 2);
      }
    }
    return v;
  }
};

struct Conn {
  int fd = -1;
  int rank = 0;
  int step = 0;  // 0 PUT, 1 headers, 2 column, 3 at the barrier, 4 DELETE, 5 done
  std::string out;
  size_t out_at = 0;
  bool want_out = false;
  std::string head;
  bool in_body = false;
  size_t body_left = 0, body_size = 0;
  int status = 0;
  bool keep = false;  // a sampled worker keeps its answers' bodies to decode them
  std::string body;
};

constexpr int kWaitMs = 300000;

struct Client {
  int n, lo, hi, round, epfd, ctrl_in, ctrl_out;
  uint16_t port;
  const Values* values;
  std::vector<Conn> conns;
  int fetched = 0, finished = 0, reconnects = 0;

  std::string scope() const { return "sim" + std::to_string(round); }

  void request(Conn& c, const std::string& method, const std::string& target, std::string_view body) {
    c.out = method + " " + target + " HTTP/1.1\r\nHost: b\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    c.out.append(body);
    c.out_at = 0;
    flush(c);
  }
  void flush(Conn& c) {
    while (c.out_at < c.out.size()) {
      const ssize_t w = ::send(c.fd, c.out.data() + c.out_at, c.out.size() - c.out_at, MSG_NOSIGNAL);
      if (w < 0) {
        if (errno == EAGAIN) break;
        die("worker " + std::to_string(c.rank) + ": send: " + std::strerror(errno));
      }
      c.out_at += static_cast<size_t>(w);
    }
    const bool want = c.out_at < c.out.size();
    if (want != c.want_out) {
      epoll_event ev{};
      ev.events = EPOLLIN | (want ? EPOLLOUT : 0);
      ev.data.u32 = static_cast<uint32_t>(&c - conns.data());
      ::epoll_ctl(epfd, EPOLL_CTL_MOD, c.fd, &ev);
      c.want_out = want;
    }
    if (!want) std::string().swap(c.out);
  }
  void fetch(Conn& c) {
    const size_t h = gb::kAddressListHeaderBytes;
    const std::string range = c.step == 1 ? "0," + std::to_string(gb::kAddressListPeerBytes) + "&refs=1"
                                          : std::to_string(h + 2 * c.rank) + ",2";
    request(c, "POST",
            "/" + scope() + "?wait_ms=" + std::to_string(kWaitMs) + "&values=1&keys=0," + std::to_string(n) + "&range=" + range,
            {});
  }
  void next(Conn& c) {
    if (c.step == 0) {
      request(c, "PUT", "/" + scope() + "/" + std::to_string(c.rank), [&] {
        const auto v = values->make(n, c.rank);
        return std::string(v.begin(), v.end());
      }());
    } else if (c.step == 1 || c.step == 2) {
      fetch(c);
    } else if (c.step == 4) {
      request(c, "DELETE", "/" + scope() + "/" + std::to_string(c.rank), {});
    }
  }
  void check(const Conn& c) {
    const std::string who = "worker " + std::to_string(c.rank);
    // Headers: headers_bytes (refs=1); columns: every value one length byte and 2 bytes.
    const size_t expected = c.step == 1 ? values->headers_bytes : static_cast<size_t>(n) * 3;
    if (c.body_size != expected) {
      die(who + ": fetch " + std::to_string(c.step) + " answered " + std::to_string(c.body_size) + " bytes, expected " +
          std::to_string(expected));
    }
    if (!c.keep) return;
    const auto split = hvd::rendezvous::splitValues(c.body, c.step == 1);
    if (!split || split->size() != static_cast<size_t>(n)) die(who + ": malformed answer");
    for (int p = 0; p < n; ++p) {
      if (p == c.rank) continue;
      const std::string_view v = (*split)[p];
      const std::string where = "key " + std::to_string(p);
      // Step 1: the prefix as fetched; step 2: the entry against rank p's header as published.
      const gb::AddressListHeader header(c.step == 1 ? v : std::string_view(values->header(p)), static_cast<size_t>(p), where);
      if (header.size() != static_cast<size_t>(n) || header.entryBytes() != 2) die(who + ": header of " + where + " is wrong");
      const auto address = header.address(static_cast<size_t>(c.rank), c.step == 1 ? std::string_view("\0\0", 2) : v);
      uint32_t host;
      std::memcpy(&host, address.data() + 4, 4);
      if (ntohl(host) != hostAddress(p)) die(who + ": wrong host address from " + where);
      if (c.step == 2) {
        uint16_t port;
        std::memcpy(&port, address.data() + 2, 2);
        if (ntohs(port) != portOf(p, c.rank)) die(who + ": wrong port from rank " + std::to_string(p));
      }
    }
  }
  void answered(Conn& c) {
    if (c.step == 1 || c.step == 2) {
      if (c.status == 404) {  // the long poll ran out: ask again
        fetch(c);
        return;
      }
      if (c.status != 200) die("worker " + std::to_string(c.rank) + ": fetch answered " + std::to_string(c.status) + ": " + c.body);
      check(c);
    } else if (c.status != 200) {
      die("worker " + std::to_string(c.rank) + ": step " + std::to_string(c.step) + " answered " + std::to_string(c.status));
    }
    std::string().swap(c.body);
    ++c.step;
    if (c.step == 3) {
      if (++fetched == hi - lo) {
        const char f = 'F';
        if (::write(ctrl_out, &f, 1) != 1) die("control pipe");
      }
      return;
    }
    if (c.step == 5) {
      ++finished;
      return;
    }
    next(c);
  }
  void readable(Conn& c, std::vector<char>& scratch) {
    while (true) {
      const ssize_t got = ::recv(c.fd, scratch.data(), scratch.size(), 0);
      if (got < 0 && errno == EAGAIN) return;
      if (got <= 0 && (c.step == 3 || (c.step == 4 && c.head.empty() && !c.in_body))) {
        // The server closes keep-alive connections idle for its read timeout (10 s): a worker at the
        // barrier of a large job may wait longer, and its DELETE may cross the close. It reconnects for
        // the DELETE (idempotent), as HttpStore does.
        ::close(c.fd);
        c.fd = -1;
        ++reconnects;
        if (c.step == 4) {
          connect(c);
          next(c);
        }
        return;
      }
      if (got <= 0) die("worker " + std::to_string(c.rank) + ": connection lost at step " + std::to_string(c.step));
      const char* p = scratch.data();
      size_t left = static_cast<size_t>(got);
      while (left > 0) {
        if (!c.in_body) {
          // The head is a few hundred bytes: look for its end in the next KiB only, not in the whole chunk
          // (which would copy every answer's body once more).
          const size_t before = c.head.size();
          const size_t look = std::min(left, size_t{1024});
          c.head.append(p, look);
          const auto end = c.head.find("\r\n\r\n", before >= 3 ? before - 3 : 0);
          if (end == std::string::npos) {
            p += look;
            left -= look;
            continue;
          }
          const size_t used = end + 4 - before;
          p += used;
          left -= used;
          c.status = std::atoi(c.head.c_str() + 9);
          const auto cl = c.head.find("Content-Length: ");
          c.body_left = c.body_size = cl == std::string::npos ? 0 : std::strtoull(c.head.c_str() + cl + 16, nullptr, 10);
          c.head.clear();
          c.in_body = true;
          c.body.clear();
        }
        const size_t take = std::min(left, c.body_left);
        if (c.keep || c.status != 200) c.body.append(p, take);
        p += take;
        left -= take;
        c.body_left -= take;
        if (c.body_left == 0) {
          c.in_body = false;
          answered(c);
        }
      }
    }
  }
  void connect(Conn& c) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c.fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (c.fd < 0) die(std::string("socket: ") + std::strerror(errno));
    if (::connect(c.fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) die(std::string("connect: ") + std::strerror(errno));
    int one = 1;
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::fcntl(c.fd, F_SETFL, ::fcntl(c.fd, F_GETFL) | O_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(c.rank - lo);
    c.want_out = false;
    ::epoll_ctl(epfd, EPOLL_CTL_ADD, c.fd, &ev);
  }
  void run() {
    epfd = ::epoll_create1(0);
    epoll_event ctrl{};
    ctrl.events = EPOLLIN;
    ctrl.data.u32 = UINT32_MAX;
    ::epoll_ctl(epfd, EPOLL_CTL_ADD, ctrl_in, &ctrl);
    char go;
    if (::read(ctrl_in, &go, 1) != 1) die("control pipe");
    conns.resize(static_cast<size_t>(hi - lo));
    for (int r = lo; r < hi; ++r) {
      Conn& c = conns[r - lo];
      c.rank = r;
      c.keep = r % 509 == 0 || r == n - 1;
      connect(c);
      next(c);
    }
    std::vector<char> scratch(1 << 20);
    std::vector<epoll_event> events(1024);
    while (finished < hi - lo) {
      const int k = ::epoll_wait(epfd, events.data(), static_cast<int>(events.size()), -1);
      if (k < 0 && errno == EINTR) continue;
      for (int e = 0; e < k; ++e) {
        if (events[e].data.u32 == UINT32_MAX) {  // every worker of every process has fetched: the barrier opens
          char d;
          if (::read(ctrl_in, &d, 1) != 1) die("control pipe closed");
          for (auto& c : conns) {
            c.step = 4;
            if (c.fd < 0) connect(c);
            next(c);
          }
          continue;
        }
        Conn& c = conns[events[e].data.u32];
        if (events[e].events & EPOLLOUT) flush(c);
        if (events[e].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) readable(c, scratch);
      }
    }
    const char done = 'E';
    if (::write(ctrl_out, &done, 1) != 1) die("control pipe");
    ::_exit(0);
  }
};

struct RoundResult {
  double seconds = 0, last_fetch = 0;
};

RoundResult runRound(uint16_t port, int n, int round, int per_process, const Values& values) {
  struct Child {
    pid_t pid;
    int to, from;
  };
  std::vector<Child> children;
  for (int lo = 0; lo < n; lo += per_process) {
    int down[2], up[2];
    if (::pipe(down) != 0 || ::pipe(up) != 0) die("pipe failed");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(down[1]);
      ::close(up[0]);
      for (const auto& c : children) {
        ::close(c.to);
        ::close(c.from);
      }
      g_daemon = -1;  // a client process leaves the daemon to the bench process
      Client client{n, lo, std::min(n, lo + per_process), round, -1, down[0], up[1], port, &values, {}, 0, 0};
      client.run();
    }
    ::close(down[0]);
    ::close(up[1]);
    children.push_back({pid, down[1], up[0]});
  }
  const auto expect = [&](char what) {
    for (const auto& c : children) {
      char got = 0;
      if (::read(c.from, &got, 1) != 1 || got != what) die("a client process failed (see above)");
    }
  };
  const auto t0 = Clock::now();
  for (const auto& c : children) {
    if (::write(c.to, "G", 1) != 1) die("control pipe");
  }
  expect('F');
  RoundResult result;
  result.last_fetch = std::chrono::duration<double>(Clock::now() - t0).count();
  for (const auto& c : children) {
    if (::write(c.to, "D", 1) != 1) die("control pipe");
  }
  expect('E');
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (const auto& c : children) {
    int status = 0;
    ::waitpid(c.pid, &status, 0);
    ::close(c.to);
    ::close(c.from);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("a client process failed");
  }
  return result;
}

std::string defaultDaemon() {
  const auto self = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  for (auto candidate : {self / "../../hvd-rendezvous", self / "../../cmd/hvd-rendezvous"}) {
    if (std::filesystem::exists(candidate)) return candidate.lexically_normal().string();
  }
  return "hvd-rendezvous";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {64, 256, 1024, 4096};
  int rounds = 3;
  int per_process = 4096;
  std::string daemon = defaultDaemon();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--quick") {
      sizes = {64, 256, 1024};
      rounds = 1;
    } else if (a == "--n" && has_value) {
      sizes.clear();
      std::string list = argv[++i];
      for (size_t p = 0; p < list.size();) {
        size_t q = list.find(',', p);
        sizes.push_back(std::stoi(list.substr(p, q - p)));
        p = q == std::string::npos ? list.size() : q + 1;
      }
    } else if (a == "--rounds" && has_value) {
      rounds = std::stoi(argv[++i]);
    } else if (a == "--per-process" && has_value) {
      per_process = std::stoi(argv[++i]);
    } else if (a == "--daemon" && has_value) {
      daemon = argv[++i];
    } else if (a == "--ranks-per-host" && has_value) {
      g_ranks_per_host = std::stoi(argv[++i]);
      if (g_ranks_per_host < 1) {
        std::fprintf(stderr, "rendezvous_scale: --ranks-per-host must be at least 1, got %d\n", g_ranks_per_host);
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: rendezvous_scale [--quick] [--n N[,N...]] [--rounds R] [--daemon PATH] [--per-process W] "
                   "[--ranks-per-host K]\n");
      return 2;
    }
  }
  rlimit nofile{};
  ::getrlimit(RLIMIT_NOFILE, &nofile);
  nofile.rlim_cur = nofile.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &nofile);
  if (static_cast<rlim_t>(per_process) + 64 > nofile.rlim_cur) {
    std::fprintf(stderr, "rendezvous_scale: --per-process %d needs about %d open files, RLIMIT_NOFILE is %llu\n",
                 per_process, per_process + 64, static_cast<unsigned long long>(nofile.rlim_cur));
    return 1;
  }
  for (int n : sizes) {
    // The daemon (which inherits the limit) holds a socket per worker.
    if (static_cast<rlim_t>(n) + 256 > nofile.rlim_cur) {
      std::fprintf(stderr,
                   "rendezvous_scale: N=%d needs about %d open files in the daemon, RLIMIT_NOFILE is %llu "
                   "(raising the hard limit needs CAP_SYS_RESOURCE)\n",
                   n, n + 256, static_cast<unsigned long long>(nofile.rlim_cur));
      return 1;
    }
    const Values values(n);
    Daemon d = startDaemon(daemon, n + 1024);
    g_daemon = d.pid;
    std::vector<double> times;
    for (int r = 0; r < rounds; ++r) {
      const RoundResult result = runRound(d.port, n, r, per_process, values);
      times.push_back(result.seconds);
      std::printf("  N=%d round %d: %.3f s (every fetch done at %.3f s)\n", n, r + 1, result.seconds, result.last_fetch);
      std::fflush(stdout);
    }
    const long rss = peakRssKiB(d.pid);
    ::kill(d.pid, SIGTERM);
    ::waitpid(d.pid, nullptr, 0);
    g_daemon = -1;
    std::sort(times.begin(), times.end());
    const size_t h = gb::kAddressListHeaderBytes;
    const size_t per_worker = values.headers_bytes + static_cast<size_t>(n) * 3;
    std::printf("rendezvous_scale: N=%d (%d per host): median %.3f s (min %.3f, max %.3f) over %d round(s); server peak "
                "RSS %.1f MiB; value %zu bytes (ports shape: %zu-byte header, 2 bytes per rank); answers %zu bytes per "
                "worker (headers %zu, column %d), %.1f MiB sent in all; %d client process(es)\n",
                n, g_ranks_per_host, times[times.size() / 2], times.front(), times.back(), rounds, rss / 1024.0,
                values.base.size(), h, per_worker, values.headers_bytes, n * 3, double(n) * per_worker / (1 << 20),
                (n + per_process - 1) / per_process);
    std::fflush(stdout);
  }
  return 0;
}
