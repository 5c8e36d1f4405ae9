"""hvd.tune beyond one driver on localhost: a search whose trials run on a real Dask cluster (dask_lab.py: two
hosts of two worker processes, each a network namespace), and one search shared by two drivers through a real
PostgreSQL server (postgres_lab.py), each trial run by exactly one of them. Skips with the reason where the lab
cannot run (not root, no Dask or PostgreSQL)."""

import os
import subprocess
import sys
import time

import pytest

optuna = pytest.importorskip("optuna")
distributed = pytest.importorskip("distributed")
import cloudpickle  # noqa: E402

import hvd.tune as tune  # noqa: E402
from dask_lab import DaskLab  # noqa: E402
from dask_lab import unavailable as dask_unavailable  # noqa: E402
from hvd.tune.trial import TERMINATED  # noqa: E402
from postgres_lab import PostgresLab  # noqa: E402
from postgres_lab import unavailable as postgres_unavailable  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def where_am_i(config):
    """Reports loss = (x - 2)^2 and which Dask worker process each rank ran in."""
    import socket

    import numpy as np

    import hvd.numpy as hn

    hn.init()
    print(f"x={config['x']} on rank {hn.rank()}", flush=True)
    sys.stdout.write("a line in ")
    sys.stdout.write("two writes\n")
    print(f"warning from rank {hn.rank()}", file=sys.stderr)
    loss = float(hn.allreduce(np.array([(config["x"] - 2.0) ** 2]), op=hn.Average)[0])
    time.sleep(0.5)
    tune.report(loss=loss, host=os.environ["HOROVOD_HOSTNAME"], pid=os.getpid(), size=hn.size(),
                name=socket.gethostname())


def test_a_search_on_a_dask_cluster_runs_two_trials_at_once_on_its_four_worker_processes(tmp_path):
    why = dask_unavailable()
    if why is not None:
        pytest.skip(f"no Dask lab: {why}")
    with DaskLab(hosts=2, workers_per_host=2) as lab:
        client = distributed.Client(lab.scheduler_address, timeout=20, set_as_default=False)
        try:
            analysis = tune.run(where_am_i, {"x": tune.grid_search([0.0, 1.0, 2.0, 3.0])}, metric="loss",
                                workers_per_trial=2, client=client, storage_path=str(tmp_path), name="dask")
        finally:
            client.close(timeout=10)
    trials = analysis.trials
    assert [t.status for t in trials] == [TERMINATED] * 4, [(t.status, t.error) for t in trials]
    assert analysis.best_config == {"x": 2.0}
    assert all(t.last("size") == 2 for t in trials)
    edges = sorted([(t.started, 1) for t in trials] + [(t.ended, -1) for t in trials])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    assert most == 2, most   # 4 worker processes, 2-rank trials
    # What the ranks printed is in their trial's output.log, tagged by rank, as on every other pool.
    for t in trials:
        lines = set(open(os.path.join(t.directory, "output.log")).read().splitlines())
        for rank in (0, 1):
            assert {f"[{rank}]<stdout>:x={t.config['x']} on rank {rank}", f"[{rank}]<stdout>:a line in two writes",
                    f"[{rank}]<stderr>:warning from rank {rank}"} <= lines, (t.trial_id, lines)


SHARED = """
import glob, json, os, sys, time
sys.path.insert(0, {tests!r})
import numpy as np
import hvd.tune as tune

def slow(config):
    import hvd.numpy as hn
    hn.init()
    if hn.rank() == 0:
        with open(os.path.join({dir!r}, "ran.%d.%s" % (config["x"], {who!r})), "w") as f:
            f.write("x")
        # No trial of this driver ends before the other driver runs one, so that both take trials whatever
        # their start times: a driver that started seconds late could otherwise find every trial taken.
        deadline = time.monotonic() + 60
        while not glob.glob(os.path.join({dir!r}, "ran.*.%s" % {other!r})):
            assert time.monotonic() < deadline, "the other driver ran no trial within 60 s"
            time.sleep(0.01)
    hn.barrier()
    time.sleep(0.6)
    tune.report(loss=float(hn.allreduce(np.array([float(config["x"])]), op=hn.Sum)[0]))

a = tune.run(slow, {{"x": tune.grid_search(list(range(8)))}}, metric="loss", workers_per_trial=2,
             hosts="localhost:2", storage={url!r}, storage_path={results!r}, name="shared", verbose=False)
print("ran", sorted(t.config["x"] for t in a.trials if t.status == "TERMINATED"), flush=True)
"""


def test_two_drivers_share_one_search_through_postgresql_and_run_each_trial_once(tmp_path):
    why = postgres_unavailable()
    if why is not None:
        pytest.skip(f"no PostgreSQL lab: {why}")
    tests = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    with PostgresLab() as pg:
        drivers = []
        for who in ("a", "b"):
            script = tmp_path / f"driver_{who}.py"
            other = "b" if who == "a" else "a"
            script.write_text(SHARED.format(tests=tests, dir=str(tmp_path), who=who, other=other, url=pg.url,
                                            results=str(tmp_path / f"results_{who}")))
            drivers.append(subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True, env=env))
        outputs = [d.communicate(timeout=180)[0] for d in drivers]
        assert all(d.returncode == 0 for d in drivers), outputs
        study = optuna.load_study(study_name="shared", storage=pg.url)
        complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    ran = sorted(name for name in os.listdir(tmp_path) if name.startswith("ran."))
    xs = sorted(int(name.split(".")[1]) for name in ran)
    assert xs == list(range(8)), ran                      # every trial exactly once, over both drivers
    assert {name.split(".")[2] for name in ran} == {"a", "b"}, ran   # both drivers ran trials
    assert sorted(t.user_attrs["index"] for t in complete) == list(range(8))
