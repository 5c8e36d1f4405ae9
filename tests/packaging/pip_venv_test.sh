#!/usr/bin/env bash
# pip install of hvd and hvdrun into a virtual environment, as the README shows: a venv with the system's
# packages (Debian's torch and numpy), `pip install --no-build-isolation ./python` offline, then hvdrun from the
# venv running examples/python/train.py at np 2 with the venv's interpreter (the loss falls, the ranks agree),
# a Horovod script through --horovod-compat, and `pip uninstall` removing everything it installed.
# The suite's build tree is installed as it is (HVD_PIP_BUILD_DIR, given relative to the folder pip starts in):
# no rebuild; a folder without a build is refused first. Exit 77 (skipped) without python3's venv module.
set -euo pipefail
build=$(cd "$1" && pwd)
source=$(cd "$2" && pwd)
python=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work" "$source/python/build" "$source/python/hvd.egg-info"' EXIT
fail() { echo "pip_venv_test: $*" >&2; exit 1; }

"$python" -m venv --system-site-packages "$work/venv" 2>"$work/venv.err" || {
  echo "pip_venv_test: skipped: python3 -m venv does not work here: $(tail -1 "$work/venv.err")"; exit 77; }
venv="$work/venv"
before=$(cd "$venv" && find . -type f | sort)

# A folder that holds no build is refused, naming it, before anything is built or installed.
mkdir "$work/nobuild"
if (cd "$work" && HVD_PIP_BUILD_DIR=nobuild "$venv/bin/pip" install --no-build-isolation --no-index \
      "$source/python") >"$work/refused.log" 2>&1; then
  fail "pip install took HVD_PIP_BUILD_DIR=nobuild, a folder without a build"
fi
grep -q "hvd: HVD_PIP_BUILD_DIR='nobuild' ($work/nobuild) holds no build of this repository" "$work/refused.log" ||
  { tail -20 "$work/refused.log"; fail "the refusal did not name the folder"; }
[[ "$(cd "$venv" && find . -type f | sort)" == "$before" ]] || fail "a refused pip install changed the venv"

# A relative HVD_PIP_BUILD_DIR is taken from where pip is started (pip itself runs setup.py in python/).
(cd "$(dirname "$build")" && HVD_PIP_BUILD_DIR="$(basename "$build")" "$venv/bin/pip" install --no-build-isolation \
   --no-index "$source/python") >"$work/pip.log" 2>&1 || { tail -20 "$work/pip.log"; fail "pip install failed"; }
for f in bin/hvdrun bin/hvd-proxy bin/hvd-rendezvous lib/libhvd.so.0; do
  [[ -x "$venv/$f" || -f "$venv/$f" ]] || fail "pip install left no $f in the venv"
done
[[ -f "$venv/lib/python3.11/site-packages/hvd/__init__.py" ]] || fail "no hvd package in the venv's site-packages"

# The venv's hvdrun and interpreter, nothing from the build tree on any path.
cd "$work"
out=$(env -u PYTHONPATH "$venv/bin/hvdrun" -np 2 -H localhost:2 "$venv/bin/python" "$source/examples/python/train.py" \
      --epochs 4 2>&1) || { echo "$out"; fail "train.py through the venv's hvdrun failed"; }
grep -q '^\[0\]<stdout>:epoch 4: loss' <<<"$out" || { echo "$out"; fail "train.py did not report epoch 4"; }
grep -q "rank 1 of 2: final loss .* bit-identical to rank 0's" <<<"$out" || { echo "$out"; fail "the ranks disagree"; }
where=$(env -u PYTHONPATH "$venv/bin/hvdrun" -np 2 -H localhost:2 --horovod-compat "$venv/bin/python" -c \
        'import horovod.torch as h; h.init(); print("from", h.__file__)' 2>&1) || { echo "$where"; fail "--horovod-compat failed"; }
grep -q "^\[0\]<stdout>:from $venv/lib/python3.11/site-packages/hvd/compat/horovod/torch/__init__.py" <<<"$where" ||
  { echo "$where"; fail "horovod.torch did not come from the venv's hvd"; }

"$venv/bin/pip" uninstall -y hvd >"$work/uninstall.log" 2>&1 || { cat "$work/uninstall.log"; fail "pip uninstall failed"; }
after=$(cd "$venv" && find . -type f -not -path '*/__pycache__/*' | sort)
left=$(comm -13 <(echo "$before") <(echo "$after") || true)
[[ -z "$left" ]] || fail "pip uninstall left: $left"
echo "pip_venv_test: ok"
