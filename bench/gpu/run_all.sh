#!/usr/bin/env bash
# Every GPU check in one run, for a GPU machine lent for minutes (run from the repository root there).
#
#   bench/gpu/make_bundle.sh                       # here, after a build: fills .gpucheck
#   bench/gpu/run_all.sh [DIR] [OUTDIR] [PARTS]    # there, with DIR (.gpucheck) carried along
#
# PARTS (default "tests horovod resnet pinning"; any subset, in any order):
#   tests    tests/python/test_torch_cuda.py: every hvd.torch operation on CUDA tensors at np=1 and np=2
#   horovod  Horovod's test_torch.py (its GPU tests included) as one session under hvdrun --horovod-compat,
#            np=2, when the bundle holds it (make_bundle.sh with HVD_HOROVOD_SOURCE)
#   resnet   ResNet-18 on CUDA (bench/train/train_bench.py, batch 32 of 3x64x64, 5 warm-up and 30 timed
#            steps): hvd at np=1 and np=2 against torch DDP over gloo at np=1 and np=2, the ranks sharing the
#            GPU(s); 3 rounds, the four interleaved in each; medians with ranges, and hvd/DDP ratios
#   pinning  bench/gpu/check_pinning.sh (which GPU libhvd pins, with and without CUDA's runtime on the path)
# OUTDIR (default $OUT, else /tmp/hvd-gpucheck): run_all.log, summary.txt, resnet.jsonl, and the pinning
# check's files. Exit status 0 when every part run passed.
set -u
DIR=$(cd "${1:-.gpucheck}" && pwd) || exit 2
OUTDIR=${2:-${OUT:-/tmp/hvd-gpucheck}}
PARTS=${3:-tests horovod resnet pinning}
REPO=$(pwd)
mkdir -p "$OUTDIR"
LOG=$OUTDIR/run_all.log
SUMMARY=$OUTDIR/summary.txt
: >"$LOG"
: >"$SUMMARY"
export HVD_GPU_WORK=${HVD_GPU_WORK:-$(mktemp -d)}
WORK=$HVD_GPU_WORK
export PYTHONUNBUFFERED=1
. "$REPO/bench/gpu/setup.sh" || { echo "hvd._core did not build: see $LOG" | tee -a "$SUMMARY"; exit 1; }
{
  nvidia-smi -L 2>&1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())'
} | tee -a "$SUMMARY"
status=0
verdict() {  # part rc
  if [ "$2" = 0 ]; then echo "PASS $1" | tee -a "$SUMMARY"; else echo "FAIL $1 (rc $2)" | tee -a "$SUMMARY"; status=1; fi
}

for part in $PARTS; do
  case $part in
    tests)
      echo "== tests" >>"$LOG"
      HVD_BUILD_DIR=$WORK/build HVD_TEST_PYTHON=$(command -v python3) timeout 500 \
        python3 -m pytest -v -p no:cacheprovider "$REPO/tests/python/test_torch_cuda.py" >>"$LOG" 2>&1
      rc=$?
      grep -E "PASSED|FAILED|SKIPPED|ERROR" "$LOG" | grep test_torch_cuda | tail -4 >>"$SUMMARY"
      verdict tests $rc
      ;;
    horovod)
      if [ ! -f "$DIR/horovod/test/parallel/test_torch.py" ]; then
        echo "SKIP horovod (the bundle holds no Horovod test file: HVD_HOROVOD_SOURCE for make_bundle.sh)" | tee -a "$SUMMARY"
        continue
      fi
      echo "== horovod" >>"$LOG"
      timeout 500 python3 "$REPO/tests/python/horovod_conformance.py" --source "$DIR/horovod" --session \
        --hvdrun "$WORK/build/hvdrun" --python "$(command -v python3)" --timeout 450 >"$OUTDIR/horovod.md" 2>>"$LOG"
      rc=$?
      tail -1 "$OUTDIR/horovod.md" >>"$SUMMARY"
      verdict horovod $rc
      ;;
    resnet)
      echo "== resnet" >>"$LOG"
      : >"$OUTDIR/resnet.jsonl"
      rc=0
      common=(--model resnet18 --device cuda --batch 32 --image 64 --warmup 5 --steps 30)
      for round in 1 2 3; do
        for np in 1 2; do
          timeout 240 "$WORK/build/hvdrun" -np $np -H localhost:$np python3 "$REPO/bench/train/train_bench.py" \
            --framework hvd "${common[@]}" 2>>"$LOG" | grep '^\[0\]<stdout>:{' | sed 's/^\[0\]<stdout>://' \
            >>"$OUTDIR/resnet.jsonl" || rc=1
          timeout 240 python3 -m torch.distributed.run --standalone --nproc_per_node $np \
            "$REPO/bench/train/train_bench.py" --framework ddp "${common[@]}" 2>>"$LOG" | grep '^{' \
            >>"$OUTDIR/resnet.jsonl" || rc=1
        done
      done
      python3 - "$OUTDIR/resnet.jsonl" >>"$SUMMARY" <<'PYEOF' || rc=1
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
fig = {}
for r in rows:
    fig.setdefault((r["framework"], r["ranks"]), []).append(r["samples_per_s"])
print("ResNet-18 on CUDA, samples/s (median [min-max] of rounds):")
for (fw, n), v in sorted(fig.items()):
    print(f"  {fw:4} np={n}: {statistics.median(v):8.1f} [{min(v):.1f}-{max(v):.1f}] over {len(v)}")
for n in (1, 2):
    if ("hvd", n) in fig and ("ddp", n) in fig:
        print(f"  hvd/ddp np={n}: {statistics.median(fig[('hvd', n)]) / statistics.median(fig[('ddp', n)]):.2f}")
sys.exit(0 if len(fig) == 4 and all(len(v) == 3 for v in fig.values()) else 1)
PYEOF
      verdict resnet $rc
      ;;
    pinning)
      echo "== pinning" >>"$LOG"
      bash "$REPO/bench/gpu/check_pinning.sh" "$DIR" "$OUTDIR" >>"$LOG" 2>&1
      rc=$?
      verdict pinning $rc
      ;;
    *)
      echo "run_all: unknown part '$part' (tests, horovod, resnet, pinning)" >&2
      exit 2
      ;;
  esac
done
cat "$SUMMARY"
exit $status
