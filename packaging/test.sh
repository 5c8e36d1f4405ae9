#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, and runs ctest (its summary line ends the run).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/packaging/install-deps.sh"

# libFuzzer targets need clang: a small second build tree, whose binaries the main tests run for a bounded time.
fuzz_build="$root/build/fuzz"
CC=clang CXX=clang++ cmake -S "$root" -B "$fuzz_build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHVD_BUILD_FUZZ=ON -DBUILD_TESTING=OFF -DHVD_BUILD_EXAMPLES=OFF -DHVD_BUILD_BENCH=OFF -DHVD_BUILD_PYTHON=OFF >/dev/null
cmake --build "$fuzz_build" -j "$(nproc)" --target hvd_fuzz_targets

"$root/packaging/build.sh" -DHVD_FUZZ_BIN_DIR="$fuzz_build/tests/fuzz"
cd "$root/build"
exec ctest --output-on-failure --timeout 600
