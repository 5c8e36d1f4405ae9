#!/bin/sh
# Allreduce benchmark, np=2 on localhost, in one run:
#   libhvd vs raw Gloo (same library, same processes): build/bench/allreduce/allreduce_bench
#   Open MPI MPI_Allreduce: bench/peers/mpi_allreduce.c compiled here with mpicc.openmpi (reported as
#   missing when Open MPI is not installed)
#
#   bench/allreduce/run.sh [BUILD_DIR] [ROUNDS]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
rounds=${2:-3}
sizes=4096,65536,1048576,16777216,67108864

"$build/bench/allreduce/allreduce_bench" --np 2 --rounds "$rounds" --sizes "$sizes"

if command -v mpicc.openmpi >/dev/null 2>&1 && command -v mpirun.openmpi >/dev/null 2>&1; then
  tmp=$(mktemp -d /tmp/hvd-mpi-bench-XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
  mpicc.openmpi -O2 -Wno-stringop-overflow -o "$tmp/mpi_allreduce" "$src/bench/peers/mpi_allreduce.c"
  spec=4096:1000,65536:1000,1048576:300,16777216:30,67108864:8
  echo "Open MPI MPI_Allreduce (bench/peers/mpi_allreduce.c, JSON lines, one round):"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun.openmpi --allow-run-as-root -np 2 "$tmp/mpi_allreduce" "$spec"
else
  echo "Open MPI: missing (mpicc.openmpi / mpirun.openmpi not installed)"
fi
