"""hvd.numpy: collectives on NumPy arrays, in real hvdrun jobs (and argument checks in this process)."""

import numpy as np
import pytest
from conftest import EXPECT_ERROR, assert_ok

PRELUDE = EXPECT_ERROR + """
import gc
import sys
import numpy as np
import hvd.numpy as hvd
"""


@pytest.mark.parametrize("np_", [2, 3])
def test_collectives(hvdrun, np_):
    job = hvdrun(np_, PRELUDE + """
hvd.init()
r, n = hvd.rank(), hvd.size()
ranks = np.arange(n)

# allreduce: every dtype, Sum; a new array of the input's dtype and shape; the input unchanged.
for dt in ["uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]:
    a = (np.arange(6).reshape(2, 3) + r).astype(dt)
    before = a.copy()
    out = hvd.allreduce(a, op=hvd.Sum, name=f"sum.{dt}")
    expected = sum((np.arange(6).reshape(2, 3) + q) for q in range(n)).astype(dt)
    assert out.dtype == np.dtype(dt) and out.shape == (2, 3), (dt, out.dtype, out.shape)
    assert np.array_equal(out, expected), (dt, out, expected)
    assert np.array_equal(a, before) and out is not a

# Average (the default), Min, Max, Product; a 0-d array keeps its shape.
x = np.array([1.0, 2.0, 3.0]) * (r + 1)
assert np.allclose(hvd.allreduce(x), np.array([1.0, 2.0, 3.0]) * (n + 1) / 2)
assert np.array_equal(hvd.allreduce(x, op=hvd.Min), [1.0, 2.0, 3.0])
assert np.array_equal(hvd.allreduce(x, op=hvd.Max), np.array([1.0, 2.0, 3.0]) * n)
prod = np.prod(ranks + 1.0)
assert np.array_equal(hvd.allreduce(np.full(2, r + 1.0), op=hvd.Product), [prod, prod])
scalar = hvd.allreduce(np.array(float(r)), op=hvd.Sum)
assert scalar.shape == () and scalar == ranks.sum(), scalar

# prescale / postscale.
out = hvd.allreduce(np.ones(4, np.float32), op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
assert np.array_equal(out, np.full(4, n, np.float32)), out

# A non-contiguous input is reduced as its values (a copy is made).
m = (np.arange(12.0).reshape(3, 4) + r).T
assert not m.flags.c_contiguous
assert np.array_equal(hvd.allreduce(m, op=hvd.Sum), sum((np.arange(12.0).reshape(3, 4) + q).T for q in range(n)))

# In place: the same object, written where it is (a view writes into its base: no copy).
base = np.zeros(10, np.float64)
view = base[2:5]
view[:] = r + 1
assert hvd.allreduce_(view, op=hvd.Sum) is view
assert np.array_equal(base[2:5], np.full(3, (ranks + 1).sum())) and base[0] == 0 and base[5] == 0, base

# Async: handles are ints, synchronized in any order; inputs stay alive until synchronized.
h1 = hvd.allreduce_async(np.full(1000, r, np.int64), op=hvd.Sum, name="a1")
h2 = hvd.allgather_async(np.full((1, 2), r, np.int32), name="a2")
h3 = hvd.allreduce_async_(np.full(5, 1.0), op=hvd.Sum, name="a3")
assert all(isinstance(h, int) for h in (h1, h2, h3))
gc.collect()
assert np.array_equal(hvd.synchronize(h3), np.full(5, float(n)))
assert np.array_equal(hvd.synchronize(h2), np.repeat(ranks, 2).reshape(n, 2))
while not hvd.poll(h1):
    pass
assert np.array_equal(hvd.synchronize(h1), np.full(1000, ranks.sum()))
assert hvd.synchronize(h1) is None  # already used

# allgather: dim 0 differs per rank, concatenated in rank order; dtypes kept, bool included.
g = hvd.allgather(np.full((r + 1, 2, 2), r, np.int16))
assert g.dtype == np.int16 and g.shape == (sum(range(1, n + 1)), 2, 2), g.shape
assert np.array_equal(g[:, 0, 0], np.concatenate([np.full(q + 1, q) for q in range(n)]))
flags = hvd.allgather(np.array([r % 2 == 0]))
assert flags.dtype == np.bool_ and flags.tolist() == [q % 2 == 0 for q in range(n)], flags
empty_on_0 = hvd.allgather(np.full((0 if r == 0 else 1, 3), r, np.uint8))
assert empty_on_0.shape == (n - 1, 3), empty_on_0.shape

# broadcast from a global rank: out of place leaves the input alone; in place writes it.
a = np.full((2, 2), float(r))
b = hvd.broadcast(a, root_rank=1)
assert np.array_equal(b, np.full((2, 2), 1.0)) and np.array_equal(a, np.full((2, 2), float(r)))
c = np.full(3, r, np.int8)
assert hvd.broadcast_(c, 0) is c and np.array_equal(c, np.zeros(3, np.int8))
assert np.array_equal(hvd.broadcast(m, 0), np.arange(12.0).reshape(3, 4).T)  # non-contiguous input

# alltoall: rank r sends q+1 rows to rank q; without splits, an even split and no splits returned.
send = np.concatenate([np.full((q + 1, 2), 10 * r + q, np.float32) for q in range(n)])
out, received = hvd.alltoall(send, splits=[q + 1 for q in range(n)])
assert received.dtype == np.int32 and received.tolist() == [r + 1] * n, received
assert np.array_equal(out[:, 0], np.concatenate([np.full(r + 1, 10 * q + r) for q in range(n)])), out
even = hvd.alltoall(np.arange(2 * n, dtype=np.int64) + 100 * r)
assert isinstance(even, np.ndarray) and even.tolist() == sum([[100 * q + 2 * r, 100 * q + 2 * r + 1]
                                                              for q in range(n)], []), even
out, received = hvd.alltoall(send, splits=np.array([q + 1 for q in range(n)], np.int64))
assert received.tolist() == [r + 1] * n

# reducescatter: rows split over ranks (the first rows % n ranks get one more), Sum and Average.
rows = 2 * n + 1
data = np.arange(rows * 2, dtype=np.float64).reshape(rows, 2) * (r + 1)
full = np.arange(rows * 2, dtype=np.float64).reshape(rows, 2) * (ranks + 1).sum()
counts = [rows // n + (1 if q < rows % n else 0) for q in range(n)]
start = sum(counts[:r])
mine = hvd.reducescatter(data, op=hvd.Sum)
assert np.array_equal(mine, full[start:start + counts[r]]), (mine, full)
avg = hvd.reducescatter(data)
assert np.allclose(avg, full[start:start + counts[r]] / n)

assert hvd.barrier() is None

# Sequential reuse of a name is fine.
for _ in range(3):
    hvd.allreduce(np.ones(2), name="reused")
print("OK")
""")
    assert_ok(job, np_)


def test_process_set(hvdrun):
    job = hvdrun(3, PRELUDE + """
even = hvd.ProcessSet([0, 2])
hvd.init(process_sets=[even])
r = hvd.rank()
if r in (0, 2):
    out = hvd.allreduce(np.full(2, r + 1.0), op=hvd.Sum, process_set=even)
    assert np.array_equal(out, [4.0, 4.0]), out
    g = hvd.allgather(np.array([r]), process_set=even)
    assert g.tolist() == [0, 2], g
    assert hvd.broadcast(np.array([r]), 2, process_set=even).tolist() == [2]
    assert hvd.reducescatter(np.ones((2, 1)), op=hvd.Sum, process_set=even).tolist() == [[2.0]]
    hvd.barrier(process_set=even)
else:
    expect_error(ValueError, "is not a member of the provided process set", hvd.allreduce, np.ones(2),
                 process_set=even)
odd = hvd.ProcessSet([1])
expect_error(ValueError, "has not been registered", hvd.allreduce, np.ones(2), process_set=odd)
hvd.barrier()  # rank 1 must not shut the job down while the set is still working
print("OK")
""")
    assert_ok(job, 3)


def test_errors_in_a_job(hvdrun):
    job = hvdrun(2, PRELUDE + """
from hvd.common.exceptions import HorovodInternalError, MismatchError
hvd.init()
r = hvd.rank()
expect_error(ValueError, "Number of entries in splits (3)", hvd.alltoall, np.ones(4), splits=[1, 1, 2])
expect_error(ValueError, "splits must hold integers", hvd.alltoall, np.ones(4), splits=[1.5, 2.5])
expect_error(ValueError, "got shape (1, 2)", hvd.alltoall, np.ones(4), splits=np.array([[2, 2]]))
expect_error(HorovodInternalError, "Reducescatter currently only supports AVERAGE and SUM.",
             hvd.reducescatter, np.ones(4), op=hvd.Max)
expect_error(NotImplementedError, "Adasum", hvd.allreduce, np.ones(4), op=hvd.Adasum)
expect_error(ValueError, "unknown reduce operation 'sum'", hvd.allreduce, np.ones(4), op="sum")
expect_error(ValueError, "unknown reduce operation 1.0", hvd.allreduce, np.ones(4), op=1.0)
expect_error(ValueError, "unknown reduce operation array([1, 1])", hvd.allreduce, np.ones(4), op=np.array([1, 1]))
expect_error(ValueError, "process_set must be a ProcessSet (hvd.global_process_set, or one passed to hvd.init or "
             "hvd.add_process_set), got 5", hvd.allreduce, np.ones(4), process_set=5)
expect_error(ValueError, "process_set must be a ProcessSet", hvd.barrier, process_set="global")
expect_error(ValueError, "root_rank must be an int", hvd.broadcast, np.ones(4), root_rank="0")
expect_error(ValueError, "Handle 12345 was not created", hvd.poll, 12345)
assert hvd.synchronize(12345) is None

# Ranks disagreeing on a shape: every rank gets the mismatch error, and the job goes on.
e = expect_error(HorovodInternalError, "", hvd.allreduce, np.ones(2 + r), name="bad.shape")
assert isinstance(e, MismatchError), type(e)
# The same element count in other shapes is a mismatch too (Horovod compares shapes).
e = expect_error(HorovodInternalError, "Mismatched allreduce shapes", hvd.allreduce,
                 np.ones((6, 2)) if r == 0 else np.ones((2, 6)), name="bad.shape2")
assert "[6, 2]" in str(e) and "[2, 6]" in str(e), str(e)
# A shape that does not hold the element count is refused by the C API before anything is sent.
from hvd import _core
x = np.ones(6)
expect_error(ValueError, "allreduce 'bad.product': its shape holds 6 elements, its rows x row_elements 5x1",
             _core.enqueue, _core.OPS["allreduce"], "bad.product", x.ctypes.data, x.ctypes.data, 5, 1,
             _core.DTYPES["float64"], 1, 1.0, 1.0, 0, None, 0, (2, 3))
# The device a tensor lives on is compared as Horovod does: CPU on one rank and a GPU on another is a
# mismatch on every rank (a GPU tensor's bindings pass its host copy with the CUDA ordinal); GPUs of
# different ordinals agree. A device below -1 is refused before anything is sent.
x = np.ones(4)
others = ", ".join(str(i) for i in range(1, hvd.size()))
e = expect_error(HorovodInternalError, "Mismatched allreduce CPU/GPU device selection for tensor 'dev.mixed': "
                 f"CPU on ranks [{others}], GPU on ranks [0]",
                 lambda: _core.wait(_core.enqueue(_core.OPS["allreduce"], "dev.mixed", x.ctypes.data, x.ctypes.data,
                                                  4, 1, _core.DTYPES["float64"], 1, 1.0, 1.0, 0, None, 0, (4,),
                                                  0 if r == 0 else -1)))
assert isinstance(e, MismatchError), type(e)
_core.wait(_core.enqueue(_core.OPS["allreduce"], "dev.ordinals", x.ctypes.data, x.ctypes.data, 4, 1,
                         _core.DTYPES["float64"], 1, 1.0, 1.0, 0, None, 0, (4,), r))
assert np.array_equal(x, np.full(4, float(hvd.size()))), x
expect_error(ValueError, "allreduce 'dev.bad': device -2 is neither HVD_CPU_DEVICE (-1) nor a CUDA device ordinal",
             _core.enqueue, _core.OPS["allreduce"], "dev.bad", x.ctypes.data, x.ctypes.data, 4, 1,
             _core.DTYPES["float64"], 1, 1.0, 1.0, 0, None, 0, (4,), -2)
# The same name twice in flight on one rank. A name is free again once its operation completes, which can
# happen as soon as every rank has submitted: the holder submits only after the other ranks have checked.
for holder in range(hvd.size()):
    if r == holder:
        hvd.barrier()
    h = hvd.allreduce_async(np.ones(2), name="twice")
    if r != holder:
        expect_error(ValueError, "twice", hvd.allreduce_async, np.ones(2), name="twice")
        hvd.barrier()
    assert np.array_equal(hvd.synchronize(h), np.ones(2))
assert np.array_equal(hvd.allreduce(np.ones(2), op=hvd.Sum), [2.0, 2.0])
print("OK")
""")
    assert_ok(job, 2)


# --- in this process: checks made before anything is queued, and use before init ----------------------

@pytest.fixture(scope="module")
def hvdnp():
    import hvd.numpy as hvdnp

    return hvdnp


@pytest.mark.parametrize("bad, text", [
    (np.ones(2, np.complex64), "array dtype complex64 is not supported"),
    (np.ones(2, np.dtype(">f4")), "array dtype >f4 is not supported"),
    (np.array(["a"]), "array dtype <U1 is not supported"),
    (np.ones(2, np.uint64), "array dtype uint64 is not supported"),
    ([1.0, 2.0], "expected a numpy.ndarray, got list"),
    (3.0, "expected a numpy.ndarray, got float"),
])
def test_bad_inputs(hvdnp, bad, text):
    for fn in (hvdnp.allreduce, hvdnp.allgather, hvdnp.alltoall, hvdnp.reducescatter):
        with pytest.raises(ValueError, match=text.replace("(", r"\(")):
            fn(bad)
    with pytest.raises(ValueError, match=text):
        hvdnp.broadcast(bad, 0)


def test_in_place_needs_contiguous_writable(hvdnp):
    m = np.ones((3, 4)).T
    with pytest.raises(ValueError, match=r"allreduce_: the array must be C-contiguous .*shape \(4, 3\)"):
        hvdnp.allreduce_(m)
    with pytest.raises(ValueError, match="broadcast_: the array must be C-contiguous"):
        hvdnp.broadcast_async_(m, 0)
    ro = np.ones(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="allreduce_: the array is read-only"):
        hvdnp.allreduce_async_(ro)
    with pytest.raises(ValueError, match="broadcast_: the array is read-only"):
        hvdnp.broadcast_(ro, 0)
    with pytest.raises(ValueError, match="allgather of a 0-dimensional array"):
        hvdnp.allgather(np.array(1.0))


def test_before_init(hvdnp):
    from hvd.common.exceptions import HorovodInternalError

    with pytest.raises(ValueError, match="Horovod has not been initialized"):
        hvdnp.rank()
    with pytest.raises(HorovodInternalError, match="Horovod has not been initialized; use hvd.init()"):
        hvdnp.allreduce(np.ones(2))
    with pytest.raises(HorovodInternalError, match="not been initialized"):
        hvdnp.barrier()


def test_module_surface(hvdnp):
    import hvd.common.basics as basics
    import hvd.common.process_sets as ps

    assert hvdnp.init is basics.init and hvdnp.size is basics.size and hvdnp.rank is basics.rank
    assert hvdnp.global_process_set is ps.global_process_set
    assert (hvdnp.Average, hvdnp.Sum, hvdnp.Adasum, hvdnp.Min, hvdnp.Max, hvdnp.Product) == (0, 1, 2, 3, 4, 5)
    for name in ("allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "allgather", "allgather_async",
                 "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "alltoall", "alltoall_async",
                 "reducescatter", "reducescatter_async", "barrier", "poll", "synchronize", "shutdown",
                 "local_rank", "local_size", "cross_rank", "cross_size", "is_initialized"):
        assert callable(getattr(hvdnp, name)), name


def test_autotune_settles_and_logs(hvdrun, tmp_path):
    """hvdrun --autotune: libhvd tunes while the job trains, every step's values stay right, and rank 0
    writes Horovod's CSV (header, one row per scored sample, the kept parameters last)."""
    log = tmp_path / "autotune.csv"
    job = hvdrun(2, PRELUDE + """
hvd.init()
r = hvd.rank()
grads = [np.full(n, float(r + 1), dtype=np.float32) for n in (1000, 60000, 300000, 5)]
for step in range(160):
    handles = [hvd.allreduce_async(g, name=f"g{i}", op=hvd.Sum) for i, g in enumerate(grads)]
    for h, g in zip(handles, grads):
        out = hvd.synchronize(h)
        assert out.shape == g.shape and np.all(out == 3.0), (step, out[:3])
print("OK")
""", flags=("--autotune", "--autotune-log-file", str(log), "--autotune-warmup-samples", "1",
            "--autotune-steps-per-sample", "4", "--autotune-bayes-opt-max-samples", "12",
            "--log-level", "INFO"))
    assert_ok(job, 2)
    rows = log.read_text().splitlines()
    assert rows[0] == ("hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,"
                       "tensor_fusion_threshold,score"), rows
    # 160 steps of 4 samples: the 1 warm-up sample, at most 12 scored ones, and the kept parameters.
    assert 3 <= len(rows) <= 1 + 12 + 1, rows
    for row in rows[1:]:
        ha, hg, torus, cache, cycle_ms, fusion_mb, score = row.split(",")
        assert (ha, hg, torus, cache) == ("0", "0", "0", "1"), row  # one host: no hierarchical path to try
        assert float(cycle_ms) in (0, 1, 2.5, 5) and float(fusion_mb) in (0.25, 1, 4, 16, 64), row
        assert float(score) > 0, row
    assert "autotune: kept the" in job.stderr + job.stdout, job
