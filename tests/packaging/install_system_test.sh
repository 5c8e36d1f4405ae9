#!/usr/bin/env bash
# README.md followed literally for the system prefix: `cmake --install build --prefix /usr/local` as root,
# then its C example built with pkg-config and run under hvdrun from PATH, on a fresh machine. The program
# carries no run path there, so it starts only if the install refreshed the dynamic linker's cache.
#
# The real /usr/local, /etc/ld.so.cache and /var/cache/ldconfig are never written: the test runs in a private
# mount namespace (unshare -m) with an empty tmpfs over /usr/local (a fresh machine's), a copy of /etc over
# /etc and a tmpfs over /var/cache/ldconfig. It needs root and mount namespaces; without them it exits 77,
# which ctest reports as skipped.
#
#   install_system_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"; src="$(cd "$2" && pwd)"
test=install_system_test
. "$src/tests/packaging/readme.sh"

# Outside the namespace: start it, then check that the real system was left as it was.
if [[ "${HVD_PACKAGING_NAMESPACE:-}" != 1 ]]; then
  if [[ "$(id -u)" != 0 ]]; then
    echo "$test: skipped: needs root, to install into /usr/local in a mount namespace"
    exit 77
  fi
  state() {
    ls -d /usr/local/bin/hvd* /usr/local/lib/libhvd* /usr/local/include/hvd /usr/local/lib/pkgconfig/hvd.pc \
      /usr/local/lib/cmake/hvd /usr/local/lib/python3*/dist-packages/hvd 2>/dev/null || true
    md5sum /etc/ld.so.cache 2>/dev/null || true
  }
  rerun_in_mount_namespace "/usr/local or /etc/ld.so.cache" "$@"
fi

# Inside the namespace. Its mounts go away with it; $work's files live in a tmpfs of their own.
namespace_scratch
fresh_usr_local
mkdir "$work/etc"
cp -a /etc/. "$work/etc/"
mount --bind "$work/etc" /etc
mount -t tmpfs tmpfs /var/cache/ldconfig
# Debian's root PATH, and nothing that would find the library by another way.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
unset LD_LIBRARY_PATH PKG_CONFIG_PATH CMAKE_PREFIX_PATH PYTHONPATH

# This machine's linker cache without what the real /usr/local held: the test needs one where libhvd.so.0 is
# unknown, else the program would start without the install refreshing it.
ldconfig
if known="$(cached_libhvd)" && [[ -n "$known" ]]; then
  fail "libhvd.so.0 is installed outside /usr/local ($known); remove it to run this test"
fi

ln -s "$build" "$work/build"
install_line="$(readme_line '^cmake --install build --prefix /usr/local( |$)')"
run_logged "$work/install.log" "'$install_line'" bash -c "cd '$work' && $install_line"

mkdir "$work/c"
readme_block "A minimal worker" c >"$work/c/hello.c"
mapfile -t c_commands < <(readme_block "A minimal worker" sh 1)
(( ${#c_commands[@]} == 2 )) || fail "README.md's C commands are not 2 lines (build, run): ${c_commands[*]}"
run_logged "$work/c/build.log" "'${c_commands[0]}'" bash -c "cd '$work/c' && ${c_commands[0]}"
# A run path to /usr/local/lib would hide a missing ldconfig; the system prefix's hvd.pc adds none.
if grep -qE 'RPATH|RUNPATH' <<<"$(readelf -d "$work/c/hello")"; then
  fail "the C example built with /usr/local's hvd.pc has a run path:" \
       "$(readelf -d "$work/c/hello" | grep -E 'RPATH|RUNPATH')"
fi
[[ "$(command -v hvdrun)" == /usr/local/bin/hvdrun ]] ||
  fail "hvdrun on PATH is $(command -v hvdrun || echo missing), not /usr/local/bin/hvdrun"
run_logged "$work/c/run.out" "'${c_commands[1]}'" bash -c "cd '$work/c' && ${c_commands[1]}"
expect_ranks "$work/c/run.out"
# The program found the library through the cache the install refreshed.
cached="$(cached_libhvd)"
[[ "$cached" == /usr/local/lib/libhvd.so.0 ]] ||
  fail "after '$install_line', the linker cache has no /usr/local/lib/libhvd.so.0 (${cached:-no libhvd.so.0});" \
       "the install said: $(grep 'hvd:' "$work/install.log" || echo nothing)"

# The Python package lands where Debian's python3 looks for /usr/local.
if ls /usr/local/lib/python3*/dist-packages/hvd/_core*.so >/dev/null 2>&1; then
  where="$(cd / && /usr/bin/python3 -c 'import hvd._core, hvd; print(hvd.__file__)' 2>&1)" ||
    fail "/usr/bin/python3 cannot import the installed hvd: $where"
  [[ "$where" == /usr/local/lib/python3*/dist-packages/hvd/__init__.py ]] || fail "python3 imports hvd from $where"
fi
echo "$test: ok"
