"""hvd.Executor on this machine: persistent workers started once by the build tree's hvdrun, driven by calls.

Real processes and sockets throughout: every executor here is an hvdrun job of `python -m hvd.executor.worker`
ranks that connect back to this process. Functions defined in this module reach the workers by reference (the
driver's sys.path travels with the calls), so the workers import this module and keep its globals."""

import os
import pickle
import signal
import socket
import struct
import subprocess
import time

import numpy as np
import pytest

from conftest import PACKAGE_DIR, PYTHON, driver_report
from executor_common import alive, wait_gone
from proc_table import children

import hvd
from hvd.executor import Executor, ExecutorError, ExecutorSettings, HvdrunEngine, WorkerError, send
from hvd.executor.engine import Engine

# Incremented by count_calls in the workers, which import this module once and keep it.
_CALLS = 0


class Boom(Exception):
    """An exception type of this module: it unpickles in the driver as itself."""


def rank_sum_pid(offset):
    import hvd.numpy as hn

    global _CALLS
    _CALLS += 1
    hn.init()
    total = hn.allreduce(np.array([hn.rank() + offset], np.int64), op=hn.Sum)
    return hn.rank(), hn.size(), int(total[0]), os.getpid(), _CALLS


def fail_on(rank_to_fail, message):
    import hvd.numpy as hn

    hn.init()
    if hn.rank() == rank_to_fail:
        raise Boom(message)  # the line the traceback must show
    return hn.rank()


def send_ranks(count):
    rank = int(os.environ["HOROVOD_RANK"])
    for i in range(count):
        send((rank, i))
    return rank


def fail_while_others_reduce():
    import hvd.numpy as hn

    hn.init()
    if hn.rank() == 1:
        raise ValueError("rank 1 leaves the allreduce")
    return hn.allreduce(np.ones(4), name="never_complete")


def kill_rank_1():
    if int(os.environ["HOROVOD_RANK"]) == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


def _raise_on_worker():
    if "HOROVOD_RANK" in os.environ:
        raise ImportError("no such module on the worker")
    return "driver"


class _LoadsOnlyInDriver:
    def __reduce__(self):
        return (_raise_on_worker, ())


class Trainer:
    """The stateful pattern: a model kept by each worker, trained by repeated execute() calls."""

    def __init__(self, lr):
        import torch

        torch.manual_seed(0)
        self.model = torch.nn.Linear(3, 1)
        self.lr = lr
        self.optimizer = None

    def train(self):
        import torch
        import hvd.torch as ht

        ht.init()
        if self.optimizer is None:
            self.optimizer = ht.DistributedOptimizer(torch.optim.SGD(self.model.parameters(), lr=self.lr),
                                                     named_parameters=self.model.named_parameters())
        x, y = batch(ht.rank())
        self.optimizer.zero_grad()
        loss = ((self.model(x) - y) ** 2).mean()
        loss.backward()
        self.optimizer.step()
        return float(loss)

    def get_weights(self):
        return [p.detach().numpy().copy() for p in self.model.parameters()]


def batch(rank):
    import torch

    x = torch.arange(12, dtype=torch.float32).reshape(4, 3) / 10 + rank
    y = x.sum(dim=1, keepdim=True) * 0.5 - rank
    return x, y


def expected_weights(ranks, steps, lr):
    """The same training in one process: the gradient averaged over the ranks' batches."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    for _ in range(steps):
        grads = []
        for rank in range(ranks):
            model.zero_grad()
            x, y = batch(rank)
            ((model(x) - y) ** 2).mean().backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        with torch.no_grad():
            for i, p in enumerate(model.parameters()):
                p -= lr * sum(g[i] for g in grads) / ranks
    return [p.detach().numpy().copy() for p in model.parameters()]


# ---- helpers -------------------------------------------------------------------------------------------------
def shm_entries():
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


def new_shm(before, pids):
    """Entries of /dev/shm created since `before` that belong to hvd or to one of pids."""
    marks = ["hvd"] + [str(p) for p in pids]
    return [e for e in shm_entries() - before if any(m in e for m in marks)]


def hvdrun_pid(executor):
    return executor._session.engine._proc.pid


@pytest.fixture(scope="module")
def ex3():
    ex = Executor(num_workers=3)
    ex.start()
    yield ex
    ex.shutdown()


# ---- calls on a started executor ------------------------------------------------------------------------------
def test_run_in_rank_order_reuses_the_same_processes(ex3):
    first = ex3.run(rank_sum_pid, args=(10,))
    total = sum(r + 10 for r in range(3))
    assert [r[:3] for r in first] == [(r, 3, total) for r in range(3)]
    pids = [r[3] for r in first]
    assert len(set(pids)) == 3 and os.getpid() not in pids
    hvdrun = hvdrun_pid(ex3)
    kids = set(children(hvdrun))  # the ranks and hvdrun's guardian process
    assert set(pids) <= kids and len(kids) <= 4
    calls0 = [r[4] for r in first]
    for n in range(1, 4):
        again = ex3.run(rank_sum_pid, kwargs={"offset": n})
        assert [r[2] for r in again] == [sum(r + n for r in range(3))] * 3
        assert [r[3] for r in again] == pids, "a call started new processes"
        assert [r[4] for r in again] == [c + n for c in calls0], "module globals did not persist"
    assert set(children(hvdrun)) == kids and hvdrun_pid(ex3) == hvdrun
    assert ex3.num_workers == 3


def test_lambdas_closures_run_remote_and_execute_single(ex3):
    table = np.arange(6.0)
    assert ex3.run(lambda a, b=0: a * 2 + b, args=(3,), kwargs={"b": 1}) == [7, 7, 7]
    futures = ex3.run_remote(lambda: table[int(os.environ["HOROVOD_RANK"])] * 10)
    assert len(futures) == 3
    assert [f.result(timeout=30) for f in futures] == [0.0, 10.0, 20.0]
    assert ex3.execute_single(lambda instance: (instance, os.environ["HOROVOD_RANK"])) == (None, "0")
    assert ex3.execute(lambda instance: instance) == [None, None, None]


def test_large_arguments_and_results(ex3):
    big = np.arange(3_000_000, dtype=np.float64)  # 24 MB each way, per rank
    results = ex3.run(lambda a: a * (1 + int(os.environ["HOROVOD_RANK"])), args=(big,))
    for rank, result in enumerate(results):
        assert np.array_equal(result, big * (rank + 1))


def test_callbacks_get_rank_0s_values_in_order(ex3):
    first, second = [], []
    assert ex3.run(send_ranks, args=(20,), callbacks=[first.append, second.append]) == [0, 1, 2]
    assert first == [(0, i) for i in range(20)]
    assert second == first
    with pytest.raises(RuntimeError, match="outside an executor call"):
        send("from the driver")


def test_a_raising_rank_is_a_worker_error_and_the_executor_stays_usable(ex3):
    pids = [r[3] for r in ex3.run(rank_sum_pid, args=(0,))]
    with pytest.raises(WorkerError) as info:
        ex3.run(fail_on, args=(1, "bad input on rank one"))
    error = info.value
    assert error.rank == 1
    assert error.type_name == f"{__name__}.Boom"
    assert error.message == "bad input on rank one"
    assert "raise Boom(message)  # the line the traceback must show" in error.traceback
    assert "in fail_on" in error.traceback
    assert isinstance(error.cause, Boom) and error.__cause__ is error.cause
    assert "rank 1 raised" in str(error) and "bad input on rank one" in str(error)
    assert "raise Boom(message)" in str(error)
    # Still usable: the same processes answer the next call.
    again = ex3.run(rank_sum_pid, args=(0,))
    assert [r[3] for r in again] == pids
    # Every rank raising: the first failure is reported, the others named.
    with pytest.raises(WorkerError) as info:
        ex3.run(lambda: 1 / 0)
    assert info.value.type_name == "ZeroDivisionError" and len(info.value.others) == 2
    assert [r[3] for r in ex3.run(rank_sum_pid, args=(0,))] == pids


def test_pickling_failures(ex3):
    import threading

    lock = threading.Lock()
    with pytest.raises(ValueError, match="cannot pickle .*test_pickling_failures.<locals>.<lambda>"):
        ex3.run(lambda: lock)
    with pytest.raises(ValueError, match="cannot pickle"):
        ex3.run(rank_sum_pid, args=(lock,))
    with pytest.raises(WorkerError, match="cannot be pickled") as info:
        ex3.run(lambda: threading.Lock())
    assert info.value.rank in (0, 1, 2)
    with pytest.raises(WorkerError, match="cannot unpickle the function on rank") as info:
        ex3.run(lambda x: x, args=(_LoadsOnlyInDriver(),))
    assert info.value.type_name == "ImportError"
    assert ex3.run(lambda: 5) == [5, 5, 5]


def test_stateful_execute_trains_identical_models():
    with Executor(num_workers=2) as ex:
        ex.start(executable_cls=Trainer, executable_args=[0.1])
        losses = [ex.execute(lambda w: w.train()) for _ in range(5)]
        weights = ex.execute(lambda w: w.get_weights())
    assert len(losses) == 5 and all(len(step) == 2 for step in losses)
    assert losses[-1][0] < losses[0][0]
    expected = expected_weights(2, 5, 0.1)
    for rank_weights in weights:
        for got, want in zip(rank_weights, expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got, other in zip(weights[0], weights[1]):
        assert np.array_equal(got, other), "the ranks' models differ"


# ---- failures that end the executor ----------------------------------------------------------------------------
def test_a_rank_failing_while_the_others_block_ends_the_executor():
    ex = Executor(settings=ExecutorSettings(timeout_s=3), num_workers=3)
    ex.start()
    try:
        pids = [r[3] for r in ex.run(rank_sum_pid, args=(0,))]
        t0 = time.monotonic()
        with pytest.raises(ExecutorError) as info:
            ex.run(fail_while_others_reduce)
        elapsed = time.monotonic() - t0
        assert 3 <= elapsed < 3 + 4, elapsed
        text = str(info.value)
        assert "rank 1 raised ValueError: rank 1 leaves the allreduce" in text, text
        assert "rank(s) 0, 2 were still running" in text and "start a new Executor" in text, text
        assert isinstance(info.value.__cause__, WorkerError) and info.value.__cause__.rank == 1
        with pytest.raises(ExecutorError):
            ex.run(lambda: 1)
        assert wait_gone(pids, 10) == []
    finally:
        ex.shutdown()


def test_a_killed_worker_fails_the_call_within_2_s_and_leaves_nothing():
    shm_before = shm_entries()
    ex = Executor(num_workers=3)
    ex.start()
    try:
        pids = [r[3] for r in ex.run(rank_sum_pid, args=(0,))]
        hvdrun = hvdrun_pid(ex)
        t0 = time.monotonic()
        with pytest.raises(ExecutorError) as info:
            ex.run(kill_rank_1)
        elapsed = time.monotonic() - t0
        text = str(info.value)
        assert elapsed < 2.0, (elapsed, text)
        # hvdrun's account names the rank that died; the connection the driver saw close first may be that of
        # a rank hvdrun stopped a moment later, so only the account is certain.
        assert text.startswith(f"hvd.Executor: hvdrun exited with status 137; rank 1 on localhost (pid {pids[1]}) "
                               "was killed by signal 9"), text
        assert "start a new Executor" in text, text
        t1 = time.monotonic()
        with pytest.raises(ExecutorError, match="rank 1"):
            ex.run(lambda: 1)
        assert time.monotonic() - t1 < 0.5
        assert wait_gone(pids + [hvdrun], 10) == []
        assert new_shm(shm_before, pids) == []
        # start() again: fresh workers, usable.
        ex.start()
        again = ex.run(rank_sum_pid, args=(1,))
        assert [r[2] for r in again] == [6, 6, 6]
        assert not set(r[3] for r in again) & set(pids)
    finally:
        ex.shutdown()
    assert wait_gone([r[3] for r in again], 10) == []


_DRIVER = """
import json, os, sys, time
sys.path[:0] = [{package!r}, {tests!r}]
from hvd.executor import Executor
import test_executor

ex = Executor(num_workers=2)
ex.start()
pids = [r[3] for r in ex.run(test_executor.rank_sum_pid, args=(0,))]
print(json.dumps({{"pids": pids, "hvdrun": ex._session.engine._proc.pid}}), flush=True)
try:
    ex.run(time.sleep, args=(60,))
except KeyboardInterrupt:
    print("interrupted", flush=True)
    raise
"""


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_the_driver_interrupted_or_killed_leaves_no_worker(tmp_path, how):
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER.format(package=str(PACKAGE_DIR), tests=os.path.dirname(__file__)))
    shm_before = shm_entries()
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    driver = subprocess.Popen([PYTHON, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=tmp_path)
    import queue
    import threading

    lines = queue.SimpleQueue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in iter(driver.stdout.readline, "")] + [lines.put("")],
                              daemon=True)
    reader.start()
    try:
        info = driver_report(driver, lines, 60)
        pids = info["pids"] + [info["hvdrun"]]
        time.sleep(0.5)  # the sleep call is running on the workers
        assert all(alive(p) for p in pids)
        driver.send_signal(how)
        t0 = time.monotonic()
        assert wait_gone(pids, 5) == [], f"left running {time.monotonic() - t0:.1f} s after the signal"
        code = driver.wait(timeout=15)
        reader.join(5)
        if how == signal.SIGINT:
            rest = []
            while not lines.empty():
                rest.append(lines.get())
            assert "interrupted\n" in rest and code != 0, (code, rest)
            assert "KeyboardInterrupt" in driver.stderr.read()
        else:
            assert code == -signal.SIGKILL
        assert new_shm(shm_before, pids) == []
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


# ---- start and its failures -----------------------------------------------------------------------------------
class _SleepingEngine(Engine):
    """Starts processes that never connect back."""

    def __init__(self):
        self.procs = []

    def start(self, *, num_workers, driver_port, token, env, settings):
        self.procs = [subprocess.Popen(["sleep", "60"]) for _ in range(num_workers)]

    def exit_status(self):
        return None

    def stop(self, timeout):
        for proc in self.procs:
            proc.kill()
            proc.wait()


def test_ranks_that_never_connect_fail_start_within_start_timeout():
    engine = _SleepingEngine()
    ex = Executor(settings=ExecutorSettings(start_timeout_s=1), num_workers=2, engine=engine)
    t0 = time.monotonic()
    with pytest.raises(ExecutorError, match=r"rank\(s\) 0, 1 did not connect back within start_timeout_s=1 s"):
        ex.start()
    assert time.monotonic() - t0 < 4
    assert [p.poll() for p in engine.procs] == [-signal.SIGKILL] * 2
    with pytest.raises(RuntimeError, match="call start"):
        ex.run(lambda: 1)


def test_workers_that_cannot_start_fail_start_with_hvdruns_reason(tmp_path):
    ex = Executor(num_workers=2, executable=str(tmp_path / "no-python"))
    t0 = time.monotonic()
    with pytest.raises(ExecutorError) as info:
        ex.start()
    assert time.monotonic() - t0 < 10
    text = str(info.value)
    assert "ended before rank(s) 0, 1 connected back" in text and "status 127" in text, text


class _StrangerFirst(HvdrunEngine):
    """While the real workers start, connects to the driver as a stranger: a wrong token, then a hello that
    references a function. The driver accepts only once start() returned, so this runs in a thread."""

    def start(self, *, num_workers, driver_port, token, env, settings):
        import threading

        self.answers = []

        def stranger():
            for frame in (pickle.dumps(("hello", "0" * 32, {"rank": 0})),
                          pickle.dumps(("hello", token, {"rank": 0, "f": os.getcwd}))):
                with socket.create_connection(("127.0.0.1", driver_port), timeout=10) as s:
                    s.sendall(struct.pack(">Q", len(frame)) + frame)
                    self.answers.append(s.recv(1))  # b"": the driver closed the connection

        self.stranger = threading.Thread(target=stranger)
        self.stranger.start()
        super().start(num_workers=num_workers, driver_port=driver_port, token=token, env=env, settings=settings)


def test_a_stranger_is_refused_and_the_real_workers_connect(capsys):
    engine = _StrangerFirst(2)
    with Executor(num_workers=2, engine=engine) as ex:
        ex.start()
        assert [r[:2] for r in ex.run(rank_sum_pid, args=(0,))] == [(0, 2), (1, 2)]
    engine.stranger.join(20)
    assert engine.answers == [b"", b""]
    err = capsys.readouterr().err
    assert "hvd.Executor: refused a connection from 127.0.0.1:" in err and "wrong token" in err, err
    assert "may not reference posix.getcwd" in err, err


def test_setup_failure_raises_the_worker_error_and_stops_the_workers():
    ex = Executor(num_workers=2)
    with pytest.raises(WorkerError) as info:
        ex.start(executable_cls=Trainer, executable_args=["not", "enough", "args"])
    assert info.value.type_name == "TypeError"
    with pytest.raises(RuntimeError, match="call start"):
        ex.run(lambda: 1)


def test_shutdown_while_a_call_runs_ends_every_rank_at_once():
    # The driver's stop ends a running call's ranks as it reaches them (exit 0, the job asked for its end), not
    # after the grace the ranks give a call when the driver vanishes (ranks that leave so exit 1).
    from executor_common import allreduce_for

    shm_before = shm_entries()
    ex = Executor(num_workers=2)
    ex.start()
    pids = [r[3] for r in ex.run(rank_sum_pid, args=(0,))]
    engine = ex._session.engine
    futures = ex.run_remote(allreduce_for, args=(60,))
    time.sleep(0.5)  # the ranks are in the call, allreducing
    assert not any(f.done() for f in futures)
    ex.shutdown()
    assert engine._proc.returncode == 0, engine._proc.returncode
    assert wait_gone(pids, 10) == []
    assert new_shm(shm_before, pids) == []
    for f in futures:
        with pytest.raises(ExecutorError, match="shut down"):
            f.result(timeout=0)


def test_start_twice_and_calls_before_start():
    ex = Executor(num_workers=1)
    for call in (lambda: ex.run(len), lambda: ex.run_remote(len), lambda: ex.execute(len),
                 lambda: ex.execute_single(len)):
        with pytest.raises(RuntimeError, match=r"Executor\.\w+: call start\(\) first"):
            call()
    ex.start()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            ex.start()
        assert ex.run(lambda: int(os.environ["HOROVOD_SIZE"])) == [1]
    finally:
        ex.shutdown()
        ex.shutdown()
    with pytest.raises(RuntimeError, match="call start"):
        ex.run(len)


def test_environment_and_settings_reach_the_workers():
    settings = Executor.create_settings(timeout_s=7.5)
    with Executor(settings=settings, num_hosts=1, num_workers_per_host=2, cpus_per_worker=2) as ex:
        ex.start(extra_env_vars={"HVD_TEST_VALUE": "x y"})
        got = ex.run(lambda: (os.environ.get("HVD_TEST_VALUE"), os.environ.get("HOROVOD_GLOO_TIMEOUT_SECONDS"),
                              os.environ.get("OMP_NUM_THREADS"), "HVD_EXECUTOR_TOKEN" in os.environ,
                              os.environ["HOROVOD_LOCAL_RANK"]))
    omp = os.environ.get("OMP_NUM_THREADS", "2")
    assert got == [("x y", "8", omp, False, "0"), ("x y", "8", omp, False, "1")]


def _leave_traces(folder):
    """Registers an atexit function that writes a file, and prints a line with no end and no flush."""
    import atexit
    import sys

    rank = os.environ["HOROVOD_RANK"]
    atexit.register(lambda: open(os.path.join(folder, f"atexit.{rank}"), "w").close())
    sys.stdout.write(f"unflushed from rank {rank}")


def test_a_worker_leaving_after_shutdown_runs_atexit_and_flushes_its_output(tmp_path):
    """The workers end without the interpreter's module teardown (torch's costs 0.3 s), but what a rank left
    behind is done as at a normal exit: its atexit functions run and its buffered output is written."""
    log = tmp_path / "out.log"
    with Executor(num_workers=2, output=str(log)) as ex:
        ex.start()
        ex.run(_leave_traces, args=(str(tmp_path),))
    assert sorted(p.name for p in tmp_path.glob("atexit.*")) == ["atexit.0", "atexit.1"]
    text = log.read_text()
    assert "unflushed from rank 0" in text and "unflushed from rank 1" in text, text


# ---- bad call arguments ---------------------------------------------------------------------------------------
def test_bad_call_arguments_fail_before_sending(ex3):
    import threading

    with pytest.raises(TypeError, match="fn must be callable, got 3"):
        ex3.run(3)
    with pytest.raises(TypeError, match="args must be a tuple or list, got str: 'ab'"):
        ex3.run(len, args="ab")
    with pytest.raises(TypeError, match="kwargs must be a dict"):
        ex3.run(len, kwargs=[1])
    with pytest.raises(TypeError, match="callbacks must be a list of callables"):
        ex3.run(len, args=([],), callbacks=[1])
    ex = Executor(num_workers=1)
    before = children(os.getpid())
    with pytest.raises(ValueError, match="cannot pickle"):
        ex.start(executable_cls=Trainer, executable_args=[threading.Lock()])
    with pytest.raises(TypeError, match="extra_env_vars must map variable names to str, got 'A': 1"):
        ex.start(extra_env_vars={"A": 1})
    assert children(os.getpid()) == before


def test_hvd_executor_is_the_top_level_executor():
    assert hvd.Executor is Executor and hvd.ExecutorSettings is ExecutorSettings
    with pytest.raises(AttributeError):
        hvd.NoSuchThing


# ---- the examples ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("example, expected", [
    ("executor_run.py", r"4 workers answered in rank order: \[\(0, 6\), \(1, 6\), \(2, 6\), \(3, 6\)\]"),
    ("executor_stateful.py", r"2 identical copies: weight \d\.\d{4}, bias \d\.\d{4}"),
])
def test_examples_run_as_they_are(example, expected, tmp_path):
    import re

    path = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "examples", "python", example)
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR))
    completed = subprocess.run([PYTHON, path], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert completed.returncode == 0, completed
    assert re.search(expected, completed.stdout), completed.stdout
    if example == "executor_stateful.py":
        losses = [float(m) for m in re.findall(r"^step \d: loss (\d+\.\d+)$", completed.stdout, re.M)]
        assert len(losses) == 5 and losses[-1] < losses[0], completed.stdout
