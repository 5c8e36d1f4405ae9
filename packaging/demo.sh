#!/usr/bin/env bash
# The main job: a real 4-process data-parallel training run on localhost.
# Installs what is missing, builds (Release) into build/, then runs train_linreg under hvdrun.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/packaging/install-deps.sh"
"$root/packaging/build.sh"
exec "$root/build/hvdrun" -np 4 -H localhost:4 "$root/build/examples/train_linreg"
