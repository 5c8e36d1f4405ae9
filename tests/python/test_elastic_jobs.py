"""Elastic training's Python layer on real jobs through hvdrun: in static jobs (np 2 and 3) sync gives every
rank rank 0's state, check_host_updates reports nothing, errors propagate (a lost peer as PeerLostError);
examples/python/elastic_torch_train.py trains and prints its documented lines, and in an elastic job
recovers from a crashed worker. hvdrun's own elastic tests (tests/launcher) cover the driver."""

import os
import re
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import HVDRUN, PACKAGE_DIR, PYTHON, Job, assert_ok
from proc_table import environ, pids

SOURCE_DIR = Path(os.environ.get("HVD_SOURCE_DIR", Path(__file__).resolve().parents[2]))
EXAMPLE = SOURCE_DIR / "examples" / "python" / "elastic_torch_train.py"

SYNC_WORKER = r"""
import copy

import torch

import hvd.torch as hvd
from hvd.common.elastic import ObjectState, elastic_enabled, elastic_round
from hvd.torch.functions import broadcast_object

hvd.init()
R, N = hvd.rank(), hvd.size()
assert not elastic_enabled() and elastic_round() == -1


def rank0_value(obj):
    # rank 0's obj, fetched by allgather_object (independent of the broadcasts under test).
    return hvd.allgather_object(obj, name="check")[0]


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def every_rank_equals_rank0(obj):
    mine = same(obj, rank0_value(obj))
    return int(hvd.allreduce(torch.tensor([int(not mine)]), op=hvd.Sum, name="differing").item()) == 0


# Every rank starts with its own model, optimizer state (Adam after R + 1 steps), LR scheduler,
# sampler position and plain attributes.
torch.manual_seed(100 + R)
model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01 * (R + 1))
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
for _ in range(R + 1):
    optimizer.zero_grad()
    model(torch.randn(8, 3)).sum().backward()
    optimizer.step()
    scheduler.step()
sampler = hvd.elastic.ElasticSampler(range(50), seed=4)
sampler.set_epoch(R)
sampler.record_batch(0, 2 + R)
state = hvd.elastic.TorchState(model, optimizer, scheduler=scheduler, sampler=sampler, epoch=R,
                               meta={"rank": R, "losses": [float(R)] * (R + 1)})
assert not every_rank_equals_rank0(model.state_dict())

calls = []


@hvd.elastic.run
def train(state, tag):
    calls.append(tag)
    everything = (state.model.state_dict(), state.optimizer.state_dict(), state.scheduler.state_dict(),
                  state.sampler.state_dict(), state.epoch, state.meta)
    assert every_rank_equals_rank0(everything)
    assert state.epoch == 0 and state.meta == {"rank": 0, "losses": [0.0]}
    assert state.sampler.state_dict() == {"epoch": 0, "processed_num": 2 * N}
    # Every rank holds its part of what rank 0 had left of its epoch: no sample twice, none lost.
    parts = hvd.allgather_object(list(state.sampler))
    remaining = [i for part in parts for i in part]
    assert set(remaining) == set(state.sampler.remaining_indices) and len(state.sampler.remaining_indices) == 50 - 2 * N
    # commit = save + check for host updates: nothing to report in a job that is not elastic.
    assert state.check_host_updates() is None
    state.commit()
    return tag * 2


assert train(state, 21) == 42 and calls == [21]
state.restore()  # back to the commit made inside train: rank 0's values
assert every_rank_equals_rank0(model.state_dict()) and state.epoch == 0

# ObjectState with hvd.torch's broadcast_object: sync sends rank 0's current values.
plain = ObjectState(lambda obj: broadcast_object(obj, 0, name="plain"), hvd.rank, step=R, table={"r": [R]})
plain.step += 10
plain.sync()
assert (plain.step, plain.table) == (10, {"r": [0]})
hvd.barrier()
print("OK")
"""

ERRORS_WORKER = r"""
import torch

import hvd.torch as hvd
from hvd.common.exceptions import HorovodInternalError, MismatchError

hvd.init()
R = hvd.rank()
state = hvd.elastic.TorchState(epoch=0)
calls = []


@hvd.elastic.run
def mismatched(state):
    calls.append("mismatched")
    hvd.allreduce(torch.zeros(R + 1), name="shape_differs")


try:
    mismatched(state)
except MismatchError as e:
    assert "shape_differs" in str(e), e
else:
    raise AssertionError("no MismatchError")
assert calls == ["mismatched"]  # raised at once: a retry would fail the same way

# The job is still usable; in a job that is not elastic, other failures propagate too (no driver can
# re-form the job), without a restore or a reset.
assert hvd.allreduce(torch.ones(2), name="after").tolist() == [1.0, 1.0]


@hvd.elastic.run
def failing(state):
    calls.append("failing")
    state.epoch = 5
    raise HorovodInternalError("simulated failure")


try:
    failing(state)
except HorovodInternalError as e:
    assert str(e) == "simulated failure"
assert calls == ["mismatched", "failing"] and state.epoch == 5 and hvd.is_initialized()
hvd.barrier()
print("OK")
"""


PEER_LOST_WORKER = r"""
import os

import torch

import hvd.torch as hvd
from hvd.common.exceptions import CommunicationError, HorovodInternalError, PeerLostError

hvd.init()
state = hvd.elastic.TorchState(step=0)


@hvd.elastic.run
def train(state):
    hvd.allreduce(torch.ones(1), name="before")
    if hvd.rank() == 1:
        os._exit(0)  # gone without hvd.shutdown(): a lost peer, not a failed job
    while True:
        hvd.allreduce(torch.ones(1), name=f"step.{state.step}")
        state.step += 1


try:
    train(state)
except PeerLostError as e:
    assert isinstance(e, CommunicationError) and isinstance(e, HorovodInternalError)
    print(f"PeerLostError: {e}")
print("OK")
"""


def test_a_lost_peer_is_peer_lost_error(hvdrun):
    job = hvdrun(2, PEER_LOST_WORKER)
    assert job.returncode == 0, job
    assert job.rank_output(0)[-1] == "OK" and job.rank_output(0)[0].startswith("PeerLostError: "), job


@pytest.mark.parametrize("np", [2, 3])
def test_sync_makes_every_rank_equal_to_rank0(hvdrun, np):
    assert_ok(hvdrun(np, SYNC_WORKER), np)


def test_errors_propagate_in_a_static_job(hvdrun):
    assert_ok(hvdrun(2, ERRORS_WORKER), 2)


START = r"start: rank 0 size (\d+) round (-?\d+) epoch (\d+) batch (\d+)"
RESET = r"reset: rank (\d+) size (\d+) round (-?\d+)"
EPOCH = r"epoch (\d+): loss (\S+) size (\d+)"
FINAL = r"final: size (\d+) round (-?\d+) epochs (\d+) loss (\S+) checksum (\S+) params (\S+)"
VERDICT = r"rank (\d+) of (\d+): parameters (bit-identical to|DIFFERENT from) rank 0's"


def run_example(tmp_path, np, *args, flags=()):
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR))
    completed = subprocess.run([str(HVDRUN), "-np", str(np), "-H", f"localhost:{np}", *flags, PYTHON, str(EXAMPLE),
                                *args], env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    return Job(completed)


def test_example_as_a_static_job(tmp_path):
    job = run_example(tmp_path, 2, "--epochs", "3")
    assert job.returncode == 0, job
    lines = job.rank_output(0)
    assert re.fullmatch(START, lines[0]).groups() == ("2", "-1", "0", "0"), job
    epochs = [re.fullmatch(EPOCH, line) for line in lines[1:4]]
    assert all(epochs), job
    assert [int(m.group(1)) for m in epochs] == [1, 2, 3] and all(m.group(3) == "2" for m in epochs)
    losses = [float(m.group(2)) for m in epochs]
    assert losses[0] > losses[1] > losses[2], losses

    final = re.fullmatch(FINAL, lines[4])
    assert final, job
    size, rnd, done, loss, checksum, params = final.groups()
    assert (size, rnd, done, float(loss)) == ("2", "-1", "3", losses[-1])
    values = [float(v) for v in params.split(",")]
    assert len(values) == 8 * 16 + 16 + 16 + 1  # the example's MLP
    assert abs(sum(values) - float(checksum)) < 1e-6

    for rank in (0, 1):
        verdict = re.fullmatch(VERDICT, job.rank_output(rank)[-1])
        assert verdict and verdict.groups() == (str(rank), "2", "bit-identical to"), job
    assert job.rank_output(1)[:-1] == [], job  # only rank 0 reports progress


def test_example_crash_in_a_static_job_fails_the_job(tmp_path):
    marker = tmp_path / "crashed"
    job = run_example(tmp_path, 2, "--epochs", "2", "--crash-at", "1:0:2", "--crash-marker", str(marker))
    assert job.returncode == 13, job
    assert marker.exists()
    assert "crash: rank 1 epoch 0 batch 2" in job.rank_output(1), job


def worker_pids(marker, slot_index):
    """Live processes started by hvdrun with `marker` ("NAME=VALUE") in their environment for slot index
    `slot_index` (HOROVOD_LOCAL_RANK), leaving out standby processes."""
    found = []
    for pid in pids():
        env = environ(pid)
        if (env is not None and marker.encode() in env and f"HOROVOD_LOCAL_RANK={slot_index}".encode() in env
                and b"HVD_ELASTIC_STANDBY=1" not in env):
            found.append(pid)
    return found


def run_until(cmd, env, cwd, on_line, timeout=180):
    """Runs cmd, calling on_line(line) for each line of its stdout as it comes; returns a Job. A job still
    running after `timeout` seconds is killed (hvdrun's SIGTERM tears its workers down) and the test fails
    with everything it printed."""
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd) as proc:
        out, err = [], []
        timed_out = threading.Event()

        def stop():
            timed_out.set()
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()

        timer = threading.Timer(timeout, stop)
        errors = threading.Thread(target=lambda: err.extend(proc.stderr))  # stderr must not fill its pipe
        timer.start()
        errors.start()
        try:
            for line in proc.stdout:
                out.append(line)
                on_line(line)
            proc.wait()
            errors.join()
        finally:
            timer.cancel()
            proc.kill()
    job = Job(subprocess.CompletedProcess(cmd, proc.returncode, "".join(out), "".join(err)))
    assert not timed_out.is_set(), f"hvdrun still ran after {timeout} s: {job}"
    return job


def test_example_goes_on_after_a_worker_is_sigkilled(tmp_path):
    """A worker is SIGKILLed mid-training. The survivor goes on at the smaller size from the last commit
    (the process started again in the killed one's slot waits on standby and joins at a later commit), and
    the job finishes. Its final parameters are those of an uninterrupted run resumed from the commit where
    the job last re-formed, at the size it finished with, bit for bit."""
    commits = tmp_path / "commits"
    commits.mkdir()
    marker = f"HVD_TEST_MARKER=elastic{os.getpid()}"
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR), HVD_TEST_MARKER=marker.split("=", 1)[1])
    cmd = [str(HVDRUN), "-np", "2", "--min-np", "1", "--max-np", "2", "-H", "localhost:2", PYTHON, str(EXAMPLE),
           "--epochs", "3", "--step-seconds", "0.02", "--save-commits", str(commits)]
    killed = []

    def kill_after_epoch_1(line):
        if not killed and "[0]<stdout>:epoch 1:" in line:
            pids = worker_pids(marker, 1)
            assert len(pids) == 1, pids
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

    job = run_until(cmd, env, tmp_path, kill_after_epoch_1)
    assert job.returncode == 0, job
    assert killed, job
    assert "hvdrun: rank 1 (slot localhost:1, worker 1) on localhost failed with signal 9" in job.stderr, job
    lines = job.rank_output(0)
    starts = [re.fullmatch(START, line).groups() for line in lines if line.startswith("start:")]
    # The first start, then the survivor alone from the last commit (at or after the end of epoch 1), then
    # (if the replacement was ready before the end) both again.
    assert starts[0][0] == "2" and starts[1][0] == "1" and int(starts[1][2]) >= 1, job
    assert len(starts) <= 3 and all(s[0] == "2" for s in starts[2:]), job
    final = re.fullmatch(FINAL, lines[-2])
    assert final and final.group(1) == starts[-1][0] and final.group(3) == "3", job

    size, _, epoch, batch = starts[-1]
    reference = run_example(tmp_path, int(size), "--epochs", "3", "--resume",
                            str(commits / f"commit-e{epoch}-b{batch}.pt"))
    assert reference.returncode == 0, reference
    ref_final = re.fullmatch(FINAL, reference.rank_output(0)[-2])
    assert ref_final and ref_final.group(6) == final.group(6), (job, reference)
    verdicts = [line for n in job.lines for line in job.rank_output(n) if re.fullmatch(VERDICT, line)]
    assert sorted(verdicts) == [f"rank {r} of {size}: parameters bit-identical to rank 0's" for r in range(int(size))], job


def test_example_grows_when_hosts_are_added(tmp_path):
    """One worker trains; once it has finished an epoch, the discovery script offers two more slots. hvdrun
    starts their processes at once on standby; as they become ready, the workers get HostsUpdatedInterrupt
    at their next commit (no restore), the job re-forms, the new workers are synchronized from rank 0 and
    every rank trains on its share of the rest of the epoch, up to 3 ranks."""
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:1\n")
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {hosts}\n")
    script.chmod(0o755)
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR))
    cmd = [str(HVDRUN), "-np", "1", "--min-np", "1", "--max-np", "3", "--host-discovery-script", str(script),
           PYTHON, str(EXAMPLE), "--epochs", "4", "--step-seconds", "0.02"]

    def add_hosts_after_epoch_1(line):
        if "<stdout>:epoch 1:" in line:
            hosts.write_text("localhost:3\n")

    job = run_until(cmd, env, tmp_path, add_hosts_after_epoch_1)
    assert job.returncode == 0, job
    lines = job.rank_output(0)
    starts = [re.fullmatch(START, line).groups() for line in lines if line.startswith("start:")]
    # The new processes join as each becomes ready: one or two re-formations, growing to 3 ranks.
    sizes = [int(s[0]) for s in starts]
    assert sizes[0] == 1 and sizes[-1] == 3 and sizes == sorted(sizes) and len(starts) in (2, 3), job
    # No restore: every later start is at or after the end of epoch 1 (a host update needs no restore).
    assert all(int(s[2]) >= 1 for s in starts[1:]), job
    assert [line for line in lines if line.startswith("reset:")] == [f"reset: rank 0 size {s[0]} round {s[1]}"
                                                                      for s in starts[1:]], job
    final = re.fullmatch(FINAL, lines[-2])
    assert final and final.group(1, 3) == ("3", "4"), job
    verdicts = sorted(line for n in job.lines for line in job.rank_output(n) if re.fullmatch(VERDICT, line))
    assert verdicts == [f"rank {r} of 3: parameters bit-identical to rank 0's" for r in range(3)], job


def test_example_bad_arguments(tmp_path):
    completed = subprocess.run([PYTHON, str(EXAMPLE), "--crash-at", "1:2"], capture_output=True, text=True,
                               timeout=60, env=dict(os.environ, PYTHONPATH=str(PACKAGE_DIR)))
    assert completed.returncode == 2
    assert "--crash-at expects RANK:EPOCH:BATCH (three integers), got '1:2'" in completed.stderr
