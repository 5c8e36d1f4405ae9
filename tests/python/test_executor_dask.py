"""hvd.Executor on a real Dask cluster (dask_lab.py: `dask scheduler` and two hosts with two `dask worker`
processes each, every host a network namespace of its own, workers with nannies and resources CPU=2): ranks
placed host by host in the Dask worker processes, collectives over shared memory within a host and TCP across,
stateful execute, a raising rank, a killed Dask worker, a SIGKILLed driver, bad inputs, and Dask's own overhead
next to the executor's. Skips with the reason where network namespaces cannot be made (not root)."""

import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import threading
import time
import timeit

import pytest

from conftest import PACKAGE_DIR, PYTHON
from dask_lab import DaskLab, unavailable
from executor_common import Accumulator, alive
from executor_common import allreduce_for as _allreduce_for
from executor_common import noop as _noop
from proc_table import cmdline

distributed = pytest.importorskip("distributed")
import cloudpickle  # noqa: E402  (a dependency of distributed)

from hvd.executor import Executor, ExecutorError, ExecutorSettings, WorkerError  # noqa: E402
from hvd.executor.dask_engine import DaskEngine  # noqa: E402

# The Dask workers cannot import the test modules: their functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(sys.modules["executor_common"])


@pytest.fixture(scope="module")
def lab():
    why = unavailable()
    if why is not None:
        pytest.skip(f"no Dask lab: {why}")
    with DaskLab(hosts=2, workers_per_host=2, resources="CPU=2") as lab:
        yield lab


@pytest.fixture(scope="module")
def client(lab):
    c = distributed.Client(lab.scheduler_address, timeout=20, set_as_default=False)
    yield c
    c.close(timeout=10)


@pytest.fixture
def cluster(lab, client):
    """The lab with its 4 workers up and no rank left on them from an earlier test."""
    lab.wait_for_workers(4)
    wait_until(lambda: not any(ranks_on_workers(client).values()), 15, "the Dask workers to host no rank")
    return lab


# ----- functions that run on the Dask workers

def _worker_state(dask_worker):
    """A Dask worker's rank threads, whether hvd is initialized there, its HOROVOD_RANK and actors."""
    basics = sys.modules.get("hvd.common.basics")
    return {"threads": [t.name for t in threading.enumerate() if t.name.startswith("hvd-executor-rank-")],
            "initialized": bool(basics and basics.is_initialized()),
            "rank_env": os.environ.get("HOROVOD_RANK"),
            "actors": len(dask_worker.state.actors)}


def _identity():
    import numpy as np

    import hvd.numpy as hn
    hn.init()
    total = hn.allreduce(np.array([float(hn.rank() + 1)]), op=hn.Sum)
    with open("/proc/self/maps") as f:
        shared_memory = any("memfd:hvd:" in line for line in f)
    return {"rank": hn.rank(), "size": hn.size(), "local_rank": hn.local_rank(), "local_size": hn.local_size(),
            "cross_rank": hn.cross_rank(), "cross_size": hn.cross_size(), "host": os.environ["HOROVOD_HOSTNAME"],
            "pid": os.getpid(), "total": float(total[0]), "shared_memory": shared_memory,
            "thread": threading.current_thread().name}


def _fail_on(bad_rank):
    import hvd.numpy as hn
    hn.init()
    if hn.rank() == bad_rank:
        raise ValueError(f"boom on rank {hn.rank()}")
    return hn.rank()


# ----- helpers

def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"waited {timeout} s for {what}")


def ranks_on_workers(client):
    """{worker address: its rank threads} (a worker that does not answer counts as hosting nothing)."""
    states = client.run(_worker_state, on_error="return", callback_timeout=10)
    return {address: state["threads"] for address, state in states.items() if isinstance(state, dict)}


def children(pid):
    found = set()
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found |= {int(p) for p in f.read().split()}
    except OSError:
        pass
    return found


# ----- tests

def test_run_places_ranks_host_by_host_and_allreduces_across_hosts(cluster, client):
    host1, host2 = cluster.address(1), cluster.address(2)
    before = {1: cluster.worker_pids(1), 2: cluster.worker_pids(2)}
    ex = Executor(num_workers=4, client=client, cpus_per_worker=2)
    ex.start()
    try:
        first = ex.run(_identity)
        assert [r["rank"] for r in first] == [0, 1, 2, 3]
        assert {r["size"] for r in first} == {4}
        assert [r["total"] for r in first] == [10.0] * 4
        assert [r["host"] for r in first] == [host1, host1, host2, host2]
        assert [(r["local_rank"], r["local_size"]) for r in first] == [(0, 2), (1, 2), (0, 2), (1, 2)]
        assert [(r["cross_rank"], r["cross_size"]) for r in first] == [(0, 2), (0, 2), (1, 2), (1, 2)]
        # The ranks live in the Dask worker processes themselves, each in a thread of its own ...
        assert sorted(r["pid"] for r in first[:2]) == before[1]
        assert sorted(r["pid"] for r in first[2:]) == before[2]
        assert [r["thread"] for r in first] == [f"hvd-executor-rank-{r}" for r in range(4)]
        # ... and the two ranks of a host share memory, as under hvdrun.
        assert all(r["shared_memory"] for r in first), first
        second = ex.run(_identity)
        assert [r["pid"] for r in second] == [r["pid"] for r in first]
        assert {address: len(threads) for address, threads in ranks_on_workers(client).items()} == \
            dict.fromkeys(client.scheduler_info()["workers"], 1)
    finally:
        ex.shutdown()
    # A shutdown leaves the workers as they were: no rank thread, hvd shut down, variables and actors gone.
    states = client.run(_worker_state, callback_timeout=10)
    assert sorted(states) == sorted(client.scheduler_info()["workers"])
    for address, state in states.items():
        assert state == {"threads": [], "initialized": False, "rank_env": None, "actors": 0}, (address, state)
    assert (cluster.worker_pids(1), cluster.worker_pids(2)) == (before[1], before[2])


def test_execute_keeps_each_ranks_instance(cluster, client):
    with Executor(num_workers=4, client=client) as ex:
        ex.start(executable_cls=Accumulator, executable_args=[100.0])
        assert ex.execute(lambda w: w.step()) == [104.0] * 4
        assert ex.execute(lambda w: w.step()) == [108.0] * 4
        assert ex.execute(lambda w: (w.rank, w.steps, w.value)) == [(r, 2, 108.0) for r in range(4)]
        assert ex.execute_single(lambda w: (w.rank, w.value)) == (0, 108.0)


def test_a_raising_rank_is_a_worker_error_and_the_executor_stays_usable(cluster, client):
    with Executor(num_workers=4, client=client) as ex:
        ex.start()
        with pytest.raises(WorkerError) as info:
            ex.run(_fail_on, args=(2,))
        error = info.value
        assert (error.rank, error.type_name, error.message) == (2, "ValueError", "boom on rank 2")
        assert 'raise ValueError(f"boom on rank {hn.rank()}")' in error.traceback
        assert isinstance(error.cause, ValueError)
        assert ex.run(_fail_on, args=(-1,)) == [0, 1, 2, 3]
        assert [r["total"] for r in ex.run(_identity)] == [10.0] * 4


def test_a_worker_process_hosts_one_rank_at_a_time(cluster, client):
    with Executor(num_workers=4, client=client) as ex:
        ex.start()
        started = time.monotonic()
        with pytest.raises(ValueError) as info:
            Executor(num_workers=1, client=client)
        assert time.monotonic() - started < 5
        assert "num_workers=1" in str(info.value) and "4 host ranks of another Executor" in str(info.value)
        assert ex.run(_fail_on, args=(-1,)) == [0, 1, 2, 3]
    # Once the first one shut down, its workers are free again.
    with Executor(num_workers=2, client=client) as ex:
        ex.start()
        assert [(r["host"], r["local_rank"]) for r in ex.run(_identity)] == \
            [(cluster.address(1), 0), (cluster.address(1), 1)]


def test_bad_inputs_are_refused_before_anything_starts(cluster, client):
    before = children(os.getpid())
    started = time.monotonic()
    with pytest.raises(TypeError, match=r"client must be a distributed.Client, got str: 'tcp://10\."):
        Executor(num_workers=2, client=cluster.scheduler_address)
    with pytest.raises(TypeError, match=r"client=42: expected a distributed.Client, got int"):
        DaskEngine(42)
    with pytest.raises(ValueError, match=r"num_workers=5: the Dask cluster at tcp://.* has 4 worker processes, "
                                         r"4 of them eligible"):
        Executor(num_workers=5, client=client)
    with pytest.raises(ValueError, match=r"num_workers=2: .* 0 of them eligible \(cpus_per_worker=3, "
                                         r"gpus_per_worker=0\): 4 declare CPU=2 < cpus_per_worker=3"):
        Executor(num_workers=2, client=client, cpus_per_worker=3)
    with pytest.raises(ValueError, match=r"4 declare GPU=0 < gpus_per_worker=1"):
        Executor(num_workers=1, client=client, use_gpu=True, gpus_per_worker=1)
    with pytest.raises(ValueError, match=r"num_workers=0"):
        DaskEngine(client, num_workers=0)
    with pytest.raises(ValueError, match=r"output='/nonexistent/dir/x.log': the folder /nonexistent/dir does not "):
        Executor(num_workers=1, client=client, output="/nonexistent/dir/x.log")
    with pytest.raises(ValueError, match=r"launcher='ssh' with client=: Dask places the ranks itself"):
        Executor(num_workers=1, client=client, launcher="ssh")
    closed = distributed.Client(cluster.scheduler_address, timeout=20, set_as_default=False)
    closed.close()
    with pytest.raises(ValueError, match=r"client=<Client: No scheduler connected>: the Dask client is closed"):
        Executor(num_workers=1, client=closed)
    assert time.monotonic() - started < 10
    # No rendezvous daemon (or anything else) was started, and no worker hosts a rank.
    assert children(os.getpid()) == before
    assert not any(ranks_on_workers(client).values())


def test_a_worker_that_cannot_import_hvd_is_named_and_skipped(cluster, client):
    extra = cluster.start_workers(2, 1, nanny=False, with_hvd=False)
    try:
        cluster.wait_for_workers(5)
        with pytest.raises(ValueError) as info:
            Executor(num_workers=5, client=client)
        text = str(info.value)
        assert "num_workers=5: the Dask cluster at tcp://" in text and "has 5 worker processes, 4 of them eligible" \
            in text, text
        assert f"1 cannot import hvd (ModuleNotFoundError: No module named 'hvd'; start them with {PACKAGE_DIR} " \
            f"or wherever hvd is on their PYTHONPATH) (tcp://{cluster.address(2)}:" in text, text
        # The four workers that import hvd still host four ranks.
        with Executor(num_workers=4, client=client) as ex:
            ex.start()
            assert [r["host"] for r in ex.run(_identity)] == [cluster.address(1)] * 2 + [cluster.address(2)] * 2
    finally:
        for proc in extra:
            proc.kill()
            proc.wait()


def test_a_killed_dask_worker_fails_the_executor_naming_its_rank(cluster, client):
    ex = Executor(num_workers=4, client=client, settings=ExecutorSettings(timeout_s=5))
    ex.start()
    try:
        pids = [r["pid"] for r in ex.run(_identity)]
        futures = ex.run_remote(_allreduce_for, args=(60,))
        time.sleep(0.5)
        os.kill(pids[1], signal.SIGKILL)
        killed = time.monotonic()
        with pytest.raises(ExecutorError) as info:
            futures[1].result(timeout=10)
        assert time.monotonic() - killed < 2
        text = str(info.value)
        assert f"rank 1 (pid {pids[1]} on {cluster.address(1)})" in text, text
        assert "rank 1's Dask worker tcp://" in text and "left the cluster" in text, text
        with pytest.raises(ExecutorError):
            ex.run(_noop)
    finally:
        ex.shutdown()
    # The other ranks lost their peer: their threads end and hvd shuts down in their workers.
    wait_until(lambda: not any(ranks_on_workers(client).values()), 10, "the surviving ranks' threads to end")
    # The nanny restarted the killed worker: a new process at a new address, and the cluster is whole again.
    cluster.wait_for_workers(4)
    assert pids[1] not in cluster.worker_pids(1) and len(cluster.worker_pids(1)) == 2
    with Executor(num_workers=4, client=client) as ex:
        ex.start()
        again = ex.run(_identity)
        assert [r["total"] for r in again] == [10.0] * 4
        # Host 1's ranks: the survivor and the restarted worker; host 2's: the same processes as before.
        assert sorted(r["pid"] for r in again[:2]) == cluster.worker_pids(1) and pids[0] in cluster.worker_pids(1)
        assert sorted(r["pid"] for r in again[2:]) == sorted(pids[2:])


DRIVER = """
import json, os, sys, time
sys.path.insert(0, {package!r})
import distributed
from hvd.executor import Executor

def identity():
    import hvd.numpy as hn
    hn.init()
    return os.getpid()

client = distributed.Client({scheduler!r}, timeout=20)
ex = Executor(num_workers=4, client=client)
ex.start()
print(json.dumps(ex.run(identity)), flush=True)
time.sleep(600)
"""


def first_line(driver, timeout):
    """The first line a driver subprocess prints, waited for up to timeout s."""
    line = []
    reader = threading.Thread(target=lambda: line.append(driver.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    assert line and line[0].strip(), f"the driver printed nothing within {timeout} s: {driver.poll()}"
    return line[0]


def test_a_killed_driver_ends_the_ranks_and_its_rendezvous_daemon(cluster, client, tmp_path):
    shm_before = set(os.listdir("/dev/shm"))
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(DRIVER.format(package=str(PACKAGE_DIR), scheduler=cluster.scheduler_address)))
    driver = subprocess.Popen([PYTHON, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = json.loads(first_line(driver, 60))
        assert sorted(pids) == sorted(cluster.worker_pids(1) + cluster.worker_pids(2))
        daemons = [p for p in children(driver.pid) if "hvd-rendezvous" in cmdline(p)]
        assert len(daemons) == 1, [cmdline(p) for p in children(driver.pid)]
        states = client.run(_worker_state, callback_timeout=10)
        assert all(s["initialized"] and len(s["threads"]) == 1 for s in states.values()), states
        driver.kill()
        killed = time.monotonic()
        driver.wait(10)

        def ended():
            states = client.run(_worker_state, on_error="return", callback_timeout=10)
            return not alive(daemons[0]) and all(
                isinstance(s, dict) and s["threads"] == [] and not s["initialized"] and s["rank_env"] is None
                for s in states.values())

        wait_until(ended, 5, "the ranks' threads to end, hvd to shut down and the rendezvous daemon to exit")
        assert time.monotonic() - killed < 5
        # The scheduler dropped the dead client's actors too.
        wait_until(lambda: all(s["actors"] == 0 for s in client.run(_worker_state, callback_timeout=10).values()),
                   10, "the dead driver's actors to be released")
        assert set(os.listdir("/dev/shm")) - shm_before == set()
        assert len(client.scheduler_info()["workers"]) == 4
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


# Every rank marks the start of its 600 s call with a file named after its pid in {busy!r}.
BUSY_DRIVER = DRIVER.replace(
    "time.sleep(600)",
    "ex.run(lambda: (open(os.path.join({busy!r}, str(os.getpid())), 'w').close(), time.sleep(600)))")


def test_a_driver_killed_mid_call_ends_the_busy_ranks_worker_processes(cluster, client, tmp_path):
    # A thread cannot be stopped: the Dask worker process of a rank whose driver vanished mid-call ends, and the
    # lab's nannies start fresh ones.
    script = tmp_path / "busy_driver.py"
    busy = tmp_path / "busy"
    busy.mkdir()
    script.write_text(textwrap.dedent(BUSY_DRIVER.format(package=str(PACKAGE_DIR), busy=str(busy),
                                                         scheduler=cluster.scheduler_address)))
    driver = subprocess.Popen([PYTHON, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = json.loads(first_line(driver, 60))
        # Killed only once the second call (600 s of sleep) runs on every rank: an idle rank just leaves.
        wait_until(lambda: sorted(int(p) for p in os.listdir(busy)) == sorted(pids), 30,
                   "every rank to start its 600 s call")
        doomed = {address for address, pid in client.run(os.getpid, callback_timeout=10).items() if pid in pids}
        assert len(doomed) == len(pids), (doomed, pids)
        driver.kill()
        killed = time.monotonic()
        driver.wait(10)
        wait_until(lambda: not any(alive(p) for p in pids), 5, "the busy ranks' Dask worker processes to end")
        assert time.monotonic() - killed < 5
        # The nannies replace them: the cluster is whole again, without any rank. Counting 4 workers is not enough:
        # the scheduler can still list an ended worker for a while, and a call to it waits for its timeout.
        def whole():
            workers = set(client.scheduler_info()["workers"])
            return len(workers) == 4 and not workers & doomed

        wait_until(whole, 60, "the nannies to restart the workers and the scheduler to forget the ended ones")
        # A fresh worker answers once its start-up is done (slow on a loaded machine): the wait is generous.
        fresh = client.run(_worker_state, callback_timeout=60)
        assert all(s["threads"] == [] and s["rank_env"] is None for s in fresh.values()), fresh
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def test_overhead_of_dask_and_of_the_executor(cluster, client, capsys):
    def median_ms(call, count=30):
        call()
        return statistics.median(timeit.repeat(call, setup="gc.enable()", number=1, repeat=count)) * 1e3

    submit = median_ms(lambda: client.submit(_noop, pure=False).result(timeout=10))
    with Executor(num_workers=4, client=client) as ex:
        ex.start()
        assert ex.run(_noop) == [None] * 4
        run = median_ms(lambda: ex.run(_noop))
    with capsys.disabled():
        print(f"\nDask overhead: client.submit(noop).result() median {submit:.2f} ms; "
              f"Executor.run(noop) on 4 Dask-hosted ranks median {run:.2f} ms")
    assert submit > 0 and run > 0


def test_a_local_cluster_of_processes_hosts_ranks_over_loopback(tmp_path):
    # No namespaces needed: a LocalCluster's worker processes on this machine (they inherit this sys.path).
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  local_directory=str(tmp_path)) \
            as cluster, distributed.Client(cluster, set_as_default=False) as client:
        with Executor(num_workers=2, client=client) as ex:
            ex.start()
            ranks = ex.run(_identity)
        assert [(r["rank"], r["local_rank"], r["local_size"], r["total"]) for r in ranks] == \
            [(0, 0, 2, 3.0), (1, 1, 2, 3.0)]
        assert {r["host"] for r in ranks} == {"127.0.0.1"} and all(r["shared_memory"] for r in ranks)
        assert sorted(r["pid"] for r in ranks) == sorted(client.run(os.getpid).values())


def test_workers_that_share_one_process_host_one_rank(tmp_path):
    # A LocalCluster of threads: both workers live in this process, with one os.environ between them.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None,
                                  local_directory=str(tmp_path)) \
            as cluster, distributed.Client(cluster, set_as_default=False) as client:
        with pytest.raises(ValueError, match=r"num_workers=2: .* has 2 worker processes, 1 of them eligible .*"
                                             r"1 share their process with another Dask worker"):
            Executor(num_workers=2, client=client)
