#!/usr/bin/env bash
# Installs the build tree into a temporary prefix and builds two user programs against it, the way a
# user would: with find_package(hvd) (CMake) and with pkg-config (hvd.pc). Runs each as a 1-process job
# and under the installed hvdrun with 2 processes.
set -euo pipefail
build="$1"; src="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/hvdrun bin/hvd-rendezvous bin/hvd-proxy lib/libhvd.so include/hvd/hvd.h include/hvd/hvd.hpp include/hvd/config.h \
         lib/cmake/hvd/hvdConfig.cmake lib/pkgconfig/hvd.pc; do
  [[ -e "$prefix/$f" ]] || { echo "install_test: $prefix/$f was not installed" >&2; exit 1; }
done

# CMake package.
cmake -S "$src/tests/integration/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
export LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$work/cmake-build/consumer_c" | grep -qx "consumer: rank 0 of 1, sum 1" || { echo "install_test: consumer_c (cmake) failed" >&2; exit 1; }
"$work/cmake-build/consumer_cpp" | grep -qx "consumer: rank 0 of 1, sum 1" || { echo "install_test: consumer_cpp (cmake) failed" >&2; exit 1; }

# pkg-config.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cc -o "$work/consumer_pc" "$src/tests/integration/consumer/consumer.c" $(pkg-config --cflags --libs hvd)
"$work/consumer_pc" | grep -qx "consumer: rank 0 of 1, sum 1" || { echo "install_test: consumer (pkg-config) failed" >&2; exit 1; }

# The installed launcher runs the installed-library program as a 2-rank job.
out="$("$prefix/bin/hvdrun" -np 2 -H localhost:2 "$work/cmake-build/consumer_cpp")"
echo "$out" | grep -q "consumer: rank 1 of 2, sum 3" || { echo "install_test: 2-rank job output unexpected:" >&2; echo "$out" >&2; exit 1; }
echo "install_test: ok"
