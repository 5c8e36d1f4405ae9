#!/usr/bin/env bash
# The README's main job, end to end: hvdrun -np 4 -H localhost:4 train_linreg.
# Passes when hvdrun exits 0, rank 0's loss falls every epoch, the final check reports identical
# parameters on all ranks, and no worker process is left behind.
set -euo pipefail
hvdrun="$1"; train="$2"
out="$(mktemp)"; trap 'rm -f "$out"' EXIT

status=0
"$hvdrun" -np 4 -H localhost:4 "$train" >"$out" 2>&1 || status=$?
cat "$out"
if (( status != 0 )); then echo "demo_test: hvdrun exited $status" >&2; exit 1; fi

# Rank 0's epoch lines, tagged by hvdrun: "[0]<stdout>:epoch N loss X".
mapfile -t losses < <(sed -n 's/^\[0\]<stdout>:epoch [0-9]* loss \([0-9.eE+-]*\)$/\1/p' "$out")
if (( ${#losses[@]} < 3 )); then echo "demo_test: expected at least 3 epoch lines from rank 0" >&2; exit 1; fi
for ((i = 1; i < ${#losses[@]}; i++)); do
  if ! awk -v a="${losses[i-1]}" -v b="${losses[i]}" 'BEGIN { exit !(b < a) }'; then
    echo "demo_test: loss did not fall at epoch $i: ${losses[i-1]} -> ${losses[i]}" >&2; exit 1
  fi
done
grep -q '^\[0\]<stdout>:parameters identical on all 4 ranks' "$out" \
  || { echo "demo_test: missing the final parameter check of rank 0" >&2; exit 1; }
# Only rank 0 prints epochs; other ranks print nothing on stdout.
if grep -q '^\[[123]\]<stdout>:epoch' "$out"; then echo "demo_test: a rank other than 0 printed epochs" >&2; exit 1; fi

# Nothing left running: no process whose executable is the training program.
sleep 0.2
train_exe="$(readlink -f "$train")"
for exe in /proc/[0-9]*/exe; do
  if [[ "$(readlink "$exe" 2>/dev/null)" == "$train_exe" ]]; then
    pid="${exe#/proc/}"; pid="${pid%/exe}"
    echo "demo_test: worker left running: pid $pid $(tr '\0' ' ' </proc/$pid/cmdline 2>/dev/null)" >&2
    exit 1
  fi
done
echo "demo_test: ok (${#losses[@]} epochs, loss ${losses[0]} -> ${losses[-1]})"
