// Exception helpers shared by the C++ tests (Catch2).
#pragma once

#include <catch2/catch.hpp>

#include <string>

namespace hvd::test {

// The message of the E that `f` throws; when `f` returns instead, the test fails with `failure`. An exception
// of another type goes on up, as it would from `f`.
template <class E, class F>
std::string thrownWhat(const std::string& failure, F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL(failure);
  return {};
}

}  // namespace hvd::test
