# Sourced by the packaging tests: the commands and programs they run are read from README.md, so a test
# fails when the README's instructions stop working. Needs $src (the source tree) and $test (a name for
# messages).
readme="$src/README.md"

fail() {
  echo "$test: $*" >&2
  exit 1
}

# readme_line ERE: the first line of README.md matching ERE.
readme_line() {
  local line
  line="$(grep -m 1 -E -- "$1" "$readme")" || fail "README.md has no line matching '$1'"
  printf '%s\n' "$line"
}

# readme_block SECTION LANG [N]: the body of the Nth (default 1st) ```LANG block in the section of
# README.md whose heading is "## SECTION".
readme_block() {
  local body
  body="$(awk -v section="## $1" -v fence='```'"$2" -v want="${3:-1}" '
    /^## / { inside = ($0 == section) }
    inside && !in_block && $0 == fence { n++; in_block = 1; next }
    in_block && /^```/ { in_block = 0; if (n == want) exit; next }
    in_block && n == want { print }
  ' "$readme")"
  [[ -n "$body" ]] || fail "README.md has no \`\`\`$2 block number ${3:-1} under '## $1'"
  printf '%s\n' "$body"
}

# run_logged LOG DESCRIPTION COMMAND...: runs COMMAND with its output in LOG; on failure, says what failed
# and shows LOG.
run_logged() {
  local log="$1" what="$2"
  shift 2
  if ! "$@" >"$log" 2>&1; then
    echo "$test: $what failed:" >&2
    cat "$log" >&2
    exit 1
  fi
}

# expect_ranks OUTPUT_FILE: both ranks of README's hello job printed their line, tagged by hvdrun.
expect_ranks() {
  local r
  for r in 0 1; do
    grep -qxF "[$r]<stdout>:rank $r of 2: sum of ranks = 1" "$1" ||
      { echo "$test: rank $r's line is missing from the job's output:" >&2; cat "$1" >&2; exit 1; }
  done
}

# libhvd_of FILE: the path ld.so loads libhvd.so.0 from for FILE, resolved ("nowhere ..." when it finds none).
libhvd_of() {
  local path
  path="$(ldd "$1" | awk '$1 == "libhvd.so.0" { print $3 }')"
  [[ -n "$path" ]] || fail "$1 does not link libhvd.so.0"
  if [[ "$path" == "not" ]]; then echo "nowhere (ld.so does not find it)"; else readlink -f "$path"; fi
}

# cached_libhvd: the path the dynamic linker's cache gives for libhvd.so.0, empty when it has none.
cached_libhvd() {
  ldconfig -p | awk '$1 == "libhvd.so.0" && !found { print $NF; found = 1 }'
}

# For a test that installs into the system, outside the namespace: runs this script again ("$0" ARGS...) in
# a private mount namespace with HVD_PACKAGING_NAMESPACE=1 and exits with its status; fails, naming WHAT,
# when the script's `state` function (what the real system holds) prints something else after the run.
# Skips (exit 77) where mount namespaces are not permitted.
#   rerun_in_mount_namespace WHAT ARGS...
rerun_in_mount_namespace() {
  local what="$1" err before after rc=0
  shift
  if ! err="$(unshare -m --propagation private true 2>&1)"; then
    echo "$test: skipped: no mount namespace (unshare -m: $err)"
    exit 77
  fi
  before="$(state)"
  HVD_PACKAGING_NAMESPACE=1 unshare -m --propagation private bash "$0" "$@" || rc=$?
  after="$(state)"
  [[ "$before" == "$after" ]] ||
    fail "the real $what changed: before: ${before//$'\n'/, }; after: ${after//$'\n'/, }"
  exit "$rc"
}

# Inside the namespace: $work, a directory whose files live in a tmpfs of their own (unmounted at exit), and
# an empty /usr/local, a fresh machine's.
namespace_scratch() {
  work="$(mktemp -d)"
  trap 'cd /; umount -l "$work" 2>/dev/null; rmdir "$work"' EXIT
  mount -t tmpfs tmpfs "$work"
}
fresh_usr_local() {
  mount -t tmpfs tmpfs /usr/local
  mkdir -p /usr/local/{bin,etc,games,include,lib,man,sbin,share,src}
}
