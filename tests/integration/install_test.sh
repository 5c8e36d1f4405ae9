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
grep -qx "consumer: rank 0 of 1, sum 1" <<<"$("$work/cmake-build/consumer_c")" || { echo "install_test: consumer_c (cmake) failed" >&2; exit 1; }
grep -qx "consumer: rank 0 of 1, sum 1" <<<"$("$work/cmake-build/consumer_cpp")" || { echo "install_test: consumer_cpp (cmake) failed" >&2; exit 1; }

# pkg-config.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cc -o "$work/consumer_pc" "$src/tests/integration/consumer/consumer.c" $(pkg-config --cflags --libs hvd)
grep -qx "consumer: rank 0 of 1, sum 1" <<<"$("$work/consumer_pc")" || { echo "install_test: consumer (pkg-config) failed" >&2; exit 1; }

# The installed launcher runs the installed-library program as a 2-rank job.
out="$("$prefix/bin/hvdrun" -np 2 -H localhost:2 "$work/cmake-build/consumer_cpp")"
grep -q "consumer: rank 1 of 2, sum 3" <<<"$out" || { echo "install_test: 2-rank job output unexpected:" >&2; echo "$out" >&2; exit 1; }
# The installed Python package: the installed hvdrun puts it on its workers' PYTHONPATH, and its extension
# loads the installed libhvd (RPATH), not the build tree's.
pydir="$(ls -d "$prefix"/lib/python3*/dist-packages 2>/dev/null | head -n 1)"
if ls "$build"/python/hvd/_core*.so >/dev/null 2>&1; then  # built with the Python package
  [[ -n "$pydir" ]] || { echo "install_test: no $prefix/lib/python3*/dist-packages was installed" >&2; exit 1; }
  ls "$pydir"/hvd/_core*.so >/dev/null 2>&1 || { echo "install_test: $pydir/hvd/_core*.so was not installed" >&2; exit 1; }
  unset LD_LIBRARY_PATH
  out="$(cd "$work" && env -u PYTHONPATH PREFIX="$prefix" "$prefix/bin/hvdrun" -np 2 -H localhost:2 /usr/bin/python3 -c '
import os, torch, hvd, hvd.torch as h
h.init()
assert os.path.dirname(hvd.__file__).startswith(os.environ["PREFIX"]), hvd.__file__
maps = open("/proc/self/maps").read()
assert os.environ["PREFIX"] + "/lib/libhvd.so" in maps, "libhvd not from the prefix"
print("python", h.rank(), int(h.allreduce(torch.ones(1), op=h.Sum).item()))' 2>&1)" || true
  grep -q "python 1 2" <<<"$out" || { echo "install_test: Python job under the installed hvdrun failed:" >&2; echo "$out" >&2; exit 1; }
fi
echo "install_test: ok"
