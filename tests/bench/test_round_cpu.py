"""bench/compare's RoundCpu, with real processes: CPU time burnt during a round by a process that is not the
harness's counts as other processes' (the load that slows busy-polling peers), CPU time of a job the harness ran
and reaped does not."""
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True
COMPARE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "compare")


def load_compare():
    loader = importlib.machinery.SourceFileLoader("compare", COMPARE)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("compare", loader))
    loader.exec_module(module)
    return module


def spin(seconds):
    return ["timeout", str(seconds), "sh", "-c", "while :; do :; done"]


def test_a_reaped_job_is_the_harness_own_and_a_foreign_process_is_another():
    compare = load_compare()
    ncpu = os.cpu_count() or 1
    # The spinner burns one CPU of ncpu for the window: 1 / ncpu of the machine if it were counted. Measured
    # against the machine's own load in an equal idle window first, so that another tenant's steady load (a
    # build beside the test) is not taken for the harness's job; a spinner counted or missed still moves the
    # figure by twice the margin.
    margin = 0.5 / ncpu
    cpu = compare.RoundCpu()
    time.sleep(2)
    idle = cpu.finish()

    cpu = compare.RoundCpu()
    subprocess.run(spin(2))  # the harness's own job, reaped: not another process's load
    own = cpu.finish()
    assert own["others"] < idle["others"] + margin, (own, idle)

    # setsid -f: the spinner is not the harness's child, as another session's build would not be.
    subprocess.run(["setsid", "-f"] + spin(3), check=True)
    cpu = compare.RoundCpu()
    time.sleep(2)
    foreign = cpu.finish()
    assert foreign["others"] > idle["others"] + margin, (foreign, idle)
    assert 0.0 <= foreign["steal"] <= 1.0, foreign
