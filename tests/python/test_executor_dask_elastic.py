"""hvd.Executor's elastic mode on a real Dask cluster (dask_lab.py: `dask scheduler` and Dask worker processes
without nannies, every host a network namespace of its own): the cluster's worker processes are the discovery,
each rank lives in one of them (hvd.executor.dask_agent, through hvdrun's --launcher-agent), and a run trained
under hvd.elastic.run grows when Dask workers join the cluster and shrinks when they leave, retired or killed,
without losing its state. Skips with the reason where network namespaces cannot be made (not root)."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from dask_lab import DaskLab, unavailable
from proc_table import cmdline, environ, pids

distributed = pytest.importorskip("distributed")
import cloudpickle  # noqa: E402  (a dependency of distributed)

from hvd.executor import Executor, send  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def lab():
    why = unavailable()
    if why is not None:
        pytest.skip(f"no Dask lab: {why}")
    with DaskLab(hosts=2, workers_per_host=1, nanny=False) as lab:
        yield lab


@pytest.fixture
def client(lab):
    c = distributed.Client(lab.scheduler_address, timeout=20, set_as_default=False)
    yield c
    c.close(timeout=10)


def train_until(stop_file):
    """Commits a step every 50 ms under hvd.elastic.run until stop_file exists (rank 0 decides, for all);
    every step records the job's size and sends (size, step) to the driver.

    A step saves, then sends, then checks for host updates (state.commit() split in two): commit() saves and
    may then raise HostsUpdatedInterrupt, which would keep a size in the ranks' state that the driver was
    never sent (a round of 3 during the growth to 4, seen 1 run in 3). So the driver is sent exactly what
    was saved."""
    import torch
    import hvd.torch as ht

    ht.init()
    state = ht.elastic.TorchState(step=0, sizes=[])

    @ht.elastic.run
    def train(state):
        while True:
            size = int(ht.allreduce(torch.tensor([1]), op=ht.Sum, name="size").item())
            stop = int(ht.broadcast(torch.tensor([int(os.path.exists(stop_file))]), 0, name="stop").item())
            if stop:
                return ht.rank(), ht.size(), state.step, list(state.sizes)
            if not state.sizes or state.sizes[-1] != size:
                state.sizes.append(size)
            state.step += 1
            state.save()
            send((size, state.step))
            state.check_host_updates()
            time.sleep(0.05)

    return train(state)


class Run:
    """ex.run(train_until) in a thread, with the sizes the driver was sent."""

    def __init__(self, ex, stop_file):
        self.sizes = []
        self.result = self.error = None
        self.stop_file = stop_file
        self.thread = threading.Thread(target=self._run, args=(ex,), daemon=True)
        self.thread.start()

    def _run(self, ex):
        try:
            self.result = ex.run(train_until, args=(str(self.stop_file),), callbacks=[self._report])
        except BaseException as e:  # noqa: B036 -- handed to the test
            self.error = e

    def _report(self, value):
        size, _ = value
        if not self.sizes or self.sizes[-1] != size:
            self.sizes.append(size)

    def wait_for_size(self, size, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.thread.is_alive():
            if self.sizes and self.sizes[-1] == size:
                return
            time.sleep(0.05)
        raise AssertionError(f"the job did not reach {size} ranks within {timeout} s: sizes {self.sizes}, "
                             f"error {self.error!r}")

    def finish(self, timeout):
        self.stop_file.touch()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"run() did not return within {timeout} s of the stop"
        if self.error is not None:
            raise self.error
        return self.result


def grew_then_shrank(sizes):
    """2, then up to 4 step by step, then 3, then 2."""
    return (len(sizes) >= 4 and sizes[0] == 2 and sizes[-3:] == [4, 3, 2]
            and all(a < b for a, b in zip(sizes[:-2], sizes[1:-2])))


def test_elastic_run_grows_with_joining_dask_workers_and_shrinks_as_they_leave(lab, client, tmp_path):
    # Debug log level: should a wait below fail, the captured output holds every rank's init phases, rounds and
    # control-plane path (the two joining workers can start two rounds while the ranks still initialize).
    ex = Executor(min_workers=2, max_workers=4, client=client, elastic_timeout=60,
                  env=dict(os.environ, HOROVOD_LOG_LEVEL="debug"))
    ex.start()
    try:
        run = Run(ex, tmp_path / "stop")
        run.wait_for_size(2, 90)
        first = set(client.scheduler_info()["workers"])
        # Two more Dask workers join host 2: the job grows to 4 ranks.
        lab.start_workers(2, 2, nanny=False)
        run.wait_for_size(4, 90)
        # One of them is retired (Dask's graceful leave), the other killed: the job shrinks to 3, then 2.
        joined = sorted(set(client.scheduler_info()["workers"]) - first)
        assert len(joined) == 2, joined
        client.retire_workers([joined[0]], close_workers=True)
        run.wait_for_size(3, 60)
        pid = client.run(os.getpid, workers=[joined[1]])[joined[1]]
        os.kill(pid, signal.SIGKILL)
        run.wait_for_size(2, 60)
        results = run.finish(60)
    finally:
        ex.shutdown()
    # 2 ranks, growing to 4 as the two workers register (in one round or two), then 3 and 2 as they leave.
    assert grew_then_shrank(run.sizes), run.sizes
    assert [r[0] for r in results] == [0, 1], results
    assert all(r[1] == 2 for r in results), results
    sizes = results[0][3]
    assert all(r[3] == sizes for r in results), results  # every rank holds rank 0's state
    assert sizes == run.sizes, (sizes, run.sizes)
    deadline = time.monotonic() + 10
    while executor_processes(lab) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not executor_processes(lab), "processes left in the lab's hosts after the run"
    assert not hosted_ranks(client)


def hosted_ranks(client):
    """{Dask worker address: what it hosts} for the workers that host a rank."""
    from hvd.executor import dask_engine
    return {a: h for a, h in client.run(lambda: dict(dask_engine._hosted)).items() if h}


def executor_processes(lab, marker=None):
    """(pid, command line) of what an elastic Dask run started and left: the proxies and ranks in the lab's
    hosts, and, given the driver's `marker` variable, hvdrun, its agents and the ranks anywhere."""
    found = [(pid, cmd) for i in (1, 2) for pid, cmd in lab.processes(i)
             if "hvd-proxy" in cmd or "hvd.executor.worker" in cmd]
    for pid in pids() if marker else []:
        env = environ(pid)
        if env is not None and marker.encode() in env:
            found.append((pid, cmdline(pid)))
    return found


DRIVER = """
import sys, time, distributed
sys.path.insert(0, {tests!r})
import test_executor_dask_elastic as t
from hvd.executor import Executor
client = distributed.Client({scheduler!r}, timeout=20, set_as_default=False)
ex = Executor(min_workers=2, client=client, elastic_timeout=60)
ex.start()
def report(value):
    print("running", value, flush=True)
ex.run(t.train_until, args=({stop!r},), callbacks=[report])
"""


def test_a_killed_driver_ends_an_elastic_dask_run_and_frees_the_workers(lab, client, tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(tests=os.path.dirname(os.path.abspath(__file__)),
                                    scheduler=lab.scheduler_address, stop=str(tmp_path / "stop")))
    marker = f"HVD_TEST_DRIVER={os.getpid()}-{time.monotonic_ns()}"
    # TMPDIR: the executor's files, which a driver killed with SIGKILL cannot remove, stay in this test's folder.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), HVD_TEST_DRIVER=marker.split("=")[1],
               TMPDIR=str(tmp_path))

    driver = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              env=env, text=True)
    try:
        line = driver.stdout.readline()
        assert line.startswith("running"), f"the driver said {line!r}"
        assert len(hosted_ranks(client)) == 2
        driver.kill()
        driver.wait(10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (executor_processes(lab, marker) or hosted_ranks(client)):
            time.sleep(0.1)
        assert not executor_processes(lab, marker), executor_processes(lab, marker)
        assert not hosted_ranks(client), hosted_ranks(client)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def test_bad_elastic_dask_arguments_are_refused_before_anything_starts(lab, client):
    with pytest.raises(ValueError, match=r"discovery_script='/bin/true' with client=: the Dask cluster's workers "
                                         r"are the discovery"):
        Executor(min_workers=2, client=client, discovery_script="/bin/true")
    with pytest.raises(TypeError, match=r"client must be a distributed.Client, got str"):
        Executor(min_workers=2, client="tcp://10.0.0.1:8786")
    with pytest.raises(ValueError, match=r"hosts='h1:2' / hostfile=None: the hosts come from the client"):
        Executor(min_workers=2, client=client, hosts="h1:2")
