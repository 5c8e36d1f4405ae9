#!/usr/bin/env bash
# Packs what the GPU checks need from this machine's build into one folder that travels to a GPU machine
# (whose image has CUDA, PyTorch, pybind11 and a compiler, but not Debian's Boost, Gloo or libssh2).
#
#   bench/gpu/make_bundle.sh [BUILD] [DIR]      # from the repository root, after a build
#
# BUILD (default build): the build tree. DIR (default .gpucheck, ignored by git): filled with
#   bin/hvdrun, bin/hvd-proxy     the launcher
#   lib/libhvd.so*                the runtime (hvd._core is built on the GPU machine for its python3)
#   lib/extra/                    the non-glibc libraries those need (Boost, Gloo, libssh2, yaml-cpp...)
#   include/hvd/config.h          the generated header python/core.cc includes
#   horovod/test/...              Horovod's test_torch.py and test/utils, when HVD_HOROVOD_SOURCE names a
#                                 Horovod checkout (the conformance run is skipped otherwise)
#   site/mock                     Debian's python3-mock, which Horovod's test utilities import
# Exits 2 naming what is missing.
set -eu
BUILD=${1:-build}
DIR=${2:-.gpucheck}
for f in "$BUILD/hvdrun" "$BUILD/hvd-proxy" "$BUILD/runtime/libhvd.so" "$BUILD/generated/hvd/config.h"; do
  [ -e "$f" ] || { echo "make_bundle: $f does not exist (build first: cmake --build $BUILD)" >&2; exit 2; }
done
rm -rf "$DIR"
mkdir -p "$DIR/bin" "$DIR/lib/extra" "$DIR/include/hvd" "$DIR/site"
cp "$BUILD/hvdrun" "$BUILD/hvd-proxy" "$DIR/bin/"
cp -P "$BUILD"/runtime/libhvd.so* "$DIR/lib/"
cp "$BUILD/generated/hvd/config.h" "$DIR/include/hvd/"
ldd "$BUILD/hvdrun" "$BUILD/hvd-proxy" "$BUILD/runtime/libhvd.so" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  while read -r lib; do
    case $(basename "$lib") in
      libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux* | libstdc++.so* | libgcc_s.so*) ;;
      *) cp -L "$lib" "$DIR/lib/extra/" ;;
    esac
  done
if [ -n "${HVD_HOROVOD_SOURCE:-}" ]; then
  [ -f "$HVD_HOROVOD_SOURCE/test/parallel/test_torch.py" ] ||
    { echo "make_bundle: HVD_HOROVOD_SOURCE=$HVD_HOROVOD_SOURCE holds no test/parallel/test_torch.py" >&2; exit 2; }
  mkdir -p "$DIR/horovod/test"
  cp -r "$HVD_HOROVOD_SOURCE/test/parallel" "$HVD_HOROVOD_SOURCE/test/utils" "$DIR/horovod/test/"
fi
mock=$(/usr/bin/python3 -c 'import mock, os; print(os.path.dirname(mock.__file__))' 2>/dev/null || true)
if [ -n "$mock" ]; then
  cp -r "$mock" "$DIR/site/"
else
  echo "make_bundle: python3-mock is not installed here; the Horovod conformance run will fail to import it" >&2
fi
du -sh "$DIR"
