"""hvd.run (horovod.run): a Python function on N ranks through hvdrun, results in rank order."""

import os
import re
import warnings

import numpy as np
import pytest

from proc_table import cmdline, pids

import hvd
import hvd.runner


def rank_and_sum(offset, scale=1):
    """Module-level: pickled by reference, so the ranks must import this test module (the driver's
    sys.path travels with the function)."""
    import numpy
    import hvd.numpy as hvdnp

    hvdnp.init()
    total = hvdnp.allreduce(numpy.array([hvdnp.rank() * scale + offset], numpy.int64), op=hvdnp.Sum)
    return hvdnp.rank(), hvdnp.size(), int(total[0])


def _run_task_processes(marker):
    """Pids of live processes whose command line contains marker."""
    return [pid for pid in pids() if marker in cmdline(pid)]


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    """HVD_RUN_TMPDIR pointed at an empty directory, to check that hvd.run leaves nothing behind."""
    d = tmp_path / "runs"
    d.mkdir()
    monkeypatch.setenv("HVD_RUN_TMPDIR", str(d))
    return d


@pytest.mark.parametrize("n", [2, 3])
def test_results_in_rank_order(n, run_dir):
    results = hvd.run(rank_and_sum, args=(10,), kwargs={"scale": 100}, num_proc=n)
    total = sum(r * 100 + 10 for r in range(n))
    assert results == [(r, n, total) for r in range(n)]
    assert list(run_dir.iterdir()) == []
    assert _run_task_processes(str(run_dir)) == []


def test_closure_with_captured_data_and_output(capsys, run_dir):
    table = np.arange(12.0).reshape(3, 4)
    label = "captured"

    def work(row):
        import hvd.numpy as hvdnp

        hvdnp.init()
        print(f"hello from {hvdnp.rank()}")
        mine = table[row + hvdnp.rank()] * hvdnp.size()
        return label, hvdnp.allgather(mine[None, :])

    results = hvd.run(work, args=(1,), num_proc=2)
    assert [r[0] for r in results] == [label, label]
    for _, gathered in results:
        assert np.array_equal(gathered, table[1:3] * 2)
    out = capsys.readouterr().out
    assert "[0]<stdout>:hello from 0" in out and "[1]<stdout>:hello from 1" in out, out
    assert list(run_dir.iterdir()) == []


def test_lambda_and_no_collectives():
    assert hvd.run(lambda a, b: a + b, args=(2,), kwargs={"b": 3}, num_proc=3) == [5, 5, 5]


class Boom(Exception):
    pass


def test_failing_rank_raises_its_error(run_dir):
    def work():
        import hvd.numpy as hvdnp

        hvdnp.init()
        if hvdnp.rank() == 2:
            raise ValueError(f"bad input on rank {hvdnp.rank()}")
        hvdnp.barrier()
        return "unreachable"

    with pytest.raises(RuntimeError) as info:
        hvd.run(work, num_proc=3)
    message = str(info.value)
    assert message.startswith("hvd.run: rank 2 failed with ValueError: bad input on rank 2"), message
    assert "rank 2's traceback:" in message and "in work" in message, message
    assert 'raise ValueError(f"bad input on rank {hvdnp.rank()}")' in message, message
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value.__cause__) == "bad input on rank 2"
    assert list(run_dir.iterdir()) == []
    assert _run_task_processes(str(run_dir)) == []


def test_failing_rank_without_collectives_custom_exception():
    def work(fail_rank):
        rank = int(os.environ["HOROVOD_RANK"])
        if rank == fail_rank:
            raise Boom("custom failure")
        return rank

    with pytest.raises(RuntimeError, match=r"rank 1 failed with test_run.Boom: custom failure") as info:
        hvd.run(work, args=(1,), num_proc=2)
    assert type(info.value.__cause__).__name__ == "Boom"


def test_unpicklable_result_and_exit():
    import threading

    with pytest.raises(RuntimeError, match=r"rank 0 failed with TypeError: the return value of rank 0 cannot "
                                           r"be pickled"):
        hvd.run(lambda: threading.Lock(), num_proc=1)
    with pytest.raises(RuntimeError, match=r"rank 0 failed with SystemExit: 3"):
        hvd.run(lambda: exit(3), num_proc=1)
    with pytest.raises(RuntimeError, match=r"rank\(s\) 0 left no result"):
        hvd.run(lambda: os._exit(4), num_proc=1)

    def explode():
        raise OSError("cannot rebuild here")

    class Rebuilt:
        def __reduce__(self):
            return explode, ()

    with pytest.raises(RuntimeError, match=r"cannot unpickle the return value of rank 0 in this process: "
                                           r"OSError: cannot rebuild here"):
        hvd.run(Rebuilt, num_proc=1)


@pytest.mark.parametrize("kwargs, text", [
    ({"min_np": 2}, "min_np=2: hvd.run runs a fixed number of ranks"),
    ({"max_num_proc": 4}, "max_num_proc=4: hvd.run runs a fixed number of ranks"),
    ({"host_discovery_script": "d.sh"}, "host_discovery_script='d.sh': hvd.run runs a fixed number of ranks"),
    ({"hosts": "localhost:2", "hostfile": "h.txt"}, "hosts='localhost:2' and hostfile='h.txt'"),
    ({"use_gloo": True, "use_mpi": True}, "use_gloo=True and use_mpi=True"),
    ({"use_mpi": True}, "use_mpi=True: hvd runs on Gloo only"),
    ({"num_proc": 0}, "num_proc must be a positive int, got 0"),
    ({"num_proc": 2, "np": 3}, "num_proc=2 and np=3 disagree"),
    ({"args": 5}, "args must be a tuple or list, got int"),
    ({"kwargs": [1]}, "kwargs must be a dict, got list"),
    ({"start_timeout": -1}, "start_timeout must be a positive int, got -1"),
    ({"kwargs": {1: 2}}, "kwargs must be a dict with str keys, got 1"),
    ({"hostfile": "/nonexistent/hosts"}, "hostfile='/nonexistent/hosts' cannot be read"),
    ({"hostfile": 5}, "hostfile must be a path, got 5"),
    ({"num_proc": 2, "hosts": "localhost:1"}, "num_proc=2 is more than the 1 slot(s) of hosts='localhost:1'"),
    ({"hosts": "localhost:0"}, "hosts='localhost:0': 'localhost:0' is not 'host' or 'host:slots'"),
    ({"hosts": "local host:1"}, "'local host:1' is not 'host' or 'host:slots'"),
    ({"hosts": ","}, "hosts=',': '' is not"),
    ({"ssh_identity_file": 5}, "ssh_identity_file must be a path, got 5"),
    ({"output_filename": 5}, "output_filename must be a path, got 5"),
    ({"executable": 5}, "executable must be a path, got 5"),
    ({"network_interfaces": [1, 2]}, "network_interfaces must be a list of interface names, got [1, 2]"),
])
def test_bad_arguments(kwargs, text):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ValueError, match=re.escape(text)):
            hvd.run(len, **kwargs)


def test_not_callable_or_not_picklable():
    import threading

    with pytest.raises(ValueError, match="func must be callable, got int"):
        hvd.run(5)
    with pytest.raises(ValueError, match="func, args and kwargs must be picklable to reach the ranks: "
                                         "TypeError: cannot pickle '_thread.lock' object"):
        hvd.run(print, args=(threading.Lock(),))


def test_np_is_a_deprecated_alias_and_env():
    with pytest.warns(DeprecationWarning, match="np is deprecated"):
        results = hvd.run(lambda: (os.environ["HOROVOD_SIZE"], os.environ.get("HVD_TEST_VALUE")), np=2,
                          env=dict(os.environ, HVD_TEST_VALUE="set"))
    assert results == [("2", "set"), ("2", "set")]


def test_finds_hvdrun_next_to_the_package():
    build = os.environ.get("HVD_BUILD_DIR")
    found = hvd.runner._find_hvdrun()
    assert os.path.basename(found) == "hvdrun" and os.access(found, os.X_OK)
    if build:
        assert os.path.samefile(found, os.path.join(build, "hvdrun"))


def test_a_driver_killed_with_sigkill_leaves_no_job_running(tmp_path):
    """hvdrun gets a parent-death signal: killing the driver (which cannot clean up) stops hvdrun, which stops its
    ranks, as Executor's hvdrun does."""
    import signal
    import subprocess
    import sys
    import time

    marker = f"hvd_run_killed_{os.getpid()}_{time.monotonic_ns()}"
    script = tmp_path / "driver.py"
    script.write_text("import sys, time, hvd\n"
                      f"hvd.run(lambda tag: time.sleep(60), args=({marker!r},), num_proc=2)\n")
    env = dict(os.environ, HVD_RUN_TMPDIR=str(tmp_path), PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    driver = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        job = []
        while time.monotonic() < deadline and len(job) < 3:  # hvdrun and its two ranks, named by their func.pkl
            job = [pid for pid in pids() if pid != driver.pid and str(tmp_path) in cmdline(pid)]
            time.sleep(0.1)
        assert len(job) >= 3, f"the job did not start: {job}"
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and [pid for pid in job if cmdline(pid)]:
            time.sleep(0.1)
        assert not [pid for pid in job if cmdline(pid)], [cmdline(pid) for pid in job if cmdline(pid)]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def test_the_work_folder_of_a_killed_driver_is_removed_by_the_next_run(run_dir):
    """A driver killed with SIGKILL or SIGTERM cannot remove its work folder; the next hvd.run removes the folders
    whose driver is gone, and leaves the others."""
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = run_dir / "hvd-run-stale000"
    stale.mkdir()
    (stale / "driver").write_text(hvd.runner._process_identity(gone.pid) or f"{gone.pid} 1")
    (stale / "func.pkl").write_bytes(b"x")
    reused = run_dir / "hvd-run-reused00"  # this process's pid with another start time: a reused pid
    reused.mkdir()
    (reused / "driver").write_text(f"{os.getpid()} 1")
    alive = run_dir / "hvd-run-alive000"
    alive.mkdir()
    (alive / "driver").write_text(hvd.runner._process_identity(os.getpid()))
    other = run_dir / "hvd-run-nodriver"
    other.mkdir()
    assert hvd.run(lambda: 7, num_proc=1) == [7]
    assert sorted(p.name for p in run_dir.iterdir()) == ["hvd-run-alive000", "hvd-run-nodriver"]


def test_import_hvd_reaches_every_public_subpackage_on_first_use_and_imports_nothing_heavy():
    """`import hvd` then hvd.train / hvd.tune / ... works as in Horovod and Ray, without import hvd itself
    paying for torch, numpy, pandas, optuna or distributed (a fresh interpreter, as a user's script starts)."""
    import subprocess
    import sys

    from conftest import PACKAGE_DIR

    script = (
        "import sys, hvd\n"
        "heavy = [m for m in ('torch', 'numpy', 'pandas', 'optuna', 'distributed') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert hvd.train.Trainer and hvd.tune.run and hvd.Executor and hvd.numpy.allreduce\n"
        "assert {'train', 'tune', 'torch', 'numpy', 'executor', 'compat'} <= set(dir(hvd))\n"
        "try:\n"
        "    hvd.no_such_thing\n"
        "except AttributeError as e:\n"
        "    assert \"'no_such_thing'\" in str(e), e\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
        "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
