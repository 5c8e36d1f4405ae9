#!/usr/bin/env bash
# Installs what hvdrun needs from Debian 12 packages, and nothing that is already there.
# Idempotent: a second run with everything present makes no apt call at all.
#
#   packaging/install-deps.sh           build + test dependencies
#   packaging/install-deps.sh --bench   also the benchmark peers (Open MPI, MPICH, torch, hyperfine, gnuplot)
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config
  libboost-dev libboost-program-options-dev libboost-system-dev
  libssh2-1-dev libgloo-dev nlohmann-json3-dev catch2 libyaml-cpp-dev
  # tests: a real sshd, network namespaces, process inspection, libFuzzer
  openssh-server openssh-client iproute2 procps psmisc clang libclang-rt-14-dev
  # the Python package (hvd.torch, hvd.numpy) and its tests, for Debian's /usr/bin/python3
  python3 python3-dev python3-pybind11 python3-torch python3-numpy python3-pytest python3-cloudpickle
  python3-torchvision
  # hvd.Executor and hvd.train on a Dask cluster (dask scheduler / dask worker), tested against a real one;
  # pandas for hvd.train's Result.metrics_dataframe
  python3-distributed python3-pandas
  # hvd.tune: Optuna's samplers, pruners and storage (SQLite by default, PostgreSQL tested against a real
  # server), and the per-trial metric plot
  python3-optuna python3-matplotlib python3-psycopg2 postgresql
  # Horovod's own test_torch.py (when HVD_HOROVOD_SOURCE names a checkout): its test utilities import mock
  python3-mock
  # a real Slurm cluster for the Slurm tests (slurmctld, slurmd per network namespace, munge), and real
  # mpirun/mpiexec for workers started without hvdrun
  slurmctld slurmd slurm-client munge openmpi-bin mpich
  # the Debian package: cpack -G DEB finds its Depends with dpkg-shlibdeps
  dpkg-dev
  # the status port's tests: /metrics through Prometheus' own parser, the page in a real headless browser
  python3-prometheus-client chromium
)
if [[ "${1:-}" == "--bench" ]]; then
  pkgs+=(openmpi-bin libopenmpi-dev mpich libmpich-dev hyperfine gnuplot-nox linux-perf valgrind time)
fi

missing=()
for p in "${pkgs[@]}"; do
  # dpkg-query prints "install ok installed" only for a fully installed package.
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done
if (( ${#missing[@]} == 0 )); then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
