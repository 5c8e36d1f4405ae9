#!/usr/bin/env bash
# Configures and builds hvdrun (Release) into build/. Shared by demo.sh and test.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${HVD_BUILD_DIR:-$root/build}"
jobs="$(nproc)"

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$jobs"
