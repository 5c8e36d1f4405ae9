"""hvd.torch collectives on real multi-rank jobs: results, dtypes, handles, groups, autograd, process sets
and error paths, each checked inside the workers against values computed locally."""

import pytest

from conftest import assert_ok

COLLECTIVES = r"""
import sys
import torch
import hvd.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
assert hvd.is_initialized() and hvd.local_rank() == r and hvd.local_size() == n
assert hvd.cross_rank() == 0 and hvd.cross_size() == 1
assert hvd.gloo_built() and hvd.gloo_enabled() and not hvd.mpi_built() and hvd.nccl_built() == 0

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.bool]

def value(rank, dtype, shape=(3, 4)):
    if dtype == torch.bool:
        return (torch.arange(12).reshape(shape) + rank) % 2 == 0
    return (torch.arange(12).reshape(shape) % 5 + rank).to(dtype)

# allreduce: every dtype and op, out of place and in place, sync and async
for dtype in DTYPES:
    ops = [hvd.Sum, hvd.Min, hvd.Max, hvd.Product] + ([] if dtype == torch.bool else [hvd.Average])
    for op in ops:
        x = value(r, dtype)
        inputs = [value(k, dtype).double() for k in range(n)]
        if op == hvd.Sum:
            want = sum(inputs)
        elif op == hvd.Min:
            want = torch.stack(inputs).min(0).values
        elif op == hvd.Max:
            want = torch.stack(inputs).max(0).values
        elif op == hvd.Product:
            want = torch.stack(inputs).prod(0)
        else:
            want = sum(inputs) / n
        if dtype == torch.bool:
            want = want != 0
        got = hvd.allreduce(x, op=op, name=f"ar.{dtype}.{op}")
        assert got.dtype == dtype and got.shape == x.shape
        assert torch.equal(x, value(r, dtype)), "out-of-place allreduce changed its input"
        if dtype.is_floating_point:
            assert torch.allclose(got.double(), want.to(torch.float64) if op != hvd.Average else want, rtol=1e-2), (dtype, op, got, want)
        elif op == hvd.Average:
            # Horovod's rule: scaled in float64, truncated toward zero
            assert torch.equal(got, torch.trunc(want).to(dtype)), (dtype, got, want)
        elif dtype != torch.bool:
            assert torch.equal(got, want.to(dtype)), (dtype, op, got, want)
        else:
            assert torch.equal(got, want), (dtype, op)
        y = value(r, dtype)
        h = hvd.allreduce_async_(y, op=op, name=f"ar_.{dtype}.{op}")
        out = hvd.synchronize(h)
        assert out is y and torch.equal(y, got)

# prescale / postscale, and the deprecated average= argument
x = torch.full((5,), float(r + 1))
got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
assert torch.allclose(got, torch.full((5,), float(sum(range(1, n + 1)))))
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    got = hvd.allreduce(x, average=False)
assert torch.allclose(got, torch.full((5,), float(sum(range(1, n + 1)))))
assert any(issubclass(w.category, DeprecationWarning) for w in caught)
try:
    hvd.allreduce(x, average=True, op=hvd.Sum)
    raise AssertionError("op and average together were accepted")
except ValueError as e:
    assert "supersedes average" in str(e)

# non-contiguous input to an out-of-place op is fine; in place it is an error
t = torch.arange(12.0).reshape(3, 4).t()
assert torch.equal(hvd.allreduce(t, op=hvd.Sum), t * n)
try:
    hvd.allreduce_(t)
    raise AssertionError("in-place allreduce of a non-contiguous tensor was accepted")
except ValueError as e:
    assert "contiguous" in str(e)

# many handles at once, synchronized in reverse order
tensors = [torch.full((7,), float(i + r)) for i in range(20)]
handles = [hvd.allreduce_async(t, op=hvd.Sum, name=f"many.{i}") for i, t in enumerate(tensors)]
assert all(isinstance(h, int) for h in handles)
for i, h in reversed(list(enumerate(handles))):
    out = hvd.synchronize(h)
    assert torch.equal(out, torch.full((7,), float(n * i + sum(range(n))))), (i, out)
assert hvd.synchronize(handles[0]) is None  # already synchronized
try:
    hvd.poll(handles[0])
    raise AssertionError("poll of a used handle succeeded")
except ValueError as e:
    assert f"Handle {handles[0]} was not created or has been cleared." == str(e)
h = hvd.allreduce_async(torch.ones(3), name="polled")
while not hvd.poll(h):
    pass
assert torch.equal(hvd.synchronize(h), torch.ones(3))

# grouped allreduce
group = [torch.full((k + 1,), float(r)) for k in range(4)]
outs = hvd.grouped_allreduce(group, op=hvd.Sum)
assert isinstance(outs, list) and len(outs) == 4
for k, o in enumerate(outs):
    assert torch.equal(o, torch.full((k + 1,), float(sum(range(n)))))
same = hvd.grouped_allreduce_(group, op=hvd.Max)
assert all(a is b for a, b in zip(same, group)) and torch.equal(group[2], torch.full((3,), float(n - 1)))
try:
    hvd.grouped_allreduce([])
    raise AssertionError("empty group accepted")
except IndexError:
    pass

# allgather: rows differ per rank, every dtype
for dtype in DTYPES:
    mine = value(r, dtype, (3, 4))[: r + 1]
    got = hvd.allgather(mine, name=f"ag.{dtype}")
    want = torch.cat([value(k, dtype, (3, 4))[: k + 1] for k in range(n)])
    assert got.dtype == dtype and torch.equal(got, want), (dtype, got, want)
outs = hvd.grouped_allgather([torch.full((r + 1, 2), r), torch.full((1,), r)])
assert torch.equal(outs[0], torch.cat([torch.full((k + 1, 2), k) for k in range(n)]))
assert torch.equal(outs[1], torch.arange(n))

# broadcast from every root
for root in range(n):
    x = torch.full((2, 3), float(r))
    got = hvd.broadcast(x, root, name=f"bc.{root}")
    assert torch.equal(got, torch.full((2, 3), float(root))) and torch.equal(x, torch.full((2, 3), float(r)))
    y = torch.full((4,), r, dtype=torch.int16)
    assert hvd.broadcast_(y, root, name=f"bc_.{root}") is y and torch.equal(y, torch.full((4,), root, dtype=torch.int16))

# alltoall: even and with splits
x = torch.arange(n * 2).reshape(n * 2, 1) + 100 * r
got = hvd.alltoall(x)
assert torch.equal(got, torch.cat([torch.arange(2 * r, 2 * r + 2).reshape(2, 1) + 100 * k for k in range(n)]))
splits = [k + 1 for k in range(n)]  # rank r sends k + 1 rows to rank k
x = torch.full((sum(splits), 2), float(r))
got, received = hvd.alltoall(x, splits=splits)
assert received.dtype == torch.int32 and received.tolist() == [r + 1] * n
assert torch.equal(got, torch.cat([torch.full((r + 1, 2), float(k)) for k in range(n)]))
got, received = hvd.alltoall(x, splits=torch.tensor(splits, dtype=torch.int32))
assert received.tolist() == [r + 1] * n

# reducescatter: uneven rows, Average and Sum
rows = 2 * n + 1
x = torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2) * (r + 1)
total = torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2) * sum(range(1, n + 1))
base, extra = divmod(rows, n)
first = r * base + min(r, extra)
mine = base + (1 if r < extra else 0)
assert torch.allclose(hvd.reducescatter(x, op=hvd.Sum), total[first:first + mine])
assert torch.allclose(hvd.reducescatter(x), total[first:first + mine] / n)
outs = hvd.grouped_reducescatter([x, x * 2], op=hvd.Sum)
assert torch.allclose(outs[1], 2 * total[first:first + mine])
try:
    hvd.reducescatter(x, op=hvd.Max)
    raise AssertionError("reducescatter with Max accepted")
except hvd.HorovodInternalError as e:
    assert "only supports AVERAGE and SUM" in str(e)

hvd.barrier()
print("OK")
"""


@pytest.mark.parametrize("np", [2, 3])
def test_collectives(hvdrun, np):
    assert_ok(hvdrun(np, COLLECTIVES), np)


AUTOGRAD = r"""
import torch
import hvd.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
torch.manual_seed(1234 + r)

def local_grad(fn, x):
    x = x.clone().requires_grad_(True)
    fn(x).backward()
    return x.grad

# allreduce: d/dx sum(w * allreduce(x)) with w different per rank is allreduce(w) (Sum), mean for Average
w = torch.randn(6, dtype=torch.float64)
ws = hvd.allgather(w.unsqueeze(0))
x = torch.randn(6, dtype=torch.float64)
g = local_grad(lambda t: (w * hvd.allreduce(t, op=hvd.Sum)).sum(), x)
assert torch.allclose(g, ws.sum(0)), (g, ws.sum(0))
g = local_grad(lambda t: (w * hvd.allreduce(t, op=hvd.Average)).sum(), x)
assert torch.allclose(g, ws.mean(0))
g = local_grad(lambda t: (w * hvd.allreduce(t, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)).sum(), x)
assert torch.allclose(g, ws.sum(0) * 1.5)

# grouped allreduce
a, b = torch.randn(3, dtype=torch.float64), torch.randn(2, dtype=torch.float64)
a.requires_grad_(True); b.requires_grad_(True)
oa, ob = hvd.grouped_allreduce([a, b], op=hvd.Sum)
(oa.sum() * 2 + ob.sum() * 3).backward()
assert torch.allclose(a.grad, torch.full((3,), 2.0 * n, dtype=torch.float64))
assert torch.allclose(b.grad, torch.full((2,), 3.0 * n, dtype=torch.float64))

# allgather: the gradient is this rank's rows of the average of every rank's upstream gradient
x = torch.randn(r + 1, 2, dtype=torch.float64)
upstream = torch.randn(sum(k + 1 for k in range(n)), 2, dtype=torch.float64)
ups = hvd.allgather(upstream.unsqueeze(0))
g = local_grad(lambda t: (upstream * hvd.allgather(t)).sum(), x)
offset = sum(k + 1 for k in range(r))
assert torch.allclose(g, ups.mean(0)[offset:offset + r + 1]), (g, ups.mean(0))

# broadcast: the average of every rank's upstream gradient on the root, zero elsewhere
x = torch.randn(4, dtype=torch.float64)
g = local_grad(lambda t: (w[:4] * hvd.broadcast(t, 1)).sum(), x)
want = ws[:, :4].mean(0) if r == 1 else torch.zeros(4, dtype=torch.float64)
assert torch.allclose(g, want), (g, want)

# alltoall: gradients travel back to where the rows came from
splits = [1 + (k + r) % 2 for k in range(n)]
x = torch.randn(sum(splits), 3, dtype=torch.float64)
up = torch.randn(100, 3, dtype=torch.float64)
def f(t):
    out, received = hvd.alltoall(t, splits=splits)
    return (up[: out.shape[0]] * out).sum()
g = local_grad(f, x)
# numeric check against the definition: the gradient of row j sent to rank k is rank k's upstream row
out, received = hvd.alltoall(x, splits=splits)
back, _ = hvd.alltoall(up[: out.shape[0]].contiguous(), splits=received)
assert torch.allclose(g, back)

# reducescatter Sum: gradient is allgather(upstream) * size; Average: allgather(upstream)
rows = 2 * n
x = torch.randn(rows, 2, dtype=torch.float64)
up = torch.randn(2, 2, dtype=torch.float64)
ups = hvd.allgather(up)
g = local_grad(lambda t: (up * hvd.reducescatter(t, op=hvd.Sum)).sum(), x)
assert torch.allclose(g, ups * n)
g = local_grad(lambda t: (up * hvd.reducescatter(t, op=hvd.Average)).sum(), x)
assert torch.allclose(g, ups)

# finite differences: every rank perturbs coordinate i of its own input together, so the change of
# the rank-local loss sum(w * allreduce(x * x)) is sum over ranks of 2 x_i (own x) ... only when all
# ranks' x are equal; use the same x everywhere for this check
x = torch.linspace(-1.0, 1.0, 5, dtype=torch.float64)
def loss(t):
    return (hvd.allreduce(t * t, op=hvd.Sum) * w[:5]).sum()
g = local_grad(loss, x)
eps = 1e-6
fd = torch.zeros(5, dtype=torch.float64)
for i in range(5):
    e = torch.zeros(5, dtype=torch.float64)
    e[i] = eps
    fd[i] = ((loss(x + e) - loss(x - e)) / (2 * eps)).item()
# the analytic gradient sums every rank's w (the backward allreduce); the finite difference of the
# local loss, with every rank moving together, is n * 2 x w_local: they agree after an allreduce of fd
fd_total = hvd.allreduce(fd, op=hvd.Sum) / n
assert torch.allclose(g, fd_total, atol=1e-4), (g, fd_total)
print("OK")
"""


@pytest.mark.parametrize("np", [2, 3])
def test_autograd(hvdrun, np):
    assert_ok(hvdrun(np, AUTOGRAD), np)


ERRORS = r"""
import torch
import hvd.torch as hvd

# before init
try:
    hvd.rank()
    raise AssertionError("rank() before init")
except ValueError as e:
    assert str(e) == "Horovod has not been initialized; use hvd.init()."
try:
    hvd.allreduce(torch.ones(2))
    raise AssertionError("allreduce before init")
except hvd.HorovodInternalError as e:
    assert "not been initialized" in str(e)

hvd.init()
r, n = hvd.rank(), hvd.size()

def expect(exc, text, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc as e:
        assert text in str(e), (text, str(e))
        return e
    raise AssertionError(f"{fn.__name__} did not raise {exc.__name__} ({text})")

# mismatches reach every rank as HorovodInternalError, and the job goes on
expect(hvd.HorovodInternalError, "Mismatched allreduce data types",
       hvd.allreduce, torch.ones(3, dtype=torch.float32 if r == 0 else torch.float64), name="mm.dtype")
expect(hvd.HorovodInternalError, "Mismatched allreduce shapes",
       hvd.allreduce, torch.ones(3 + (r == 1)), name="mm.shape")
expect(hvd.HorovodInternalError, "Mismatched allreduce reduce operations",
       hvd.allreduce, torch.ones(3), op=hvd.Sum if r == 0 else hvd.Max, name="mm.op")
expect(hvd.HorovodInternalError, "Mismatched broadcast root ranks",
       hvd.broadcast, torch.ones(3), r % 2, name="mm.root")
expect(hvd.HorovodInternalError, "Mismatched allgather shapes",
       hvd.allgather, torch.ones(2, 2 + (r == 1)), name="mm.ag")
# Shapes, not only element counts, as Horovod compares them: [17, 1311] against [17, 23, 57].
e = expect(hvd.HorovodInternalError, "Mismatched allreduce shapes",
           hvd.allreduce, torch.ones(17, 23 * 57) if r == 0 else torch.ones(17, 23, 57), name="mm.shape2")
assert "[17, 1311]" in str(e) and "[17, 23, 57]" in str(e), str(e)
expect(hvd.HorovodInternalError, "Mismatched reducescatter shapes",
       hvd.reducescatter, torch.ones(4, 6) if r == 0 else torch.ones(4, 2, 3), name="mm.rs")
expect(hvd.HorovodInternalError, "Mismatched allgather shapes (beyond the first dimension)",
       hvd.allgather, torch.ones(2, 2, 3) if r == 0 else torch.ones(2, 3, 2), name="mm.ag2")
expect(ValueError, "splits must be a tensor of 32-bit integers (torch.int32), got torch.float32",
       hvd.alltoall, torch.ones(n), torch.ones(n, dtype=torch.float32))
assert torch.equal(hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after"), torch.full((3,), float(n)))

# a name in flight twice on one rank


def twice_in_flight(submit, name, message):
    # A name is free again once its operation completes, which can happen as soon as every rank has
    # submitted: the holder submits only after the other ranks have checked, so the operation cannot
    # finish during their check.
    for holder in range(n):
        if r == holder:
            hvd.barrier()
        h = submit(torch.ones(2), name=name)
        if r != holder:
            expect(ValueError, message, submit, torch.ones(2), name=name)
            hvd.barrier()
        hvd.synchronize(h)


twice_in_flight(hvd.allreduce_async, "dup", "same name as another tensor that is currently being processed")
hvd.synchronize(hvd.allreduce_async(torch.ones(2), name="dup"))  # reuse after completion is fine

expect(ValueError, "invalid root rank 7", hvd.broadcast, torch.ones(2), 7)
expect(ValueError, "invalid root rank -1", hvd.broadcast_, torch.ones(2), -1)
expect(ValueError, "Tensor type torch.ComplexFloatTensor is not supported.", hvd.allreduce,
       torch.ones(2, dtype=torch.complex64))
expect(NotImplementedError, "Adasum", hvd.allreduce, torch.ones(2), op=hvd.Adasum)
expect(ValueError, "Number of entries in splits (1)", hvd.alltoall, torch.ones(4), splits=[4])
expect(ValueError, "Sum of splits entries", hvd.alltoall, torch.ones(2), splits=[2] * n)
expect(ValueError, "not an even multiple", hvd.alltoall, torch.ones(n + 1))
expect(ValueError, "0-dimensional", hvd.allgather, torch.tensor(1.0))
expect(ValueError, "bool tensor", hvd.allreduce, torch.ones(2, dtype=torch.bool), op=hvd.Average)
# the in-place fast path reports the same errors
expect(ValueError, "bool tensor", hvd.allreduce_async_, torch.ones(2, dtype=torch.bool))
twice_in_flight(hvd.allreduce_async_, "dup_", "same name as another tensor")
expect(ValueError, "Tensor type torch.ComplexFloatTensor is not supported.", hvd.allreduce_async_,
       torch.ones(2, dtype=torch.complex64))
expect(NotImplementedError, "Adasum", hvd.allreduce_async_, torch.ones(2), op=hvd.Adasum)
expect(ValueError, "has not been registered", hvd.allreduce_async_, torch.ones(2),
       process_set=hvd.ProcessSet([0]))
expect(ValueError, "process_set must be a ProcessSet", hvd.allreduce_async_, torch.ones(2), process_set=0)
expect(ValueError, "process_set must be a ProcessSet", hvd.allreduce, torch.ones(2), process_set=5)
expect(ValueError, "unknown reduce operation 1.0", hvd.allreduce_async_, torch.ones(2), op=1.0)
expect(ValueError, "unknown reduce operation 1.0", hvd.allreduce, torch.ones(2), op=1.0)
expect(ValueError, "name must be a str or None, got 3", hvd.allreduce_async_, torch.ones(2), name=3)
expect(ValueError, "name must be a str or None, got 3", hvd.allreduce, torch.ones(2), name=3)
expect(ValueError, "expected a torch.Tensor", hvd.allreduce, [1.0, 2.0])
assert hvd.synchronize(123456) is None
expect(ValueError, "Handle 123456 was not created or has been cleared.", hvd.poll, 123456)

# still usable after every error above
assert torch.equal(hvd.allreduce(torch.ones(3), op=hvd.Sum, name="final"), torch.full((3,), float(n)))
hvd.shutdown()
assert not hvd.is_initialized()
expect(ValueError, "not been initialized", hvd.size)
# init again after shutdown
hvd.init()
assert hvd.size() == n
assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(n)))
print("OK")
"""


def test_errors(hvdrun):
    assert_ok(hvdrun(3, ERRORS), 3)


PROCESS_SETS = r"""
import torch
import hvd.torch as hvd

evens = hvd.ProcessSet([2, 0])
assert evens.ranks == [0, 2] and evens.process_set_id is None and evens.size() is None
hvd.init(process_sets=[evens])
r, n = hvd.rank(), hvd.size()
assert evens.process_set_id == 1 and evens.size() == 2
assert hvd.global_process_set.ranks == list(range(n)) and hvd.global_process_set.process_set_id == 0
if r in (0, 2):
    assert evens.included() and evens.rank() == r // 2
    x = torch.full((3,), float(r))
    assert torch.equal(hvd.allreduce(x, op=hvd.Sum, process_set=evens), torch.full((3,), 2.0))
    assert torch.equal(hvd.allreduce(x, process_set=evens), torch.full((3,), 1.0))  # average over 2
    assert torch.equal(hvd.allgather(torch.full((1,), r), process_set=evens), torch.tensor([0, 2]))
    assert torch.equal(hvd.broadcast(x, 2, process_set=evens), torch.full((3,), 2.0))
    out = hvd.alltoall(torch.tensor([r, r + 10]), process_set=evens)
    assert out.tolist() == [0 + (r // 2) * 10, 2 + (r // 2) * 10], out
    assert hvd.reducescatter(torch.ones(4, 1), op=hvd.Sum, process_set=evens).tolist() == [[2.0], [2.0]]
    hvd.barrier(process_set=evens)
    try:
        hvd.broadcast(x, 1, process_set=evens)
        raise AssertionError("root outside the set accepted")
    except ValueError as e:
        assert "is not a member of process set 1" in str(e)
else:
    assert not evens.included()
    try:
        hvd.allreduce(torch.ones(1), process_set=evens)
        raise AssertionError("non-member allreduce accepted")
    except ValueError as e:
        assert "not a member of the provided process set" in str(e)
    try:
        evens.rank()
        raise AssertionError("rank() of a non-member")
    except ValueError as e:
        assert "Process is not part of provided process set." == str(e)
# without dynamic process sets
try:
    hvd.add_process_set([0, 1])
    raise AssertionError("add_process_set without HOROVOD_DYNAMIC_PROCESS_SETS")
except ValueError as e:
    assert "HOROVOD_DYNAMIC_PROCESS_SETS=1" in str(e)
unregistered = hvd.ProcessSet([0, 1])
try:
    hvd.allreduce(torch.ones(1), process_set=unregistered)
    raise AssertionError("unregistered set accepted")
except ValueError as e:
    assert "has not been registered" in str(e)
hvd.barrier()  # shutdown on one rank ends the job for all (as Horovod's): let the set members finish first
hvd.shutdown()
assert evens.process_set_id is None

# dynamic
hvd.init(process_sets="dynamic")
low = hvd.add_process_set([0, 1])
assert low.process_set_id >= 1 and low.ranks == [0, 1]
if r < 2:
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=low), torch.full((2,), 2.0))
try:
    hvd.add_process_set(hvd.ProcessSet([1, 0]))
    raise AssertionError("duplicate set accepted")
except ValueError as e:
    assert "Attempted to add a duplicate process set" in str(e)
assert hvd.remove_process_set(hvd.global_process_set) is False
assert hvd.remove_process_set(low) is True and low.process_set_id is None
assert hvd.remove_process_set(low) is False
hi = hvd.add_process_set([1, 2])
if r > 0:
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=hi), torch.full((2,), 2.0))
    hvd.barrier(process_set=hi)  # unnamed, counted per set: rank 0 never issues it, and need not
hvd.barrier()
print("OK")
"""


def test_process_sets(hvdrun):
    assert_ok(hvdrun(3, PROCESS_SETS), 3)


def test_join(hvdrun):
    code = r"""
import torch
import hvd.torch as hvd
hvd.init()
r, n = hvd.rank(), hvd.size()
# rank r runs r + 1 steps; joined ranks contribute zeros, Average still divides by the full size
for step in range(r + 1):
    got = hvd.allreduce(torch.ones(2), op=hvd.Average, name=f"step.{step}")
    active = sum(1 for k in range(n) if k >= step)
    assert torch.allclose(got, torch.full((2,), active / n)), (step, got)
last = hvd.join()
assert last == n - 1, last
print("OK")
"""
    assert_ok(hvdrun(3, code), 3)
