"""Real Horovod 0.28.1 workers (horovod.torch over Gloo) launched by hvdrun, unmodified.

Horovod's workers cannot send hvdrun's per-job rendezvous token. On a local job hvdrun's server serves
them anyway when they run as hvdrun's own user (it asks the kernel who owns the other end of each
loopback connection), so `hvdrun -np N -H localhost:N python3 train.py` works with no extra option.

Needs a Horovod build: HVD_HOROVOD_PYTHONPATH names its egg directory (docs/horovod_peer.md shows how to
build one). Without it every test here is skipped, saying so. HVD_BUILD_DIR names the build tree holding
hvdrun (set by ctest).
"""

import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

HOROVOD = os.environ.get("HVD_HOROVOD_PYTHONPATH", "")
BUILD_DIR = Path(os.environ.get("HVD_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
HVDRUN = BUILD_DIR / "hvdrun"
PYTHON = "/usr/bin/python3"

pytestmark = pytest.mark.skipif(
    not HOROVOD,
    reason="HVD_HOROVOD_PYTHONPATH is not set: no Horovod build to run as workers "
    "(docs/horovod_peer.md builds Horovod 0.28.1 and names the egg directory to set it to)",
)

# Each rank checks Horovod's own results against values it computes itself, then prints OK.
WORKER = textwrap.dedent(
    """
    import os, sys
    import torch
    import horovod
    import horovod.torch as hvd

    expected_root = os.environ["EXPECT_HOROVOD_UNDER"]
    assert os.path.realpath(horovod.__file__).startswith(os.path.realpath(expected_root)), horovod.__file__
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    assert size == int(os.environ["HOROVOD_SIZE"]) and rank == int(os.environ["HOROVOD_RANK"])
    assert hvd.local_rank() == rank and hvd.local_size() == size

    # allreduce: sum and Horovod's default, the average.
    summed = hvd.allreduce(torch.full((4,), float(rank + 1)), op=hvd.Sum, name="sum")
    assert torch.equal(summed, torch.full((4,), float(size * (size + 1) // 2))), summed
    averaged = hvd.allreduce(torch.arange(6, dtype=torch.float64) * (rank + 1), name="avg")
    assert torch.allclose(averaged, torch.arange(6, dtype=torch.float64) * (size + 1) / 2), averaged

    # allgather: rank r contributes r + 1 rows holding r; the result is every rank's rows in rank order.
    gathered = hvd.allgather(torch.full((rank + 1, 3), rank, dtype=torch.int32), name="gather")
    want = torch.cat([torch.full((r + 1, 3), r, dtype=torch.int32) for r in range(size)])
    assert torch.equal(gathered, want), gathered

    # broadcast from the last rank.
    root = size - 1
    sent = torch.tensor([rank * 10.0, -1.0, 7.5])
    got = hvd.broadcast(sent, root_rank=root, name="bcast")
    assert torch.equal(got, torch.tensor([root * 10.0, -1.0, 7.5])), got

    print("sum", summed.tolist(), "gathered rows", gathered.shape[0], flush=True)
    hvd.shutdown()
    print("OK", flush=True)
    """
)


def run_job(np, *flags, env=None, prefix=(), timeout=180):
    full_env = dict(os.environ)
    # Only the Horovod build: nothing else named horovod may shadow it.
    full_env["PYTHONPATH"] = HOROVOD
    full_env["EXPECT_HOROVOD_UNDER"] = HOROVOD
    full_env.pop("HVD_NO_RENDEZVOUS_TOKEN", None)
    if env:
        full_env.update(env)
    cmd = [str(HVDRUN), "-np", str(np), "-H", f"localhost:{np}", *flags, *prefix, PYTHON, "-c", WORKER]
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)


def rank_lines(completed, rank):
    return [m.group(1) for m in re.finditer(rf"^\[{rank}\]<stdout>:(.*)$", completed.stdout, re.M)]


def describe(completed):
    return f"exit {completed.returncode}\n--- stdout\n{completed.stdout}\n--- stderr\n{completed.stderr}"


def test_horovod_build_is_usable():
    egg = Path(HOROVOD)
    assert (egg / "horovod" / "torch").is_dir(), f"HVD_HOROVOD_PYTHONPATH={HOROVOD} holds no horovod/torch"
    out = subprocess.run(
        [PYTHON, "-c", "import horovod.torch as hvd; print(hvd.gloo_built(), hvd.mpi_built())"],
        env={**os.environ, "PYTHONPATH": HOROVOD}, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "False"], out.stderr


@pytest.mark.parametrize("np", [2, 3])
def test_local_job_needs_no_option(np):
    job = run_job(np)
    assert job.returncode == 0, describe(job)
    total = float(np * (np + 1) // 2)
    for r in range(np):
        lines = rank_lines(job, r)
        assert lines and lines[-1] == "OK", describe(job)
        assert f"sum [{total}, {total}, {total}, {total}] gathered rows {np * (np + 1) // 2}" in lines, describe(job)
    # Nothing was refused: no Horovod retry warnings, nothing for hvdrun to explain.
    assert "HTTP response not OK" not in job.stderr, describe(job)
    assert "hvdrun:" not in job.stderr, describe(job)


def test_no_rendezvous_token_also_works():
    job = run_job(2, "--no-rendezvous-token")
    assert job.returncode == 0, describe(job)
    assert all(rank_lines(job, r)[-1:] == ["OK"] for r in range(2)), describe(job)


@pytest.mark.skipif(os.geteuid() != 0, reason="running workers as another user (setpriv) needs root")
def test_workers_of_another_user_are_refused_and_hvdrun_says_why():
    # The same unmodified workers, run as nobody: the server refuses them (403), hvdrun explains in one
    # line, and Horovod aborts after its retries, which ends the job.
    job = run_job(2, "--termination-grace-seconds", "1",
                  prefix=("setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"),
                  env={"HOME": "/tmp"})
    assert job.returncode != 0, describe(job)
    warnings = [l for l in job.stderr.splitlines() if l.startswith("hvdrun: warning:")]
    assert len(warnings) == 1, describe(job)
    assert "a process of another user (uid 65534)" in warnings[0]
    assert "--no-rendezvous-token" in warnings[0]
    assert "HTTP response not OK, got 403" in job.stderr, describe(job)
