"""hvd.Executor's elastic mode on this machine: each run() is an elastic hvdrun job (--min-np/--max-np over -H
localhost slots) whose worker processes each run the function once under hvd.elastic.run; a SIGKILLed worker is
replaced and the run returns the last round's values in rank order."""

import os
import signal
import threading
import time

import pytest

from hvd.executor import Executor, ExecutorError, WorkerError, send
import proc_table
from executor_common import allreduce_for
from test_executor import Trainer, _SleepingEngine


# ---- elastic executors ----------------------------------------------------------------------------------------
def elastic_steps(marker, steps):
    """Trains `steps` committed steps under hvd.elastic.run; the worker with rank 1 SIGKILLs itself at step 3,
    once (marker)."""
    import torch
    import hvd.torch as ht

    ht.init()
    state = ht.elastic.TorchState(step=0, sizes=[])

    @ht.elastic.run
    def train(state):
        while state.step < steps:
            size = int(ht.allreduce(torch.tensor([1]), op=ht.Sum, name="size").item())
            state.sizes.append(size)
            state.step += 1
            if state.step == 3 and ht.rank() == 1 and not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            state.commit()
            send((ht.rank(), state.step))
            time.sleep(0.05)
        return ht.rank(), ht.size(), state.step, list(state.sizes)

    return train(state)


def test_elastic_run_survives_a_killed_worker(tmp_path):
    marker = tmp_path / "killed"
    reports = []
    ex = Executor(min_workers=2, max_workers=3, hosts="localhost:3", elastic_timeout=60)
    assert ex.num_workers == 2
    ex.start()
    try:
        results = ex.run(elastic_steps, args=(str(marker), 12), callbacks=[reports.append])
    finally:
        ex.shutdown()
    assert marker.exists()
    size = results[0][1]
    assert size in (2, 3) and len(results) == size, results
    assert [r[0] for r in results] == list(range(size)), results
    assert all(r[1] == size and r[2] == 12 for r in results), results
    sizes = results[0][3]
    assert all(r[3] == sizes for r in results), results  # every rank holds rank 0's state
    assert len(sizes) == 12 and sizes[0] == 3 and 2 in sizes, sizes  # three workers, then two after the kill
    assert reports and all(rank == 0 for rank, _ in reports) and reports[-1] == (0, 12), reports


def raise_in_training():
    import hvd.torch as ht

    ht.init()
    raise ValueError(f"training failed on rank {ht.rank()}")


def test_elastic_run_where_every_worker_raises_is_a_worker_error():
    ex = Executor(min_workers=2, hosts="localhost:2", elastic_timeout=20)
    ex.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(WorkerError) as info:
            ex.run(raise_in_training)
    finally:
        ex.shutdown()
    assert time.monotonic() - t0 < 30
    assert info.value.type_name == "ValueError" and "training failed on rank" in info.value.message
    assert "in raise_in_training" in info.value.traceback


def allreduce_after_saying_so(seconds):
    """Rank 0 tells the driver it is in the call, then every rank allreduces for seconds."""
    import hvd.numpy as hn

    hn.init()
    send(hn.rank())
    return allreduce_for(seconds)


def test_shutdown_from_another_thread_ends_an_elastic_run_in_progress():
    marker = f"elastic-stop-{os.getpid()}"
    ex = Executor(min_workers=2, hosts="localhost:2", elastic_timeout=60)
    ex.start(extra_env_vars={"HVD_TEST_MARKER": marker})
    in_call = threading.Event()
    outcome = {}

    def run():
        try:
            outcome["value"] = ex.run(allreduce_after_saying_so, args=(60,), callbacks=[lambda _: in_call.set()])
        except Exception as e:  # noqa: BLE001 - the test looks at what it was
            outcome["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    assert in_call.wait(60)
    assert len(workers_with(marker)) >= 2  # the marker finds the job's workers while they run
    ex.shutdown()
    thread.join(30)
    assert not thread.is_alive()  # the call had a minute left
    error = outcome.get("error")
    assert isinstance(error, ExecutorError), outcome
    assert str(error).startswith("hvd.Executor: the executor was shut down while run() ran;"), str(error)
    # shutdown() returned once the job was gone: no worker of it is left.
    assert workers_with(marker) == []


def workers_with(marker):
    entry = f"HVD_TEST_MARKER={marker}".encode()
    return [pid for pid in proc_table.pids() if entry in (proc_table.environ(pid) or [])]


def test_elastic_executor_refuses_stateful_calls(tmp_path):
    ex = Executor(min_workers=1, hosts="localhost:2")
    for call in (lambda: ex.execute(len), lambda: ex.execute_single(len), lambda: ex.run_remote(len)):
        with pytest.raises(ValueError, match="elastic executor .* run\\(\\) only"):
            call()
    with pytest.raises(ValueError, match="executable_cls=Trainer"):
        ex.start(executable_cls=Trainer)
    with pytest.raises(RuntimeError, match="call start"):
        ex.run(len)
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    for kwargs, text in ((dict(min_workers=2), "needs hosts=, hostfile= or discovery_script="),
                         (dict(min_workers=3, hosts="localhost:2"), "min_workers=3 is more than the 2 slot"),
                         (dict(min_workers=1, hosts="localhost:2", cooldown_range=(5, 2)), "(5, 2)"),
                         (dict(min_workers=1, hosts="localhost:2", reset_limit=-1), "reset_limit must be"),
                         (dict(min_workers=1, discovery_script=str(script)), "is not an executable file"),
                         (dict(min_workers=1, discovery_script=str(script), hosts="a:1"), "discovery_script="),
                         (dict(num_workers=1, discovery_script=str(script)), "elastic executors only"),
                         (dict(min_workers=1, engine=_SleepingEngine()), "elastic executors run on hvdrun")):
        with pytest.raises(ValueError) as info:
            Executor(**kwargs)
        assert text in str(info.value), (kwargs, str(info.value))
