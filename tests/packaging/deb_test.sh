#!/usr/bin/env bash
# The Debian package, as packaging/build.sh --deb makes it (cpack -G DEB in the build tree), in three steps
# that ctest runs as three tests:
#
#   deb_test.sh build    BUILD_DIR SOURCE_DIR   cpack -G DEB of the built tree into
#                                               BUILD_DIR/packaging-test/deb (the fixture of the two others)
#   deb_test.sh contents BUILD_DIR SOURCE_DIR   the package's fields and files: name, version, architecture;
#                                               Depends names the Debian package of every library its
#                                               binaries link (and python3, python3-numpy, python3-torch with
#                                               the Python package), each installed here; ldconfig in
#                                               postinst; everything under /usr; then the extracted hvdrun
#                                               runs the README's C example built against the extracted tree
#   deb_test.sh install  BUILD_DIR SOURCE_DIR   README's `sudo apt install ./build/hvdrun_*.deb`, as root, in
#                                               a private mount namespace whose /usr, /etc and /var are
#                                               overlays on the real ones (nothing reaches the real system)
#                                               and whose /usr/local is empty: postinst refreshed the
#                                               linker cache, README's C example built with pkg-config runs
#                                               under /usr/bin/hvdrun, the Python package runs a 2-rank job
#                                               under /usr/bin/python3; removing the package takes its files
#                                               and (postrm) its cache entry away. Exits 77 (skipped) without root or
#                                               mount namespaces.
set -euo pipefail
mode="$1"; build="$(cd "$2" && pwd)"; src="$(cd "$3" && pwd)"
test="deb_test $mode"
. "$src/tests/packaging/readme.sh"
out="$build/packaging-test/deb"

the_deb() {
  local debs=("$out"/hvdrun_*.deb)
  [[ -e "${debs[0]}" ]] || fail "no $out/hvdrun_*.deb: the packaging_deb_build test makes it"
  (( ${#debs[@]} == 1 )) || fail "more than one package in $out: ${debs[*]}"
  printf '%s\n' "${debs[0]}"
}

# first_of ROOT PATTERN...: the first of the paths (relative to ROOT, globs allowed) that exists there.
first_of() {
  local root="$1" pattern path
  shift
  for pattern in "$@"; do
    for path in "$root"/$pattern; do
      if [[ -e "$path" ]]; then printf '%s\n' "${path#"$root"/}"; return; fi
    done
  done
}

# Whether the build has the Python package (HVD_BUILD_PYTHON).
with_python() {
  compgen -G "$build/python/hvd/_core*.so" >/dev/null
}

case "$mode" in
build)
  rm -rf "$out"
  mkdir -p "$out"
  # The build's CPackConfig.cmake, with its install rules (cmake_install.cmake) run as an install script:
  # the same files and control data as `cpack -G DEB`, without its preinstall step, which only checks that
  # every target of the tree is built (the suite runs after the build) and costs more than the packaging.
  cat >"$out/CPackConfig-test.cmake" <<CONFIG
include("$build/CPackConfig.cmake")
set(CPACK_INSTALL_CMAKE_PROJECTS "")
set(CPACK_INSTALL_SCRIPTS "$build/cmake_install.cmake")
CONFIG
  run_logged "$out/cpack.log" "cpack -G DEB with $build/CPackConfig.cmake" \
    bash -c "cd '$build' && cpack -G DEB --config '$out/CPackConfig-test.cmake' -B '$out'"
  deb="$(the_deb)"
  echo "$test: ok: $deb"
  ;;

contents)
  deb="$(the_deb)"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  version="$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$build/CMakeCache.txt")"
  arch="$(dpkg --print-architecture)"
  [[ "$(basename "$deb")" == "hvdrun_${version}_${arch}.deb" ]] ||
    fail "the package is named $(basename "$deb"), not hvdrun_${version}_${arch}.deb"
  field() { dpkg-deb -f "$deb" "$1"; }
  [[ "$(field Package)" == hvdrun ]] || fail "Package: is '$(field Package)', not hvdrun"
  [[ "$(field Version)" == "$version" ]] || fail "Version: is '$(field Version)', not $version"
  [[ "$(field Architecture)" == "$arch" ]] || fail "Architecture: is '$(field Architecture)', not $arch"
  [[ -n "$(field Maintainer)" ]] || fail "the package has no Maintainer:"

  # Depends: "name (op version), a | b, ..." -> one name per alternative; every one must be installed here.
  depends="$(field Depends)"
  [[ -n "$depends" ]] || fail "the package has no Depends:"
  mapfile -t dep_names < <(tr ',|' '\n\n' <<<"$depends" | sed -E 's/\(.*\)//; s/^[[:space:]]+//; s/[[:space:]]+$//' | sed '/^$/d')
  for name in "${dep_names[@]}"; do
    [[ "$(dpkg-query -W -f='${Status}' "$name" 2>/dev/null)" == "install ok installed" ]] ||
      fail "Depends: names '$name', which dpkg-query does not find installed here (Depends: $depends)"
  done
  depends_on() { grep -qxF "$1" < <(printf '%s\n' "${dep_names[@]}"); }

  # Files: everything under /usr, owned by root; the programs, the library, headers, CMake and pkg-config files.
  listing="$(dpkg-deb -c "$deb")"
  if bad="$(awk '$6 !~ /^\.\/usr(\/|$)/ && $6 != "./" { print $6; if (++n == 3) exit }' <<<"$listing")" && [[ -n "$bad" ]]; then
    fail "the package has files outside /usr: ${bad//$'\n'/ }"
  fi
  if bad="$(awk '$2 != "root/root" { print $2, $6; if (++n == 3) exit }' <<<"$listing")" && [[ -n "$bad" ]]; then
    fail "the package has files not owned by root/root: ${bad//$'\n'/, }"
  fi
  if grep -q '\./usr/local/' <<<"$listing"; then fail "the package has files under /usr/local"; fi
  dpkg-deb -x "$deb" "$work/root"
  root="$work/root"
  libhvd="$(first_of "$root" usr/lib/libhvd.so.0 usr/lib/*/libhvd.so.0)"
  [[ -n "$libhvd" ]] || fail "the package has no usr/lib/libhvd.so.0 (nor usr/lib/<arch>/libhvd.so.0)"
  libdir="$(dirname "$libhvd")"
  expected=(usr/bin/hvdrun usr/bin/hvd-rendezvous usr/bin/hvd-proxy "$libdir/libhvd.so"
            usr/include/hvd/hvd.h usr/include/hvd/hvd.hpp usr/include/hvd/config.h
            "$libdir/cmake/hvd/hvdConfig.cmake" "$libdir/cmake/hvd/hvdConfigVersion.cmake"
            "$libdir/cmake/hvd/hvdTargets.cmake" "$libdir/pkgconfig/hvd.pc")
  if with_python; then
    pydir="$(first_of "$root" usr/lib/python3*/dist-packages)"
    [[ -n "$pydir" ]] || fail "the build has the Python package, the .deb has no usr/lib/python3*/dist-packages"
    core="$(first_of "$root" "$pydir"/hvd/_core*.so)"
    [[ -n "$core" ]] || fail "the package has no $pydir/hvd/_core*.so"
    expected+=("$pydir/hvd/__init__.py" "$pydir/hvd/torch/__init__.py" "$pydir/hvd/numpy.py" "$core")
    for name in python3 python3-numpy python3-torch; do
      depends_on "$name" || fail "the package has the Python package but its Depends: has no $name ($depends)"
    done
  fi
  for f in "${expected[@]}"; do
    [[ -e "$root/$f" ]] || fail "the package has no /$f"
  done
  # A package installs under /usr, on the linker's search path: the plain hvd.pc and hvdConfig.cmake.
  if grep -q -- '-rpath' "$root/$libdir/pkgconfig/hvd.pc"; then fail "/$libdir/pkgconfig/hvd.pc adds a run path"; fi
  if grep -q 'INTERFACE_LINK_OPTIONS' "$root/$libdir/cmake/hvd/hvdConfig.cmake"; then
    fail "/$libdir/cmake/hvd/hvdConfig.cmake adds a run path"
  fi

  # Every library a binary of the package links (its NEEDED entries; theirs are their packages' business)
  # comes from a Debian package that Depends: names.
  export LD_LIBRARY_PATH="$root/$libdir"
  links=()   # "binary soname path"
  while IFS= read -r -d '' f; do
    [[ "$(head -c 4 "$f")" == $'\x7fELF' ]] || continue
    resolved="$(ldd "$f")" || fail "ldd /${f#"$root"/} failed"
    while read -r soname; do
      [[ "$soname" == libhvd.so.0 ]] && continue
      # "soname => path (address)", or "path (address)" for the dynamic loader itself.
      path="$(awk -v so="$soname" '($1 == so && $2 == "=>") { print $3; exit }
                                   (substr($1, length($1) - length(so)) == "/" so) { print $1; exit }' <<<"$resolved")"
      [[ "$path" == /* ]] || fail "/${f#"$root"/} needs $soname, which ld.so does not find here"
      links+=("/${f#"$root"/} $soname $path")
    done < <(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  done < <(find "$root/usr" -type f -print0)
  unset LD_LIBRARY_PATH
  (( ${#links[@]} > 0 )) || fail "found no library that the package's binaries link"
  # One dpkg -S for every path (each also as its /usr-merged twin and its target), read into "path package".
  mapfile -t candidates < <(for link in "${links[@]}"; do
    path="${link##* }"; printf '%s\n' "$path" "$(readlink -f "$path")"
    if [[ "$path" == /usr/* ]]; then printf '%s\n' "${path#/usr}"; else printf '%s\n' "/usr$path"; fi
  done | sort -u)
  declare -A owner_of
  while read -r path package; do
    owner_of["$path"]="$package"
  done < <(dpkg -S "${candidates[@]}" 2>/dev/null | sed -E 's/^([^:,]+)(:[^:]+)?: (.*)$/\3 \1/' || true)
  for link in "${links[@]}"; do
    read -r binary soname path <<<"$link"
    owner=""
    for candidate in "$path" "$(readlink -f "$path")" "/usr$path" "${path#/usr}"; do
      owner="${owner_of["$candidate"]:-}"
      [[ -n "$owner" ]] && break
    done
    [[ -n "$owner" ]] || fail "no Debian package holds $path, which $binary links"
    depends_on "$owner" || fail "$binary links $soname from package $owner, which Depends: lacks ($depends)"
  done

  # ldconfig from postinst (or through the ldconfig trigger), and libhvd's shlibs entry.
  mkdir "$work/control"
  dpkg-deb -e "$deb" "$work/control"
  if ! grep -qsx 'activate-noawait ldconfig' "$work/control/triggers" &&
     ! grep -qs 'ldconfig' "$work/control/postinst"; then
    fail "the package's postinst does not run ldconfig, nor does it activate the ldconfig trigger (control files: $(ls "$work/control" | tr '\n' ' '))"
  fi
  grep -qE "^libhvd 0 hvdrun( |$)" "$work/control/shlibs" 2>/dev/null ||
    fail "the package's shlibs has no 'libhvd 0 hvdrun' line: $(cat "$work/control/shlibs" 2>/dev/null || echo no shlibs)"

  # The extracted programs run: the README's C example, built against the extracted tree, as a 2-rank job
  # under the extracted hvdrun (not installed, so the loader is told where libhvd is).
  # Output is read whole before grep looks at it: a `prog | grep -q` under pipefail fails whenever grep exits
  # at its match before prog's last write (which then gets SIGPIPE), as hvd-rendezvous --help writes 4 KiB+.
  version_out="$("$root/usr/bin/hvdrun" --version)" || fail "the extracted hvdrun --version failed: $version_out"
  grep -q '^hvdrun ' <<<"$version_out" || fail "the extracted hvdrun --version printed no version: $version_out"
  help_out="$("$root/usr/bin/hvd-rendezvous" --help)" || fail "the extracted hvd-rendezvous --help failed"
  grep -q '^Usage: hvd-rendezvous' <<<"$help_out" || fail "the extracted hvd-rendezvous does not run"
  proxy_out="$("$root/usr/bin/hvd-proxy" --help 2>&1 || true)"
  grep -q '^hvd-proxy: ' <<<"$proxy_out" || fail "the extracted hvd-proxy did not start: $proxy_out"
  mkdir "$work/c"
  readme_block "A minimal worker" c >"$work/c/hello.c"
  run_logged "$work/c/build.log" "building hello.c against the extracted package" \
    cc -o "$work/c/hello" "$work/c/hello.c" -I"$root/usr/include" -L"$root/$libdir" -lhvd
  (cd "$work/c" && LD_LIBRARY_PATH="$root/$libdir" "$root/usr/bin/hvdrun" -np 2 -H localhost:2 ./hello) \
    >"$work/c/run.out" 2>&1 || { echo "$test: the extracted hvdrun's job failed:" >&2; cat "$work/c/run.out" >&2; exit 1; }
  expect_ranks "$work/c/run.out"
  echo "$test: ok"
  ;;

install)
  deb="$(the_deb)"
  if [[ "${HVD_PACKAGING_NAMESPACE:-}" != 1 ]]; then
    if [[ "$(id -u)" != 0 ]]; then
      echo "$test: skipped: needs root, to install the package in a mount namespace"
      exit 77
    fi
    state() {
      dpkg-query -W -f='${Status} ${Version}\n' hvdrun 2>/dev/null || true
      ls /usr/bin/hvdrun /usr/lib/libhvd* /usr/local/bin/hvdrun 2>/dev/null || true
      md5sum /etc/ld.so.cache /var/lib/dpkg/status 2>/dev/null || true
    }
    rerun_in_mount_namespace system "$@"
  fi

  # Inside the namespace: /usr, /etc and /var become overlays whose changes live in a tmpfs.
  namespace_scratch
  for dir in usr etc var; do
    mkdir "$work/$dir.upper" "$work/$dir.work"
    if ! err="$(mount -t overlay overlay -o "lowerdir=/$dir,upperdir=$work/$dir.upper,workdir=$work/$dir.work" "/$dir" 2>&1)"; then
      echo "$test: skipped: cannot lay an overlay over /$dir ($err)"
      exit 77
    fi
  done
  fresh_usr_local
  export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive
  unset LD_LIBRARY_PATH PKG_CONFIG_PATH CMAKE_PREFIX_PATH PYTHONPATH
  # A machine without the package, and a linker cache without libhvd.
  if dpkg-query -W hvdrun >/dev/null 2>&1; then dpkg --purge hvdrun >/dev/null 2>&1 || true; fi
  ldconfig
  if known="$(cached_libhvd)" && [[ -n "$known" ]]; then
    fail "libhvd.so.0 is installed here outside any package ($known); remove it to run this test"
  fi

  # README's install line, from a folder where ./build holds the package.
  mkdir "$work/cwd"
  ln -s "$out" "$work/cwd/build"
  apt_line="$(readme_line '^sudo apt install \./build/hvdrun_\*\.deb')"
  apt_line="${apt_line#sudo }"
  run_logged "$work/apt.log" "'$apt_line'" bash -c "cd '$work/cwd' && $apt_line </dev/null"
  [[ "$(dpkg-query -W -f='${Status}' hvdrun)" == "install ok installed" ]] ||
    fail "after '$apt_line', hvdrun is not installed: $(dpkg-query -W -f='${Status}' hvdrun)"
  lib="$(dpkg -L hvdrun | grep '/libhvd\.so\.0$')"
  cached="$(cached_libhvd)"
  [[ -n "$cached" && "$(readlink -f "$cached")" == "$(readlink -f "$lib")" ]] ||
    fail "after installing the package, the linker cache has no $lib (${cached:-no libhvd.so.0}): its ldconfig call did not run"

  # README's C example, built with pkg-config, under the installed hvdrun.
  mkdir "$work/c"
  readme_block "A minimal worker" c >"$work/c/hello.c"
  mapfile -t c_commands < <(readme_block "A minimal worker" sh 1)
  (( ${#c_commands[@]} == 2 )) || fail "README.md's C commands are not 2 lines (build, run): ${c_commands[*]}"
  run_logged "$work/c/build.log" "'${c_commands[0]}'" bash -c "cd '$work/c' && ${c_commands[0]}"
  [[ "$(libhvd_of "$work/c/hello")" == "$(readlink -f "$lib")" ]] ||
    fail "the C example loads libhvd.so.0 from $(libhvd_of "$work/c/hello"), not $lib"
  [[ "$(command -v hvdrun)" == /usr/bin/hvdrun ]] || fail "hvdrun on PATH is $(command -v hvdrun || echo missing)"
  run_logged "$work/c/run.out" "'${c_commands[1]}'" bash -c "cd '$work/c' && ${c_commands[1]}"
  expect_ranks "$work/c/run.out"

  # The Python package: found by /usr/bin/python3 and by hvdrun, loads the package's libhvd.
  if grep -q '/hvd/_core.*\.so$' <<<"$(dpkg -L hvdrun)"; then
    run_logged "$work/py.out" "a 2-rank hvd.numpy job under /usr/bin/hvdrun" bash -c "cd / && hvdrun -np 2 -H localhost:2 /usr/bin/python3 -c '
import numpy, hvd, hvd.numpy as h
h.init()
assert hvd.__file__.startswith(\"/usr/lib/python3\"), hvd.__file__
assert \"$lib\" in open(\"/proc/self/maps\").read(), \"libhvd not from $lib\"
print(\"python\", h.rank(), int(h.allreduce(numpy.ones(1), op=h.Sum)[0]))
'"
    for r in 0 1; do
      grep -qxF "[$r]<stdout>:python $r 2" "$work/py.out" || { echo "$test: rank $r of the Python job printed no result:" >&2; cat "$work/py.out" >&2; exit 1; }
    done
  fi

  # Removing the package takes its files and, through the trigger, its cache entry away.
  run_logged "$work/remove.log" "dpkg -r hvdrun" dpkg -r hvdrun
  [[ ! -e /usr/bin/hvdrun && ! -e "$lib" ]] || fail "dpkg -r hvdrun left /usr/bin/hvdrun or $lib"
  cached="$(cached_libhvd)"
  [[ -z "$cached" ]] || fail "after removing the package, the linker cache still has libhvd.so.0 ($cached)"
  echo "$test: ok"
  ;;

*)
  fail "unknown mode '$mode' (build, contents or install)"
  ;;
esac
