"""hvd.Executor and hvd.tune inside a Slurm allocation of the test cluster (tests/slurm/slurm_lab.py): the driver runs in the
batch script, hvdrun plans the ranks from the allocation and starts them on both nodes through srun, and every
rank connects back to the driver across the nodes' network namespaces."""

import os
import re

import pytest

from slurm_lab import BUILD, SlurmLab, hvd_env, unavailable


why = unavailable() or (None if BUILD else "HVD_BUILD_DIR is not set")
pytestmark = pytest.mark.skipif(why is not None, reason=f"no Slurm lab: {why}")

_DRIVER = """
import os, socket, sys, time
sys.path.insert(0, {package!r})
import numpy as np
from hvd.executor import Executor, ExecutorError

def where(offset):
    import hvd.numpy as hn
    hn.init()
    total = int(hn.allreduce(np.array([hn.rank() + offset]), op=hn.Sum)[0])
    return hn.rank(), hn.local_rank(), os.environ["HOROVOD_HOSTNAME"], socket.gethostname(), os.getpid(), total

ex = Executor()   # inside the allocation: SLURM_NTASKS ranks on its nodes
print("num_workers", ex.num_workers, flush=True)
ex.start()
first = ex.run(where, args=(0,))
second = ex.run(where, args=(10,))
for row in first:
    print("rank {{}} local {{}} host {{}} uname {{}} pid {{}} total {{}}".format(*row), flush=True)
print("totals", [r[5] for r in first], [r[5] for r in second], flush=True)
print("same pids", [r[4] for r in first] == [r[4] for r in second], flush=True)
if {kill}:
    try:
        ex.run(lambda: os.kill(os.getpid(), 9) if os.environ["HOROVOD_RANK"] == "3" else time.sleep(60))
    except ExecutorError as e:
        print("executor error:", str(e).splitlines()[0], flush=True)
ex.shutdown()
print("driver done", flush=True)
"""


@pytest.fixture(scope="module")
def lab():
    with SlurmLab(nodes=2, cpus=4) as lab:
        yield lab


PATTERN = r"hvd-proxy|hvd\.executor\.worker|hvdrun"


def submit(lab, kill):
    script = os.path.join(lab.dir, f"driver_{int(kill)}.py")
    with open(script, "w") as f:
        f.write(_DRIVER.format(package=os.path.join(BUILD, "python"), kill=kill))
    job = lab.sbatch(["--nodes=2", "--ntasks-per-node=2"], f"/usr/bin/python3 {script}; echo \"driver exit $?\"",
                     env=hvd_env())
    assert lab.wait(job, timeout=120) == "COMPLETED", lab.output(job)
    return lab.output(job)


def test_executor_ranks_on_both_nodes_of_the_allocation(lab):
    out = submit(lab, kill=False)
    assert "num_workers 4" in out, out
    assert "driver exit 0" in out and "driver done" in out, out
    rows = re.findall(r"^rank (\d) local (\d) host (\S+) uname (\S+) pid \d+ total (\d+)$", out, re.M)
    assert sorted(rows) == [("0", "0", "node1", "node1", "6"), ("1", "1", "node1", "node1", "6"),
                            ("2", "0", "node2", "node2", "6"), ("3", "1", "node2", "node2", "6")], out
    assert "totals [6, 6, 6, 6] [46, 46, 46, 46]" in out, out
    assert "same pids True" in out, out
    assert not any(lab.wait_clean(PATTERN).values())


def test_a_rank_killed_on_the_remote_node_is_an_executor_error(lab):
    out = submit(lab, kill=True)
    assert "driver exit 0" in out and "driver done" in out, out
    m = re.search(r"executor error: (.*)", out)
    # hvdrun's account ("rank 3 on node2 (pid N) ...") or the driver's ("rank 3 (pid N on node2) closed ...",
    # when no account came in time) names the rank that died.
    assert m and re.search(r"rank 3 (on node2 \(pid \d+\)|\(pid \d+ on node2\))", m.group(1)), out
    assert not any(lab.wait_clean(PATTERN).values())


_TUNE = """
import os, socket, sys, time
sys.path.insert(0, {package!r})
import numpy as np
import hvd.tune as tune

def train(config):
    import hvd.numpy as hn
    hn.init()
    loss = float(hn.allreduce(np.array([(config["x"] - 1.0) ** 2]), op=hn.Average)[0])
    time.sleep(1.0)
    nodes = hn.allgather(np.array([int(socket.gethostname()[len("node"):])]))  # the lab's nodes are node1, node2
    tune.report(loss=loss, hosts=",".join(f"node{{n}}" for n in sorted(set(nodes.tolist()))))

a = tune.run(train, {{"x": tune.grid_search([0.0, 1.0, 2.0, 3.0])}}, metric="loss", workers_per_trial=2,
             nodes_per_trial={nodes}, storage_path={results!r}, name="slurm{nodes}", verbose=False)
for t in a.trials:
    print("trial", t.config["x"], t.status, t.last("hosts"), round(t.started, 2), round(t.ended, 2), flush=True)
print("best", a.best_config, flush=True)
"""


def tune_in_allocation(lab, nodes):
    script = os.path.join(lab.dir, f"tune_{nodes}.py")
    with open(script, "w") as f:
        f.write(_TUNE.format(package=os.path.join(BUILD, "python"), nodes=nodes,
                             results=os.path.join(lab.dir, "tune_results")))
    job = lab.sbatch(["--nodes=2", "--ntasks-per-node=2"], f"/usr/bin/python3 {script}; echo \"driver exit $?\"",
                     env=hvd_env())
    assert lab.wait(job, timeout=180) == "COMPLETED", lab.output(job)
    out = lab.output(job)
    assert "driver exit 0" in out and "best {'x': 1.0}" in out, out
    rows = re.findall(r"^trial (\S+) (\S+) (\S+) (\S+) (\S+)$", out, re.M)
    assert len(rows) == 4 and all(r[1] == "TERMINATED" for r in rows), out
    return rows


def test_tune_trials_on_disjoint_nodes_of_the_allocation(lab):
    # nodes_per_trial=1: each 2-rank trial owns one node, two trials at once (one per node).
    rows = tune_in_allocation(lab, 1)
    assert {r[2] for r in rows} == {"node1", "node2"}, rows
    spans = sorted((float(r[3]), float(r[4])) for r in rows)
    assert any(a[1] > b[0] for a, b in zip(spans, spans[1:])), spans   # two trials overlapped
    # nodes_per_trial=2: each trial spreads its 2 ranks over both nodes, one trial at a time.
    rows = tune_in_allocation(lab, 2)
    assert {r[2] for r in rows} == {"node1,node2"}, rows
    assert not any(lab.wait_clean(PATTERN).values())
