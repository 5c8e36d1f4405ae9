// The control plane's shared-memory rings: the ring itself (order, wrap-around, a full ring, the sleep
// handshake) and RingChannel between two processes over a real unix socket pair (small and diverted
// messages in order, a sleeping reader woken, a closed peer and a full ring reported with the peer's name).
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/unique_fd.h"
#include "runtime/shm/ring.h"
#include "runtime/shm/ring_channel.h"
#include "runtime/shm/segment.h"

using hvd::runtime::shm::Ring;
using hvd::runtime::shm::RingChannel;
using hvd::runtime::shm::Segment;
using namespace std::chrono_literals;

namespace {

std::vector<char> message(size_t bytes, int seed) {
  std::vector<char> m(bytes);
  for (size_t i = 0; i < bytes; ++i) m[i] = static_cast<char>((i * 31 + static_cast<size_t>(seed)) & 0x7f);
  return m;
}

// What a RingChannel's owner does: receive until n messages came, blocking in poll() between tries.
std::vector<std::vector<char>> receiveN(RingChannel& c, size_t n, std::chrono::milliseconds timeout) {
  std::vector<std::vector<char>> got;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (got.size() < n) {
    if (!c.receive(got)) break;
    if (got.size() >= n || std::chrono::steady_clock::now() > deadline) break;
    if (c.prepareToBlock()) {
      pollfd p{c.fd(), POLLIN, 0};
      ::poll(&p, 1, 5000);  // longer than the test allows: only a wake-up ends it in time
    }
    c.unblocked();
  }
  return got;
}

}  // namespace

TEST_CASE("a ring keeps records in order across its end, refuses what does not fit, and wakes a sleeper once",
          "[ring]") {
  constexpr size_t kCapacity = 256;
  std::vector<std::byte> memory(Ring::bytes(kCapacity));
  Ring producer(memory.data(), kCapacity), consumer(memory.data(), kCapacity);
  std::vector<char> got;
  bool diverted = true;
  CHECK(consumer.empty());
  CHECK_FALSE(consumer.pop(got, diverted));
  // 60-byte records (64 with the length) leave the tail at every offset of 64 ... then wrap, many times.
  for (int i = 0; i < 40; ++i) {
    const auto m = message(60 + i % 7, i);
    REQUIRE(producer.push(m.data(), static_cast<uint32_t>(m.size())));
    if (i % 3 == 0) REQUIRE(producer.pushDiverted());
    REQUIRE(consumer.pop(got, diverted));
    CHECK_FALSE(diverted);
    CHECK(got == m);
    if (i % 3 == 0) {
      REQUIRE(consumer.pop(got, diverted));
      CHECK(diverted);
      CHECK(got.empty());
    }
  }
  // Full: 3 x 68 bytes fit in 256, a fourth does not until one is read.
  const auto m = message(64, 7);
  for (int i = 0; i < 3; ++i) REQUIRE(producer.push(m.data(), 64));
  CHECK_FALSE(producer.push(m.data(), 64));
  REQUIRE(consumer.pop(got, diverted));
  CHECK(producer.push(m.data(), 64));
  // A consumer with records waiting may not sleep; an empty one may, and the producer then wakes it once.
  CHECK_FALSE(consumer.announceSleep());
  CHECK_FALSE(producer.takeSleeper());
  while (consumer.pop(got, diverted)) {
  }
  CHECK(consumer.announceSleep());
  REQUIRE(producer.push(m.data(), 1));
  CHECK(producer.takeSleeper());
  CHECK_FALSE(producer.takeSleeper());
  consumer.awake();
}

TEST_CASE("a ring channel carries small and diverted messages in order between two processes",
          "[ring][channel]") {
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) == 0);
  const size_t big = RingChannel::kCapacity / 4 + 1;  // above Ring::largest(): through the socket
  const size_t most = RingChannel::kCapacity / 4 - 4;  // the largest that goes through the ring
  const std::vector<size_t> sizes = {0, 1, 100, big, 4000, 3 * big, 7, most, most, most, most, most, 5};
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The worker's side: takes the rings, echoes every message back, then waits for the parent to close.
    ::close(pair[0]);
    try {
      auto c = RingChannel::accept(pair[1], "the test's parent", 10s);
      auto got = receiveN(*c, sizes.size(), 10s);
      if (got.size() != sizes.size()) ::_exit(2);
      for (const auto& m : got) c->send(m);
      std::vector<std::vector<char>> rest;
      const auto deadline = std::chrono::steady_clock::now() + 10s;
      while (c->receive(rest) && std::chrono::steady_clock::now() < deadline) ::usleep(1000);
      ::_exit(rest.empty() ? 0 : 3);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      ::_exit(1);
    }
  }
  ::close(pair[1]);
  const auto start = std::chrono::steady_clock::now();
  auto c = RingChannel::offer(pair[0], "the test's child", 10s);
  for (size_t i = 0; i < sizes.size(); ++i) {
    c->send(message(sizes[i], static_cast<int>(i)));
    if (i == 5) ::usleep(200 * 1000);  // the child goes to sleep in poll(): the next message must wake it
  }
  const auto echoed = receiveN(*c, sizes.size(), 10s);
  REQUIRE(echoed.size() == sizes.size());
  CHECK(std::chrono::steady_clock::now() - start < 3s);  // no wake-up missed
  for (size_t i = 0; i < sizes.size(); ++i) {
    INFO("message " << i << " of " << sizes[i] << " bytes");
    CHECK(echoed[i] == message(sizes[i], static_cast<int>(i)));
  }
  c.reset();  // closes the socket: the child's receive() sees the end
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

namespace {

// A child process that takes a ring channel's worker side and then runs `then`; the parent's side of the
// socket pair, whose channel the caller offers.
std::pair<pid_t, int> startReader(void (*then)()) {
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(pair[0]);
    auto c = RingChannel::accept(pair[1], "the test's parent", 10s);
    then();
    ::_exit(0);
  }
  ::close(pair[1]);
  return {child, pair[0]};
}

}  // namespace

TEST_CASE("a ring channel's writer fails naming the peer when the ring stays full or the peer closes",
          "[ring][channel]") {
  const auto fill = [](RingChannel& c) {
    const auto m = message(RingChannel::kCapacity / 4 - 4, 1);
    for (int i = 0; i < 3; ++i) c.send(m);
    return m;
  };
  SECTION("a reader that stops reading: the writer gives up at its timeout") {
    const auto [child, fd] = startReader([] { ::sleep(30); });  // never reads; killed by the parent
    auto c = RingChannel::offer(fd, "rank 7", 300ms);
    const auto m = fill(*c);
    const auto start = std::chrono::steady_clock::now();
    try {
      c->send(m);
      c->send(m);
      FAIL("a send into a full ring of a reader that stopped succeeded");
    } catch (const hvd::NetworkError& e) {
      CHECK_THAT(e.what(),
                 Catch::StartsWith("sending to rank 7 failed: its shared-memory ring stayed full for "
                                   "300 ms (it stopped reading)"));
    }
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  SECTION("a reader that is gone: the writer fails at once, not at its timeout") {
    const auto [child, fd] = startReader([] {});
    auto c = RingChannel::offer(fd, "rank 3", 30s);
    REQUIRE(::waitpid(child, nullptr, 0) == child);
    const auto m = fill(*c);
    const auto start = std::chrono::steady_clock::now();
    try {
      c->send(m);
      c->send(m);
      FAIL("a send into a full ring of a reader that exited succeeded");
    } catch (const hvd::NetworkError& e) {
      CHECK_THAT(e.what(), Catch::StartsWith("sending to rank 3 failed: the connection closed"));
    }
    CHECK(std::chrono::steady_clock::now() - start < 5s);
  }
}

namespace {

// Size and Rss in KiB of this process's mapping of the memfd named hvd:<scope>, from /proc/self/smaps;
// {0, 0} when there is none.
std::pair<long, long> mappingKib(const std::string& scope) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  long size = 0, rss = 0;
  while (std::getline(smaps, line)) {
    if (line.find("memfd:hvd:" + scope + " ") != std::string::npos) {
      inside = true;
    } else if (inside && line.rfind("Size:", 0) == 0) {
      size = std::stol(line.substr(5));
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      rss = std::stol(line.substr(4));
      break;
    }
  }
  return {size, rss};
}

}  // namespace

TEST_CASE("a ring channel's rings are in memory from the start, while a segment made without prefault is not",
          "[ring][channel]") {
  const auto [child, fd] = startReader([] {});
  auto c = RingChannel::offer(fd, "the test's child", 10s);
  const auto [size, rss] = mappingKib("control");
  CHECK(size >= static_cast<long>(2 * RingChannel::kCapacity / 1024));
  CHECK(rss == size);  // no page left to fault in while messages flow
  REQUIRE(::waitpid(child, nullptr, 0) == child);

  hvd::UniqueFd mem;
  Segment lazy = Segment::create(16 * 4096, "test-lazy", mem);
  const auto [lazy_size, lazy_rss] = mappingKib("test-lazy");
  CHECK(lazy_size == 64);
  CHECK(lazy_rss == 0);
}
