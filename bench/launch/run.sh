#!/bin/sh
# Launch benchmark: wall time of the whole job, in one run, medians over ROUNDS runs each, interleaved
# by case order:
#   hvdrun -np 2 -H localhost:2 init_barrier        (init + barrier + shutdown through libhvd)
#   hvdrun -np 2 -H localhost:2 /bin/true           (the launcher alone)
#   mpiexec.hydra -np 2 mpi_init_barrier             (MPICH)
#   mpirun.openmpi --allow-run-as-root -np 2 mpi_init_barrier  (Open MPI)
# and hvdrun's peak RSS with 64 /bin/true workers. Peers that are not installed are reported as missing.
#
#   bench/launch/run.sh [BUILD_DIR] [ROUNDS]     (BUILD_DIR defaults to build, ROUNDS to 30)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
rounds=${2:-30}
timer="$build/bench/launch/launch_time"
hvdrun="$build/hvdrun"
[ -x "$hvdrun" ] || hvdrun="$build/cmd/hvdrun"
worker="$build/bench/launch/init_barrier"
tmp=$(mktemp -d /tmp/hvd-launch-bench-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

for f in "$timer" "$hvdrun"; do
  [ -x "$f" ] || { echo "missing $f: build the targets hvdrun and launch_time first" >&2; exit 2; }
done

echo "launch benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $rounds rounds per case"
printf '%-28s %9s %9s %9s %10s %4s\n' case median_ms min_ms max_ms maxrss_kib fail

results="$tmp/results"
: > "$results"
run() {  # run LABEL COMMAND...
  label=$1
  shift
  if line=$("$timer" --rounds "$rounds" --label "$label" -- "$@" 2>"$tmp/err"); then
    echo "$line" | tee -a "$results"
  else
    echo "$line (stderr: $(head -c 300 "$tmp/err" | tr '\n' ' '))" | tee -a "$results"
  fi
}

if [ -x "$worker" ]; then
  run "hvdrun W=init_barrier" "$hvdrun" -np 2 -H localhost:2 "$worker"
else
  echo "hvdrun W=init_barrier          missing ($worker not built)"
fi
run "hvdrun W=/bin/true" "$hvdrun" -np 2 -H localhost:2 /bin/true

if command -v mpicc.mpich >/dev/null && command -v mpiexec.hydra >/dev/null; then
  mpicc.mpich -O2 -o "$tmp/mpi_mpich" "$src/bench/peers/mpi_init_barrier.c"
  run "mpiexec.hydra -np 2" mpiexec.hydra -np 2 "$tmp/mpi_mpich"
else
  echo "mpiexec.hydra -np 2            missing (apt-get install mpich)"
fi
if command -v mpicc.openmpi >/dev/null && command -v mpirun.openmpi >/dev/null; then
  mpicc.openmpi -O2 -o "$tmp/mpi_ompi" "$src/bench/peers/mpi_init_barrier.c"
  run "mpirun.openmpi -np 2" mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 "$tmp/mpi_ompi"
else
  echo "mpirun.openmpi -np 2           missing (apt-get install openmpi-bin)"
fi

run "hvdrun -np 64 /bin/true" "$hvdrun" -np 64 /bin/true

median() { awk -v l="$1" 'index($0, l) == 1 { sub(l, ""); print $1; exit }' "$results"; }
hydra=$(median "mpiexec.hydra -np 2")
ours=$(median "hvdrun W=init_barrier")
[ -n "$ours" ] || ours=$(median "hvdrun W=/bin/true")
if [ -n "$hydra" ] && [ -n "$ours" ]; then
  awk -v a="$ours" -v b="$hydra" 'BEGIN { printf "ratio hvdrun / hydra (median): %.2fx (target <= 1.0x)\n", a / b }'
fi
rss=$(awk 'index($0, "hvdrun -np 64 /bin/true") == 1 { print $(NF-1) }' "$results")
[ -n "$rss" ] && awk -v k="$rss" 'BEGIN { printf "hvdrun peak RSS at -np 64: %.1f MiB (target <= 15 MiB)\n", k / 1024 }'
exit 0
