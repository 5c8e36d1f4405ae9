"""hvdrun on a real Slurm cluster (tests/slurm/slurm_lab.py: slurmctld, one slurmd per network namespace,
munge): hvdrun inside sbatch allocations over several nodes through the Slurm launcher, workers started by
srun against an hvd-rendezvous daemon, scancel and SIGKILL of hvdrun mid-job, exit codes, bad allocations."""

import os
import re

import pytest

from slurm_lab import BUILD, SlurmLab, hvd_env, unavailable

SOURCE = os.environ.get("HVD_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(__file__))))

why = unavailable() or (None if BUILD else "HVD_BUILD_DIR is not set")
pytestmark = pytest.mark.skipif(why is not None, reason=f"no Slurm lab: {why}")


@pytest.fixture(scope="module")
def lab():
    with SlurmLab(nodes=3, cpus=4) as lab:
        yield lab


PATTERN = r"hvd-proxy|scenario_worker|train_linreg|hvdrun"


def leftovers(lab, pattern=PATTERN):
    return lab.leftovers(pattern)


def wait_clean(lab, timeout=15):
    return lab.wait_clean(PATTERN, timeout)


def run_example(lab, script, command):
    """examples/slurm/<script> as a batch job on 2 nodes x 2 tasks; its output, once the job COMPLETED and the
    script's last line said `<command> exit 0`."""
    job = lab.sbatch(["--nodes=2", "--ntasks-per-node=2"],
                     f"{SOURCE}/examples/slurm/{script}; echo \"{command} exit $?\"", env=hvd_env())
    assert lab.wait(job) == "COMPLETED", lab.output(job)
    out = lab.output(job)
    assert f"{command} exit 0" in out, out
    return out


def test_hvdrun_in_an_allocation_runs_the_demo_over_two_nodes(lab):
    out = run_example(lab, "hvdrun.sbatch", "hvdrun")
    assert re.search(r"hvdrun: 4 ranks on node1:2,node2:2 from the Slurm allocation \d+ "
                     r"\(SLURM_JOB_NODELIST=node\[1-2\], SLURM_TASKS_PER_NODE=2\(x2\)\); launcher slurm", out), out
    for rank, node in ((0, "node1"), (1, "node1"), (2, "node2"), (3, "node2")):
        assert f"starting rank {rank} on {node} (slurm)" in out, out
    # train_linreg's rank 0 reports the fitted model; every rank took part in its allreduces.
    assert "[0]<stdout>:parameters identical on all 4 ranks" in out, out
    assert "srun: error" not in out, out
    assert not any(wait_clean(lab).values())


def test_srun_workers_with_an_hvd_rendezvous_daemon(lab):
    out = run_example(lab, "srun.sbatch", "script")
    assert "parameters identical on all 4 ranks" in out, out
    assert not any(wait_clean(lab).values())


def test_srun_workers_without_a_rendezvous_address_fail_naming_the_variable(lab):
    # Slurm says 2 tasks; without HVD_RENDEZVOUS a task must not run alone as a 1-rank job.
    job = lab.sbatch(["--nodes=1", "--ntasks=2"],
                     f"srun {BUILD}/examples/hello_c; echo \"srun exit $?\"", env=hvd_env())
    lab.wait(job)
    out = lab.output(job)
    assert "srun exit 0" not in out, out
    assert "HVD_RENDEZVOUS" in out and "SLURM_PROCID" in out, out
    assert "sum of ranks" not in out, out


def test_uneven_allocation_and_output_tags(lab):
    # 3 tasks: 2 on node1, 1 on node2 (SLURM_TASKS_PER_NODE=2,1); -np defaults to the task count.
    job = lab.sbatch(["--nodes=2", "--ntasks=3", "--ntasks-per-node=2"],
                     "hvdrun sh -c 'echo rank $HOROVOD_RANK of $HOROVOD_SIZE on $(hostname) local "
                     "$HOROVOD_LOCAL_RANK/$HOROVOD_LOCAL_SIZE cross $HOROVOD_CROSS_RANK/$HOROVOD_CROSS_SIZE'; "
                     "echo \"hvdrun exit $?\"", env=hvd_env())
    assert lab.wait(job) == "COMPLETED", lab.output(job)
    out = lab.output(job)
    assert "hvdrun exit 0" in out, out
    assert "[0]<stdout>:rank 0 of 3 on node1 local 0/2 cross 0/2" in out, out
    assert "[1]<stdout>:rank 1 of 3 on node1 local 1/2 cross 0/1" in out, out
    assert "[2]<stdout>:rank 2 of 3 on node2 local 0/1 cross 1/2" in out, out


def test_a_failing_rank_gives_its_exit_code(lab):
    job = lab.sbatch(["--nodes=2", "--ntasks-per-node=1"],
                     "hvdrun sh -c 'if [ $HOROVOD_RANK = 1 ]; then echo failing >&2; exit 3; fi; sleep 30'; "
                     "echo \"hvdrun exit $?\"", env=hvd_env())
    assert lab.wait(job) in ("COMPLETED", "FAILED"), lab.output(job)
    out = lab.output(job)
    assert "hvdrun exit 3" in out, out
    assert "[1]<stderr>:failing" in out, out
    assert not any(wait_clean(lab).values())


def test_scancel_mid_job_leaves_nothing_on_any_node(lab):
    worker = f"{BUILD}/tests/runtime/scenario_worker"
    job = lab.sbatch(["--nodes=3", "--ntasks-per-node=2"], f"hvdrun {worker} forever", env=hvd_env())
    lab.wait_for_output(job, "[5]<stdout>:rank 5: running")
    assert all(leftovers(lab, "scenario_worker")[i] for i in (1, 2, 3)), leftovers(lab)
    lab.run(["scancel", job])
    lab.wait(job)
    left = wait_clean(lab)
    assert not any(left.values()), left


def test_sigkill_of_hvdrun_leaves_nothing_on_any_node(lab):
    worker = f"{BUILD}/tests/runtime/scenario_worker"
    job = lab.sbatch(["--nodes=2", "--ntasks-per-node=2"],
                     f"out=$(mktemp); hvdrun {worker} forever >$out 2>&1 & pid=$!\n"
                     "until grep -q '\\[3\\]<stdout>:rank 3: running' $out; do sleep 0.1; done\n"
                     "kill -9 $pid; wait $pid; echo \"hvdrun killed $?\"; rm -f $out; sleep 20", env=hvd_env())
    lab.wait_for_output(job, "hvdrun killed 137")
    left = wait_clean(lab)
    assert not any(left.values()), left
    lab.run(["scancel", job])
    lab.wait(job)


def test_bad_allocations_are_one_line_errors_with_exit_2(lab):
    script = "\n".join([
        "hvdrun -np 5 true 2>err1; echo \"more ranks $?\"; cat err1",
        "PATH=" + BUILD + ":/usr/bin/nonexistent hvdrun --launcher slurm true 2>err2; echo \"no srun $?\"; cat err2",
        "SLURM_JOB_NODELIST='node[1-' hvdrun true 2>err3; echo \"bad nodelist $?\"; cat err3",
        "hvdrun --dry-run true 2>err4; echo \"dry run $?\"; cat err4",
        "rm -f err1 err2 err3 err4",
    ])
    job = lab.sbatch(["--nodes=2", "--ntasks-per-node=2", f"--chdir={lab.dir}"], script, env=hvd_env())
    assert lab.wait(job) == "COMPLETED", lab.output(job)
    out = lab.output(job)
    assert "more ranks 2" in out, out
    assert re.search(r"hvdrun: error: Requested more processes \(5\) than there are available slots \(4\) in the "
                     r"Slurm allocation \d+ \(SLURM_JOB_NODELIST=node\[1-2\]", out), out
    assert "no srun 2" in out, out
    assert "hvdrun: error: 'srun' not found in PATH" in out, out
    # The dry run's stdout is one line per rank; the line on the allocation is on its stderr.
    assert re.search(r"\nrank 0 on node1 \(slurm\): env [^\n]*\n(rank [12] on node[12] \(slurm\): env [^\n]*\n){2}"
                     r"rank 3 on node2 \(slurm\): env [^\n]*\ndry run 0\n"
                     r"hvdrun: 4 ranks on node1:2,node2:2 from the Slurm allocation \d+ .*; launcher slurm\n", out), out
    assert "bad nodelist 2" in out, out
    assert "hvdrun: error: SLURM_JOB_NODELIST: unterminated '[' in \"node[1-\"" in out, out
