#!/usr/bin/env bash
# README.md followed literally for a prefix outside the dynamic linker's search path ("$HOME/.local", with
# HOME a temporary folder): its install and export lines, then its C example built with pkg-config and its
# C++ example built with CMake, each run as a 2-rank job under the installed hvdrun. Nothing sets
# LD_LIBRARY_PATH: the programs must find libhvd.so.0 in the prefix through the run path that hvd.pc and
# hvd::hvd give them, also after the CMake program is installed, and the installed executables must start.
#
#   install_prefix_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"; src="$(cd "$2" && pwd)"
test=install_prefix_test
. "$src/tests/packaging/readme.sh"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
unset LD_LIBRARY_PATH PKG_CONFIG_PATH CMAKE_PREFIX_PATH PYTHONPATH
export HOME="$work/home"
mkdir -p "$HOME"
prefix="$HOME/.local"   # under mktemp -d: compared with ld.so's resolved paths below
# README's commands run from a folder where `build` is the build tree.
ln -s "$build" "$work/build"

install_line="$(readme_line '^cmake --install build --prefix "\$HOME/\.local"')"
export_line="$(readme_line '^export PATH="\$HOME/\.local/bin:')"
run_logged "$work/install.log" "'$install_line'" bash -c "cd '$work' && $install_line"
eval "$export_line"
prefix="$(readlink -f "$prefix")"
[[ "$(command -v hvdrun)" == "$prefix/bin/hvdrun" ]] ||
  fail "after '$export_line', hvdrun is $(command -v hvdrun || echo missing), not $prefix/bin/hvdrun"

# The installed executables start from the prefix: every library they need resolves, none from the build tree,
# and libhvd (should one of them link it) from the prefix.
for exe in hvdrun hvd-rendezvous hvd-proxy; do
  libs="$(ldd "$prefix/bin/$exe")" || fail "ldd $prefix/bin/$exe failed"
  if grep -q "not found" <<<"$libs"; then
    fail "$prefix/bin/$exe needs a library ld.so cannot find: $(grep 'not found' <<<"$libs" | tr -s ' \t' ' ')"
  fi
  if grep -qF "$build" <<<"$libs"; then fail "$prefix/bin/$exe loads a library from the build tree $build"; fi
  if grep -q "libhvd" <<<"$libs" && [[ "$(libhvd_of "$prefix/bin/$exe")" != "$prefix"/lib/* ]]; then
    fail "$prefix/bin/$exe loads libhvd.so.0 from $(libhvd_of "$prefix/bin/$exe"), not $prefix/lib"
  fi
done
# Output is read whole before grep looks at it: a `prog | grep -q` under pipefail fails whenever grep exits at
# its match before prog's last write (which then gets SIGPIPE), as hvd-rendezvous --help writes 4 KiB+.
version_out="$(hvdrun --version)" || fail "installed hvdrun --version failed: $version_out"
grep -q '^hvdrun ' <<<"$version_out" || fail "installed hvdrun --version printed no version: $version_out"
help_out="$(hvd-rendezvous --help)" || fail "installed hvd-rendezvous --help failed"
grep -q '^Usage: hvd-rendezvous' <<<"$help_out" || fail "installed hvd-rendezvous --help printed no usage"
# hvd-proxy refuses to run by hand, with its own message: ld.so started it.
proxy_out="$(hvd-proxy --help 2>&1 || true)"
grep -q '^hvd-proxy: ' <<<"$proxy_out" || fail "installed hvd-proxy did not start: $proxy_out"
for core in "$prefix"/lib/python3*/dist-packages/hvd/_core*.so; do
  [[ -e "$core" ]] || continue
  [[ "$(libhvd_of "$core")" == "$prefix"/lib/* ]] || fail "$core loads libhvd.so.0 from $(libhvd_of "$core")"
done

# C, with pkg-config.
mkdir "$work/c"
readme_block "A minimal worker" c >"$work/c/hello.c"
mapfile -t c_commands < <(readme_block "A minimal worker" sh 1)
(( ${#c_commands[@]} == 2 )) || fail "README.md's C commands are not 2 lines (build, run): ${c_commands[*]}"
run_logged "$work/c/build.log" "'${c_commands[0]}'" bash -c "cd '$work/c' && ${c_commands[0]}"
[[ "$(libhvd_of "$work/c/hello")" == "$prefix"/lib/* ]] ||
  fail "the C example loads libhvd.so.0 from $(libhvd_of "$work/c/hello"), not $prefix/lib"
run_logged "$work/c/run.out" "'${c_commands[1]}'" bash -c "cd '$work/c' && ${c_commands[1]}"
expect_ranks "$work/c/run.out"

# C++, with CMake; installed too (the README's CMakeLists.txt plus an install rule).
mkdir "$work/cxx"
readme_block "A minimal worker" cmake >"$work/cxx/CMakeLists.txt"
echo 'install(TARGETS hello)' >>"$work/cxx/CMakeLists.txt"
readme_block "A minimal worker" cpp >"$work/cxx/hello.cc"
mapfile -t cxx_commands < <(readme_block "A minimal worker" sh 2)
(( ${#cxx_commands[@]} == 2 )) || fail "README.md's C++ commands are not 2 lines (build, run): ${cxx_commands[*]}"
run_logged "$work/cxx/build.log" "'${cxx_commands[0]}'" bash -c "cd '$work/cxx' && ${cxx_commands[0]}"
[[ "$(libhvd_of "$work/cxx/build/hello")" == "$prefix"/lib/* ]] ||
  fail "the C++ example loads libhvd.so.0 from $(libhvd_of "$work/cxx/build/hello"), not $prefix/lib"
run_logged "$work/cxx/run.out" "'${cxx_commands[1]}'" bash -c "cd '$work/cxx' && ${cxx_commands[1]}"
expect_ranks "$work/cxx/run.out"
run_logged "$work/cxx/install.log" "cmake --install of the C++ example" \
  cmake --install "$work/cxx/build" --prefix "$work/app"
[[ "$(libhvd_of "$work/app/bin/hello")" == "$prefix"/lib/* ]] ||
  fail "the installed C++ example loads libhvd.so.0 from $(libhvd_of "$work/app/bin/hello"), not $prefix/lib"
run_logged "$work/app/run.out" "the installed C++ example" hvdrun -np 2 -H localhost:2 "$work/app/bin/hello"
expect_ranks "$work/app/run.out"
echo "$test: ok"
