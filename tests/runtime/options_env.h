// RuntimeOptions::fromEnvironment over a map in place of the process environment, for the tests of the
// options and of the launchers' variables.
#pragma once

#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "base/error.h"
#include "runtime/options.h"

namespace hvd::test {

using Env = std::map<std::string, std::string>;

// The options read from `env` alone.
inline runtime::RuntimeOptions parse(const Env& env) {
  return runtime::RuntimeOptions::fromEnvironment([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// `env` is refused with a UsageError whose message starts with `message`.
inline void requireUsageError(const Env& env, const std::string& message) {
  REQUIRE_THROWS_AS(parse(env), hvd::UsageError);
  REQUIRE_THROWS_WITH(parse(env), Catch::StartsWith(message));
}

}  // namespace hvd::test
