// The GLIBC_TUNABLES hvdrun gives its workers (launcher/worker_heap.h): the values, how they combine
// with the worker's own, and when hvdrun leaves them alone.
#include <catch2/catch.hpp>

#include "launcher/worker_heap.h"

using hvd::launcher::workerGlibcTunables;
using Env = std::vector<std::pair<std::string, std::string>>;

namespace {
const std::string kOurs = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824";
}

TEST_CASE("workers get the two malloc thresholds, after their own tunables", "[worker_heap]") {
  CHECK(workerGlibcTunables({}) == kOurs);
  CHECK(workerGlibcTunables({{"PATH", "/bin"}, {"GLIBC_TUNABLES", ""}}) == kOurs);
  CHECK(workerGlibcTunables({{"GLIBC_TUNABLES", "glibc.malloc.arena_max=2"}}) ==
        "glibc.malloc.arena_max=2:" + kOurs);
  // A longer name that starts with a threshold's name is another tunable.
  CHECK(workerGlibcTunables({{"GLIBC_TUNABLES", "glibc.malloc.mmap_threshold_x=1"}}) ==
        "glibc.malloc.mmap_threshold_x=1:" + kOurs);
}

TEST_CASE("a worker environment that chooses either threshold keeps its own malloc settings", "[worker_heap]") {
  for (const Env& env : std::vector<Env>{
           {{"GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0"}},
           {{"GLIBC_TUNABLES", "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=65536"}},
           {{"MALLOC_TRIM_THRESHOLD_", "0"}},
           {{"MALLOC_MMAP_THRESHOLD_", "65536"}},
       }) {
    CHECK_FALSE(workerGlibcTunables(env).has_value());
  }
  // glibc ignores an empty alias, and so does hvdrun.
  CHECK(workerGlibcTunables({{"MALLOC_TRIM_THRESHOLD_", ""}}) == kOurs);
  CHECK_FALSE(workerGlibcTunables({{"MALLOC_MMAP_THRESHOLD_", "65536"}, {"MALLOC_TRIM_THRESHOLD_", ""}}).has_value());
  // The last value of a variable counts (-x after the inherited environment).
  CHECK(workerGlibcTunables({{"GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0"}, {"GLIBC_TUNABLES", ""}}) ==
        kOurs);
  CHECK_FALSE(workerGlibcTunables({{"GLIBC_TUNABLES", ""}, {"GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0"}})
                  .has_value());
}
