"""Collectives that can never complete end on every rank, naming what each rank waits for: real np=2 and np=3
jobs under hvdrun. A certain deadlock (every rank blocked on an operation that other blocked ranks never
submitted: a barrier against an allgather, two synchronous allreduces in opposite orders, a process set's
collective that a member never joins while the others wait for it) fails every rank with StalledError within
HOROVOD_STALL_CHECK_TIME_SECONDS; a rank that is merely busy before it submits is never mistaken for one."""

import time

from conftest import assert_ok

PRELUDE = """
import sys, time
import numpy as np
import hvd.numpy as hvd
from hvd.common.exceptions import StalledError

hvd.init()
r = hvd.rank()

def deadlocked(fn, *args, **kwargs):
    t = time.monotonic()
    try:
        fn(*args, **kwargs)
    except StalledError as e:
        elapsed = time.monotonic() - t
        assert elapsed < 6, elapsed   # the stall check time is 2 s
        print("STALLED", str(e), flush=True)
        return
    raise AssertionError(f"{fn.__name__} returned")
"""

STALL = {"HOROVOD_STALL_CHECK_TIME_SECONDS": "2"}


def stalled_line(job, rank):
    lines = [line for line in job.rank_output(rank) if line.startswith("STALLED ")]
    assert len(lines) == 1, job
    return lines[0]


def test_a_barrier_against_an_allgather_is_a_deadlock_named_on_every_rank(hvdrun):
    job = hvdrun(2, PRELUDE + """
if r == 0:
    deadlocked(hvd.barrier)
else:
    deadlocked(hvd.allgather, np.ones(2), name="x")
print("OK")
""", env=STALL, timeout=60)
    assert_ok(job, 2)
    for rank in (0, 1):
        line = stalled_line(job, rank)
        assert "deadlock: every rank is blocked waiting for an operation that other blocked ranks never submitted" in line
        assert "rank 0 waits for barrier 'barrier.noname.0', submitted by ranks [0], never by ranks [1]" in line, line
        assert "rank 1 waits for allgather 'allgather.x', submitted by ranks [1], never by ranks [0]" in line, line


def test_synchronous_allreduces_in_opposite_orders_deadlock(hvdrun):
    job = hvdrun(3, PRELUDE + """
# Ranks 0 and 1 reduce "a" then "b", rank 2 "b" then "a": each blocks in its first.
first, second = ("a", "b") if r != 2 else ("b", "a")
deadlocked(hvd.allreduce, np.ones(3), name=first)
print("OK")
""", env=STALL, timeout=60)
    assert_ok(job, 3)
    line = stalled_line(job, 2)
    assert "rank 0 waits for allreduce 'allreduce.a', submitted by ranks [0, 1], never by ranks [2]" in line, line
    assert "rank 2 waits for allreduce 'allreduce.b', submitted by ranks [2], never by ranks [0, 1]" in line, line


def test_a_process_set_member_that_waits_elsewhere_is_a_deadlock(hvdrun):
    job = hvdrun(3, PRELUDE + """
pair = hvd.add_process_set([0, 1])
if r == 0:
    deadlocked(hvd.allreduce, np.ones(2), name="pair", process_set=pair)
else:
    deadlocked(hvd.broadcast, np.ones(2), 1, name="all")
print("OK")
""", env=dict(STALL, HOROVOD_DYNAMIC_PROCESS_SETS="1"), timeout=60)
    assert_ok(job, 3)
    line = stalled_line(job, 0)
    assert "rank 0 waits for allreduce 'allreduce.pair' (process set 1), submitted by ranks [0], never by ranks [1]" \
        in line, line
    assert "rank 1 waits for broadcast 'broadcast.all', submitted by ranks [1, 2], never by ranks [0]" in line, line


def test_a_busy_rank_is_not_a_deadlock(hvdrun):
    started = time.monotonic()
    job = hvdrun(2, PRELUDE + """
if r == 1:
    time.sleep(5)   # longer than the stall check time: busy, not blocked
hvd.barrier()
assert float(hvd.allreduce(np.ones(1), op=hvd.Sum)[0]) == 2.0
print("OK")
""", env=STALL, timeout=60)
    assert_ok(job, 2)
    assert time.monotonic() - started >= 5
    assert "deadlock" not in job.stdout + job.stderr, job
