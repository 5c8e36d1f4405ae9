// runtime/thread_moves.h: moving the calling thread to another CPU without binding it.
#include <catch2/catch.hpp>

#include <sched.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "runtime/thread_moves.h"
#include "tests/common/cpus.h"

using hvd::runtime::moveOff;
using hvd::runtime::MovePacer;
using hvd::runtime::moveTo;
using hvd::test::allowedCpus;
using hvd::test::setCpus;

TEST_CASE("moveTo and moveOff put the calling thread on another CPU and leave its mask as it was",
          "[placement]") {
  const std::vector<int> cpus = allowedCpus();
  if (cpus.size() < 2) {
    WARN("one CPU in this process's affinity mask: nowhere to move to");
    return;
  }
  const int a = cpus[0], b = cpus[1];
  // On a thread of its own, so that the test's thread keeps its mask; Catch's assertions are this thread's.
  struct Seen {
    bool masked = false;
    bool to_b = false, on_b = false, to_b_again = false, mask_after_to = false;
    bool off_b = false, off_absent = false, mask_after_off = false;
    bool bound_to = false, bound_off = false, bound_mask = false;
    bool bad_cpus = false;
  } seen;
  int off_cpu = -1;
  std::thread t([&] {
    if (!setCpus({a, b}) || !setCpus({a}) || !setCpus({a, b})) return;  // on a, free to run on b
    seen.masked = true;
    seen.to_b = moveTo(b);
    seen.on_b = ::sched_getcpu() == b;
    seen.to_b_again = moveTo(b);  // already there
    seen.mask_after_to = allowedCpus() == std::vector<int>{a, b};
    seen.off_b = moveOff(b);
    off_cpu = ::sched_getcpu();
    seen.off_absent = moveOff(b);  // no longer there
    seen.mask_after_off = allowedCpus() == std::vector<int>{a, b};
    // Bound to one CPU: there is nowhere else to go.
    if (!setCpus({a})) return;
    seen.bound_to = moveTo(b);
    seen.bound_off = moveOff(a);
    seen.bound_mask = allowedCpus() == std::vector<int>{a};
    seen.bad_cpus = moveTo(-1) || moveTo(CPU_SETSIZE) || moveOff(-1);
  });
  t.join();
  REQUIRE(seen.masked);
  CHECK(seen.to_b);
  CHECK(seen.on_b);
  CHECK_FALSE(seen.to_b_again);
  CHECK(seen.mask_after_to);
  CHECK(seen.off_b);
  CHECK(off_cpu == a);
  CHECK_FALSE(seen.off_absent);
  CHECK(seen.mask_after_off);
  CHECK_FALSE(seen.bound_to);
  CHECK_FALSE(seen.bound_off);
  CHECK(seen.bound_mask);
  CHECK_FALSE(seen.bad_cpus);
}

TEST_CASE("a MovePacer allows one move per period", "[placement]") {
  MovePacer slow(std::chrono::seconds(60));
  CHECK(slow.due());
  CHECK_FALSE(slow.due());
  MovePacer fast(std::chrono::milliseconds(1));
  CHECK(fast.due());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(fast.due());
}
