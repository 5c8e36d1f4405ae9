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


def marked_line(job, rank, mark="STALLED"):
    """The one line of rank's output that starts with mark."""
    lines = [line for line in job.rank_output(rank) if line.startswith(mark + " ")]
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
        line = marked_line(job, rank)
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
    line = marked_line(job, 2)
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
    line = marked_line(job, 0)
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



SHUTDOWN = dict(STALL, HOROVOD_STALL_SHUTDOWN_TIME_SECONDS="3")

ENDED = PRELUDE + """
from hvd.common.exceptions import HorovodInternalError

def ended(fn, *args, **kwargs):
    # fn must fail (the job was shut down); prints the error's class, the seconds since start and its text.
    try:
        fn(*args, **kwargs)
    except HorovodInternalError as e:
        print("ENDED", type(e).__name__, round(time.monotonic() - T0, 1), str(e), flush=True)
        return
    raise AssertionError(f"{fn.__name__} returned")

T0 = time.monotonic()
"""


def test_a_peer_that_never_submits_ends_every_rank_after_the_stall_shutdown(hvdrun):
    # Rank 1 computes and never submits: not a deadlock (it is not blocked), so the stall shutdown the user set
    # ends the job. Rank 0's allreduce fails naming the tensor, the operation and the missing rank; rank 1's
    # next operation fails at once, saying why.
    job = hvdrun(2, ENDED + """
if r == 0:
    ended(hvd.allreduce, np.ones(2), name="lonely")
else:
    time.sleep(8)   # the check (2 s) and the shutdown (3 s) happen meanwhile
    ended(hvd.allreduce, np.ones(2), name="late")
print("OK")
""", env=SHUTDOWN, timeout=60)
    assert_ok(job, 2)
    line = marked_line(job, 0, "ENDED")
    assert line.startswith("ENDED StalledError"), line
    assert "'allreduce.lonely' (allreduce) submitted by ranks [0]" in line and "missing on ranks [1]" in line, line
    assert float(line.split()[2]) < 8, line  # within the stall settings (2 s + 3 s), with room for a loaded machine
    line = marked_line(job, 1, "ENDED")
    assert "'allreduce.lonely'" in line, line


def test_a_join_that_never_comes_ends_every_rank_after_the_stall_shutdown(hvdrun):
    # Rank 0 has run out of data and joins; rank 1 never joins (and never submits anything).
    job = hvdrun(2, ENDED + """
import hvd.torch as ht  # join is hvd.torch's (Horovod's API has it there)
if r == 0:
    ended(ht.join)
else:
    time.sleep(8)
    ended(ht.join)
print("OK")
""", env=SHUTDOWN, timeout=60)
    assert_ok(job, 2)
    line = marked_line(job, 0, "ENDED")
    assert line.startswith("ENDED StalledError"), line
    assert "join" in line and "missing on ranks [1]" in line, line
    assert float(line.split()[2]) < 8, line


def test_a_mismatch_found_when_the_last_rank_submits_late_fails_every_rank(hvdrun):
    # Rank 1 submits 3 s after rank 0, with another shape: both fail with the mismatch, naming the tensor and
    # the ranks on each side, and the job goes on.
    job = hvdrun(2, PRELUDE + """
from hvd.common.exceptions import MismatchError
if r == 1:
    time.sleep(3)
try:
    hvd.allreduce(np.ones(2 + r), name="late")
    raise AssertionError("the mismatch was not found")
except MismatchError as e:
    print("MISMATCH", str(e), flush=True)
assert float(hvd.allreduce(np.ones(1), op=hvd.Sum)[0]) == 2.0
print("OK")
""", env=STALL, timeout=60)
    assert_ok(job, 2)
    for rank in (0, 1):
        line = [x for x in job.rank_output(rank) if x.startswith("MISMATCH ")]
        assert len(line) == 1 and "'allreduce.late'" in line[0] and "ranks [0]" in line[0] and "ranks [1]" in line[0], job
