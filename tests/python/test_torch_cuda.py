"""hvd.torch on CUDA tensors, on a real GPU (skipped where torch sees none, as in CI).

Two ranks share the one GPU when there is only one. Inside the workers: every collective's result lies on the
input's device and equals the same collective on the CPU; autograd through them; DistributedOptimizer steps
that equal the averaged gradients; broadcast_parameters and broadcast_optimizer_state of a CUDA model;
SyncBatchNorm against the CPU; an elastic TorchState on the GPU; Horovod's CPU/GPU mismatch error; the order
of hvd's copies with the caller's stream (work queued on a side stream), and that no call waits for the
whole device (a kernel on another stream is still running when hvd returns).
"""

import subprocess

import pytest

from conftest import PYTHON, assert_ok


def _cuda_devices():
    probe = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    try:
        out = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, timeout=120)
        return int(out.stdout.strip() or 0)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


pytestmark = pytest.mark.skipif(_cuda_devices() == 0,
                                reason=f"no CUDA device visible to {PYTHON}'s torch (GPU checks: bench/gpu/run_all.sh)")

WORKER = r"""
import math

import torch
import hvd.torch as hvd
from hvd.torch import cuda_staging

hvd.init()
r, n = hvd.rank(), hvd.size()
dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
torch.cuda.set_device(dev)


def same(gpu, cpu, what):
    assert gpu.device == dev, f"{what}: result on {gpu.device}, not {dev}"
    assert torch.equal(gpu.cpu(), cpu), f"{what}: {gpu} != {cpu}"


def value(rank, shape=(4, 3), dtype=torch.float32):
    return (torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape) + rank).to(dtype)


for dtype in (torch.float32, torch.float64, torch.float16, torch.int32, torch.int64, torch.uint8):
    x = value(r, dtype=dtype).to(dev)
    for op in (hvd.Sum, hvd.Max):
        same(hvd.allreduce(x, op=op, name=f"ar.{dtype}.{op}"), hvd.allreduce(x.cpu(), op=op, name=f"c.{dtype}.{op}"),
             f"allreduce {dtype}")
    y = x.clone()
    assert hvd.allreduce_(y, op=hvd.Sum, name=f"ar_.{dtype}") is y
    same(y, hvd.allreduce(x.cpu(), op=hvd.Sum, name=f"c_.{dtype}"), f"allreduce_ {dtype}")

x = value(r).to(dev)
xc = x.cpu()
same(hvd.synchronize(hvd.allreduce_async(x, name="ara")), hvd.allreduce(xc, name="ara.c"), "allreduce_async")
same(hvd.allreduce(x, name="scaled", prescale_factor=0.5, postscale_factor=3.0),
     hvd.allreduce(xc, name="scaled.c", prescale_factor=0.5, postscale_factor=3.0), "scaled allreduce")
for got, want in zip(hvd.grouped_allreduce([x, 2 * x], op=hvd.Sum, name="g"),
                     hvd.grouped_allreduce([xc, 2 * xc], op=hvd.Sum, name="g.c")):
    same(got, want, "grouped_allreduce")
ys = [x.clone(), 3 * x]
hvd.grouped_allreduce_(ys, op=hvd.Sum, name="g_")
for got, want in zip(ys, hvd.grouped_allreduce([xc, 3 * xc], op=hvd.Sum, name="g_.c")):
    same(got, want, "grouped_allreduce_")
rows = x[: r + 1]
same(hvd.allgather(rows, name="ag"), hvd.allgather(rows.cpu(), name="ag.c"), "allgather")
for got, want in zip(hvd.grouped_allgather([rows, rows * 2], name="gag"),
                     hvd.grouped_allgather([rows.cpu(), rows.cpu() * 2], name="gag.c")):
    same(got, want, "grouped_allgather")
same(hvd.broadcast(x, 0, name="bc"), hvd.broadcast(xc, 0, name="bc.c"), "broadcast")
z = x.clone()
hvd.broadcast_(z, n - 1, name="bc_")
same(z, value(n - 1), "broadcast_")
splits = [1 + (k % 2) for k in range(n)]
data = torch.arange(sum(splits) * 2, dtype=torch.float32).reshape(-1, 2) + 100 * r
out, received = hvd.alltoall(data.to(dev), torch.tensor(splits, dtype=torch.int32), name="a2a")
want, want_received = hvd.alltoall(data, torch.tensor(splits, dtype=torch.int32), name="a2a.c")
same(out, want, "alltoall")
assert received.device.type == "cpu" and torch.equal(received, want_received), received
out, received = hvd.alltoall(data.to(dev), torch.tensor(splits, dtype=torch.int32, device=dev), name="a2a.d")
same(out, want, "alltoall (splits on the GPU)")
assert received.device == dev, f"received splits on {received.device}: Horovod puts them beside the splits"
big = value(r, shape=(2 * n, 6)).to(dev)
same(hvd.reducescatter(big, op=hvd.Sum, name="rs"), hvd.reducescatter(big.cpu(), op=hvd.Sum, name="rs.c"),
     "reducescatter")
for got, want in zip(hvd.grouped_reducescatter([big, big + 1], op=hvd.Sum, name="grs"),
                     hvd.grouped_reducescatter([big.cpu(), big.cpu() + 1], op=hvd.Sum, name="grs.c")):
    same(got, want, "grouped_reducescatter")
same(hvd.allreduce(x, name="ps", process_set=hvd.global_process_set), hvd.allreduce(xc, name="ps.c"),
     "allreduce on a process set")
sparse = torch.sparse_coo_tensor([[r % 3]], [float(r + 1)], (3,)).to(dev)
got = hvd.sparse_allreduce_async(sparse, name="sp", op=hvd.Sum)()
assert got.device == dev and torch.equal(got.to_dense().cpu(), hvd.allreduce(sparse.cpu().to_dense(), op=hvd.Sum,
                                                                             name="sp.c")), got

# autograd through the staged collectives
w = torch.ones(3, device=dev, requires_grad=True)
hvd.allreduce(w * (r + 1), op=hvd.Sum, name="grad.ar").sum().backward()
same(w.grad, torch.full((3,), float(n * (r + 1))), "allreduce gradient")
w = torch.ones(2, 2, device=dev, requires_grad=True)
hvd.allgather(w, name="grad.ag").sum().backward()
same(w.grad, torch.ones(2, 2), "allgather gradient")

# DistributedOptimizer: each step applies the average of the ranks' gradients
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(dev)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
for step in range(3):
    torch.manual_seed(100 + 10 * step + r)
    inp, target = torch.randn(4, 8, device=dev), torch.randn(4, 1, device=dev)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(inp), target).backward()
    before = [p.detach().clone() for p in model.parameters()]
    local = [p.grad.detach().cpu().clone() for p in model.parameters()]
    opt.step()
    for k, (p, b, g) in enumerate(zip(model.parameters(), before, local)):
        assert p.grad.device == dev
        want = b.cpu() - 0.1 * hvd.allreduce(g, name=f"opt.check.{step}.{k}")
        assert torch.allclose(p.detach().cpu(), want, rtol=1e-5, atol=1e-6), (step, k)
for k, p in enumerate(model.parameters()):
    gathered = hvd.allgather(p.detach().reshape(1, -1), name=f"opt.same.{k}").cpu()
    assert all(torch.equal(gathered[i], gathered[0]) for i in range(n)), f"parameter {k} differs between ranks"

# broadcast_parameters / broadcast_optimizer_state of a model on the GPU
torch.manual_seed(r)
model = torch.nn.Linear(5, 3).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=0.01 * (r + 1))
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)
assert opt.param_groups[0]["lr"] == 0.01
for name, t in list(model.state_dict().items()) + [(f"{k}", v) for s in opt.state.values() for k, v in s.items()
                                                    if torch.is_tensor(v) and v.dim() > 0]:
    assert t.device == dev, f"{name} left the GPU"
    gathered = hvd.allgather(t.reshape(1, -1), name=f"bp.{name}.{t.numel()}").cpu()
    assert all(torch.equal(gathered[i], gathered[0]) for i in range(n)), f"{name} differs between ranks"

# SyncBatchNorm on the GPU gives what it gives on the CPU
torch.manual_seed(7 + r)
inp = torch.randn(4 + r, 3, 5, dtype=torch.float64)
sbn_gpu, sbn_cpu = hvd.SyncBatchNorm(3).to(dev).double(), hvd.SyncBatchNorm(3).double()
a, b = inp.to(dev).requires_grad_(), inp.clone().requires_grad_()
out_gpu, out_cpu = sbn_gpu(a), sbn_cpu(b)
assert out_gpu.device == dev and torch.allclose(out_gpu.cpu(), out_cpu, atol=1e-10)
out_gpu.pow(2).sum().backward()
out_cpu.pow(2).sum().backward()
assert torch.allclose(a.grad.cpu(), b.grad, atol=1e-9)
assert torch.allclose(sbn_gpu.running_var.cpu(), sbn_cpu.running_var, atol=1e-12)

# an elastic TorchState holding a CUDA model: commit, change, restore, sync
model = torch.nn.Linear(4, 2).to(dev)
state = hvd.elastic.TorchState(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), epoch=0)
state.commit()
saved = [p.detach().cpu().clone() for p in model.parameters()]
with torch.no_grad():
    for p in model.parameters():
        p.add_(1.0 + r)
state.restore()
assert all(torch.equal(p.detach().cpu(), s) for p, s in zip(model.parameters(), saved))
with torch.no_grad():
    for p in model.parameters():
        p.add_(float(r))
state.sync()
for k, p in enumerate(model.parameters()):
    assert p.device == dev
    gathered = hvd.allgather(p.detach().reshape(1, -1), name=f"state.{k}").cpu()
    assert all(torch.equal(gathered[i], gathered[0]) for i in range(n)), f"state parameter {k} differs"

# Ordering with the caller's stream: the input is written on a side stream just before the call.
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    src = torch.zeros(1 << 20, device=dev)
    torch.cuda._sleep(50_000_000)  # the write below lands well after the call is made
    src.fill_(r + 1.0)
    got = hvd.allreduce(src, op=hvd.Sum, name="order")
    got += 0  # queued on the side stream after hvd's copy back
torch.cuda.synchronize()
assert torch.all(got == float(n * (n + 1) // 2)).item(), got[:4]
# ... and the copy back: hvd's stream is held up between the operation's start and synchronize(); a copy of
# the result made on the caller's stream right after synchronize() must see it.
with torch.cuda.stream(side):
    src.fill_(r + 2.0)
    h = hvd.allreduce_async(src, op=hvd.Sum, name="order.back")
    with torch.cuda.stream(cuda_staging._stream(dev.index)):
        torch.cuda._sleep(50_000_000)
    snap = hvd.synchronize(h).clone()
torch.cuda.synchronize()
assert torch.all(snap == float(n * (n + 3) // 2)).item(), snap[:4]

# No device-wide synchronize: a kernel on another stream is still running when allreduce returns.
other = torch.cuda.Stream()
with torch.cuda.stream(other):
    torch.cuda._sleep(2_000_000_000)  # about a second
    busy = torch.cuda.Event()
    busy.record(other)
res = hvd.allreduce(x, name="nosync")
still_running = not busy.query()
same(res, hvd.allreduce(xc, name="nosync.c"), "allreduce beside a busy stream")
assert still_running, "hvd waited for another stream's kernel: a device-wide synchronize"
torch.cuda.synchronize()

# Horovod's rule: one rank on the GPU and another on the CPU is a mismatch on every rank, not a hang.
if n > 1:
    t = torch.ones(17, 17, 17, device=dev) if r % 2 == 0 else torch.ones(17, 17, 17)
    try:
        hvd.allreduce(t, name="cpu_gpu")
        raise AssertionError("a CPU/GPU mix was accepted")
    except hvd.HorovodInternalError as e:
        assert "Mismatched allreduce CPU/GPU device selection" in str(e), e
try:
    hvd.grouped_allreduce([torch.ones(2, device=dev), torch.ones(2)], name="mixed_group")
    raise AssertionError("a group on two devices was accepted")
except hvd.HorovodInternalError as e:
    assert "same device" in str(e), e
same(hvd.allreduce(x, name="after"), hvd.allreduce(xc, name="after.c"), "allreduce after the mismatch")
hvd.shutdown()
print("OK")
"""


@pytest.mark.parametrize("np_", [1, 2])
def test_cuda_tensors(hvdrun, np_):
    job = hvdrun(np_, WORKER, timeout=600)
    assert_ok(job, np_)
