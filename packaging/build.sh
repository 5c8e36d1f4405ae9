#!/usr/bin/env bash
# Configures and builds hvdrun (Release) into build/. Shared by demo.sh and test.sh.
#
#   packaging/build.sh [--deb] [CMAKE_ARGS...]
#
# --deb: then writes the Debian package build/hvdrun_<version>_<arch>.deb (cpack -G DEB; README.md says how
# to install it on every host).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${HVD_BUILD_DIR:-$root/build}"
jobs="$(nproc)"

deb=0
cmake_args=()
for arg in "$@"; do
  if [[ "$arg" == "--deb" ]]; then deb=1; else cmake_args+=("$arg"); fi
done

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}" >/dev/null
cmake --build "$build" -j "$jobs"
if (( deb )); then
  (cd "$build" && cpack -G DEB)
fi
