#!/usr/bin/env bash
# GPU pinning and hvd.torch's CUDA tensors, checked on a machine with a CUDA GPU.
#
#   bench/gpu/check_pinning.sh [DIR] [OUTDIR]
#
# DIR (default .gpucheck) is the bundle bench/gpu/make_bundle.sh made from a build elsewhere; bench/gpu/setup.sh
# sets it up here. Run from the repository root; it needs cc, c++, python3 with torch and pybind11 (it builds
# hvd._core for that python3 with python/core.cc). Logs and a table go to OUTDIR (default $OUT, else /tmp/hvd-gpucheck). Cases, each under hvdrun:
#   C worker (hvd_init, hvd_device, the driver's current context, cudaGetDevice of the libcudart libhvd
#   loaded, one allreduce): -np 1, -np 2, -np 2 with HVD_DISABLE_GPU_PINNING=1, CUDA_VISIBLE_DEVICES=0,
#   "" and 99;
#   Python worker (import torch, hvd.torch; hvd_device(); every collective on a CUDA tensor, its result on
#   the tensor's device; torch.cuda.set_device(local_rank % device count); CPU allreduce/allgather/broadcast):
#   -np 2, -np 1, -np 2 with HVD_DISABLE_GPU_PINNING=1;
#   both again with each libcudart folder on LD_LIBRARY_PATH, and (as root, with unshare) the Python case with
#   every libcudart outside site-packages hidden, as on a machine with PyTorch's pip wheels and no toolkit.
# Exit status 0 when every row of the table says PASS.
# With one GPU every rank pins device 0, which is also CUDA's default: the driver's current context right
# after hvd_init (before anything else touches CUDA) is what shows that libhvd selected it.
set -u
DIR=$(cd "${1:-.gpucheck}" && pwd) || exit 2
OUTDIR=${2:-${OUT:-/tmp/hvd-gpucheck}}
mkdir -p "$OUTDIR"
LOG=$OUTDIR/check.log
TABLE=$OUTDIR/table.txt
: >"$LOG"
WORK=${HVD_GPU_WORK:-$(mktemp -d)}  # run_all.sh shares its set-up
REPO=$(pwd)

. "$REPO/bench/gpu/setup.sh"  # LD_LIBRARY_PATH, hvd._core for this python3, PYTHONPATH
{
  echo "== environment"
  uname -srm; ldd --version | head -1; python3 --version
  nvidia-smi -L 2>&1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())'
  echo "ldconfig libcudart:"; ldconfig -p | grep -i cudart
  echo "libcudart files:"; ls -l /usr/local/cuda*/lib64/libcudart.so* /usr/lib/x86_64-linux-gnu/libcudart.so* 2>/dev/null
  python3 - <<'EOF'
import glob, os, site
for d in site.getsitepackages():
    for p in glob.glob(os.path.join(d, "nvidia", "**", "libcudart.so*"), recursive=True):
        print("  pip:", p)
EOF
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$DIR/bin/hvdrun" "$DIR/lib/libhvd.so" | grep "not found"
} >>"$LOG" 2>&1

# The C worker.
cat >"$WORK/pin_worker.c" <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hvd/hvd.h"

static void loaded_cudart(char* out, size_t n) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[4096];
  out[0] = 0;
  while (f && fgets(line, sizeof line, f)) {
    char* path = strchr(line, '/');
    if (!path || !strstr(path, "libcudart")) continue;
    path[strcspn(path, "\n")] = 0;
    if (strstr(out, path)) continue;
    if (out[0]) strncat(out, ",", n - strlen(out) - 1);
    strncat(out, path, n - strlen(out) - 1);
  }
  if (f) fclose(f);
  if (!out[0]) snprintf(out, n, "none");
}

int main(void) {
  if (hvd_init() != HVD_SUCCESS) {
    printf("RESULT rank=? hvd_device=? ctx=? cudaGetDevice=? cudart=? verdict=FAIL(init:%s)\n", hvd_error_text());
    return 1;
  }
  int rank = hvd_rank(), size = hvd_size(), device = hvd_device();
  /* The driver's current context now: only libhvd's pinning can have made one (nothing else ran). */
  int ctx_rc = -1, ctx_dev = -1;
  void* ctx = NULL;
  void* cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cu) {
    int (*cur)(void**) = (int (*)(void**))dlsym(cu, "cuCtxGetCurrent");
    int (*getdev)(int*) = (int (*)(int*))dlsym(cu, "cuCtxGetDevice");
    if (cur) ctx_rc = cur(&ctx);
    if (ctx_rc == 0 && ctx && getdev) getdev(&ctx_dev);
  }
  /* The runtime's view, through the libcudart libhvd loaded (RTLD_NOLOAD never loads another). */
  int rt_dev = -2;
  const char* names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"};
  for (int i = 0; i < 4; ++i) {
    void* h = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD);
    if (!h) continue;
    int (*get)(int*) = (int (*)(int*))dlsym(h, "cudaGetDevice");
    if (!get || get(&rt_dev) != 0) rt_dev = -3;
    break;
  }
  char libs[2048];
  loaded_cudart(libs, sizeof libs);
  float v = (float)(rank + 1), sum = 0;
  int h = hvd_allreduce_async("pin.check", &v, &sum, 1, HVD_FLOAT32, HVD_SUM, 1.0, 1.0);
  int ar = h < 0 ? h : hvd_wait(h);
  const char* e = getenv("EXPECT_DEVICE");
  int expect = e ? atoi(e) : 0;
  int ok = device == expect && ar == HVD_SUCCESS && sum == size * (size + 1) / 2.0f &&
           (expect < 0 ? ctx == NULL : (ctx != NULL && ctx_dev == expect && rt_dev == expect));
  printf("RESULT rank=%d hvd_device=%d expect=%d ctx=%s ctx_dev=%d cudaGetDevice=%d allreduce=%g cudart=%s verdict=%s\n",
         rank, device, expect, ctx ? "yes" : (ctx_rc == 3 ? "none(uninit)" : "none"), ctx_dev, rt_dev, sum, libs,
         ok ? "PASS" : "FAIL");
  hvd_shutdown();
  return 0; /* a failing rank would make hvdrun stop the others before they report */
}
EOF

# The Python worker.
cat >"$WORK/torch_worker.py" <<'EOF'
import ctypes, os, sys
import torch
import hvd.torch as hvd
from hvd.common import basics  # hvd_device(): hvd.torch, like horovod.torch, has no device()

hvd.init()
rank, size, lrank = hvd.rank(), hvd.size(), hvd.local_rank()
expect = int(os.environ.get("EXPECT_DEVICE", "0"))
fails = []
dev, ctx_state, before, after, accepted, cpu_ok, literal = "?", "?", "?", "?", 0, "?", "?"
calls = {}
try:
    dev = basics.device()
    if dev != expect:
        fails.append(f"hvd device()={dev}")
    # The driver's current context before torch touches CUDA (torch initializes it lazily).
    cu = ctypes.CDLL("libcuda.so.1")
    ctx = ctypes.c_void_p()
    ctx_rc = cu.cuCtxGetCurrent(ctypes.byref(ctx))
    ctx_state = "yes" if ctx_rc == 0 and ctx.value else "none"
    if (ctx_state == "yes") != (expect >= 0):
        fails.append(f"driver context {ctx_state}")
    libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libcudart" in l})
    print(f"[rank {rank}] libcudart mapped: {libs}", file=sys.stderr)
    before = torch.cuda.current_device()
    x = torch.arange(4, dtype=torch.float32, device="cuda")
    calls = {
        "allreduce": lambda: hvd.allreduce(x, name="g.allreduce"),
        "allreduce_": lambda: hvd.allreduce_(x, name="g.allreduce_"),
        "allreduce_async": lambda: hvd.allreduce_async(x, name="g.allreduce_async"),
        "grouped_allreduce": lambda: hvd.grouped_allreduce([x, x], name="g.grouped"),
        "allgather": lambda: hvd.allgather(x, name="g.allgather"),
        "broadcast": lambda: hvd.broadcast(x, 0, name="g.broadcast"),
        "broadcast_": lambda: hvd.broadcast_(x, 0, name="g.broadcast_"),
        "alltoall": lambda: hvd.alltoall(x, name="g.alltoall"),
        "reducescatter": lambda: hvd.reducescatter(x, name="g.reducescatter"),
    }
    # Every collective takes the CUDA tensor (staged through host memory) and gives its result on its device.
    for name, call in calls.items():
        try:
            out = call()
            if isinstance(out, int):  # a handle
                out = hvd.synchronize(out)
            if isinstance(out, (list, tuple)):
                out = out[0]
            if out.device == x.device:
                accepted += 1
            else:
                fails.append(f"{name}: result on {out.device}")
        except Exception as e:  # noqa: BLE001
            fails.append(f"{name}: {type(e).__name__}: {e}")
    # Horovod's idiom. With more ranks than GPUs on the host (np 2 on one GPU) torch refuses local rank 1
    # (invalid device ordinal); the device libhvd pinned, local_rank % count, is what such a job must use.
    try:
        torch.cuda.set_device(lrank)
        literal = "ok"
    except Exception as e:  # noqa: BLE001
        literal = type(e).__name__
        if lrank < torch.cuda.device_count():
            fails.append(f"set_device({lrank}): {literal}")
    torch.cuda.set_device(lrank % torch.cuda.device_count())
    after = torch.cuda.current_device()
    if expect >= 0 and not (before == after == dev == expect):
        fails.append(f"torch current device before={before} after={after} hvd={dev}")
    s = hvd.allreduce(torch.tensor([float(rank + 1)]), op=hvd.Sum, name="cpu.allreduce").item()
    g = hvd.allgather(torch.tensor([[rank]]), name="cpu.allgather").flatten().tolist()
    b = hvd.broadcast(torch.tensor([rank * 10 + 5]), root_rank=0, name="cpu.broadcast").item()
    r = hvd.allreduce(x.cpu(), op=hvd.Average, name="cpu.roundtrip").cuda()
    cpu_ok = s == size * (size + 1) / 2 and g == list(range(size)) and b == 5 and torch.equal(r, x)
    if not cpu_ok:
        fails.append(f"cpu collectives: sum={s} gather={g} bcast={b} roundtrip={r.tolist()}")
except Exception as e:  # noqa: BLE001  (reported, and every rank still exits 0: see the C worker)
    fails.append(f"{type(e).__name__}: {e}")
hvd.shutdown()
verdict = "PASS" if not fails else "FAIL(" + "; ".join(fails) + ")"
print(f"RESULT rank={rank} hvd_device={dev} expect={expect} ctx={ctx_state} torch_dev={before}->{after} "
      f"set_device(local_rank)={literal} "
      f"accepted={accepted}/{len(calls)} cpu_ok={cpu_ok} verdict={verdict}")
EOF

{
  echo "== build"
  cc -O1 -std=c11 -I"$REPO/runtime/include" -I"$DIR/include" "$WORK/pin_worker.c" -L"$DIR/lib" -lhvd -ldl \
    -Wl,-rpath,"$DIR/lib" -o "$WORK/pin_worker" && echo "pin_worker built"
} >>"$LOG" 2>&1
export PYTHONUNBUFFERED=1 HOROVOD_LOG_LEVEL=debug

printf '%-34s %s\n' CASE RESULT >"$TABLE"
PREFIX=()  # a command hvdrun runs under (the hidden-libcudart case)
run_case() {  # name expect_device np [VAR=value...] -- command...
  local name=$1 expect=$2 np=$3
  shift 3
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  echo "== $name" >>"$LOG"
  local out
  out=$(env "${envs[@]}" EXPECT_DEVICE="$expect" timeout 120 "${PREFIX[@]}" "$DIR/bin/hvdrun" -np "$np" "$@" 2>&1)
  local rc=$?
  echo "$out" >>"$LOG"
  echo "rc=$rc" >>"$LOG"
  local lines
  lines=$(echo "$out" | grep -o 'RESULT .*' | sed 's/^RESULT //' | sort)
  [ -n "$lines" ] || lines="no RESULT line (rc=$rc): $(echo "$out" | tail -3 | tr '\n' ' ')"
  while IFS= read -r l; do printf '%-34s %s\n' "$name" "$l" >>"$TABLE"; done <<<"$lines"
}
run_case "C np1" 0 1 -- "$WORK/pin_worker"
run_case "C np2" 0 2 -- "$WORK/pin_worker"
run_case "C np2 DISABLE_GPU_PINNING=1" -1 2 HVD_DISABLE_GPU_PINNING=1 -- "$WORK/pin_worker"
run_case "C np2 CUDA_VISIBLE_DEVICES=0" 0 2 CUDA_VISIBLE_DEVICES=0 -- "$WORK/pin_worker"
run_case "C np1 CUDA_VISIBLE_DEVICES=''" -1 1 CUDA_VISIBLE_DEVICES= -- "$WORK/pin_worker"
run_case "C np1 CUDA_VISIBLE_DEVICES=99" -1 1 CUDA_VISIBLE_DEVICES=99 -- "$WORK/pin_worker"
run_case "py np2" 0 2 -- python3 "$WORK/torch_worker.py"
run_case "py np1" 0 1 -- python3 "$WORK/torch_worker.py"
run_case "py np2 DISABLE_GPU_PINNING=1" -1 2 HVD_DISABLE_GPU_PINNING=1 -- python3 "$WORK/torch_worker.py"
# Again with each folder that holds a libcudart (the CUDA toolkit's, the pip wheel's) added to
# LD_LIBRARY_PATH: HVD_GPUCHECK_EXTRA_CUDART_DIRS="DIR ..." names them instead, "none" skips these cases.
cudart_dirs() {
  python3 - <<'PYEOF' 2>/dev/null
import glob, os, site
found = sorted(glob.glob("/usr/local/cuda/lib64/libcudart.so*"))
for d in site.getsitepackages():
    found += sorted(glob.glob(os.path.join(d, "nvidia", "**", "libcudart.so*"), recursive=True))
dirs = []
for p in found:
    if os.path.dirname(p) not in dirs:
        dirs.append(os.path.dirname(p))
print(" ".join(dirs))
PYEOF
}
extras=${HVD_GPUCHECK_EXTRA_CUDART_DIRS:-$(cudart_dirs)}
[ "$extras" = none ] && extras=
echo "extra libcudart folders: ${extras:-none}" >>"$LOG"
for extra in $extras; do
  run_case "C np2 +LD_LIBRARY_PATH=$extra" 0 2 LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$extra" -- "$WORK/pin_worker"
  run_case "py np2 +LD_LIBRARY_PATH=$extra" 0 2 LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$extra" -- python3 "$WORK/torch_worker.py"
done

# As root with unshare: every libcudart outside site-packages hidden (bound to /dev/null in a private mount
# namespace), as on a machine with a pip-installed PyTorch and no CUDA toolkit.
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
  hide=$( (ldconfig -p | awk '/libcudart/ {print $NF}'; ls /usr/local/cuda*/lib64/libcudart.so* 2>/dev/null) |
    xargs -r realpath -e 2>/dev/null | grep -v site-packages | sort -u | tr '\n' ' ')
  echo "hidden for the next case: $hide" >>"$LOG"
  export HIDE="$hide"
  PREFIX=(unshare -m bash -c 'for f in $HIDE; do mount --bind /dev/null "$f" || exit 3; done; exec "$@"' hide)
  run_case "py np2 toolkit cudart hidden" 0 2 -- python3 "$WORK/torch_worker.py"
  PREFIX=()
fi

echo "== debug lines about pinning" >>"$LOG"
sed -nE 's/^\[[0-9]+\]<stderr>:\[[^]]*\] \[rank [0-9]+\]: //p' "$LOG" |
  grep -E "pinned to device|no CUDA|GPU pinning disabled|lacks cuda|cudaSetDevice" | sort | uniq -c | tee -a "$LOG"
cat "$TABLE"
pass=$(grep -c 'verdict=PASS' "$TABLE")
fail=$(grep -vc 'verdict=PASS' "$TABLE")
echo "PASS rows: $pass, other rows: $((fail - 1))"
rm -rf "$WORK"
[ "$fail" -eq 1 ]
