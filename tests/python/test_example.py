"""examples/python/train.py at np 2 through hvdrun: the loss falls, and every rank ends bit-identical to rank 0."""

import os
import re
import subprocess
from pathlib import Path

from conftest import HVDRUN, PACKAGE_DIR, PYTHON, Job

SOURCE_DIR = Path(os.environ.get("HVD_SOURCE_DIR", Path(__file__).resolve().parents[2]))
TRAIN = SOURCE_DIR / "examples" / "python" / "train.py"


def test_train_example(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR))
    completed = subprocess.run([str(HVDRUN), "-np", "2", "-H", "localhost:2", PYTHON, str(TRAIN), "--epochs", "6"],
                               env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    job = Job(completed)
    assert job.returncode == 0, job

    epochs = [re.fullmatch(r"epoch (\d+): loss (\d+\.\d+)", line) for line in job.rank_output(0)[:-1]]
    assert all(epochs) and [int(m.group(1)) for m in epochs] == list(range(1, 7)), job
    losses = [float(m.group(2)) for m in epochs]
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < losses[0] / 5, losses
    assert job.rank_output(1)[:-1] == [], job  # only rank 0 reports the epochs

    finals = []
    for rank in (0, 1):
        m = re.fullmatch(rf"rank {rank} of 2: final loss (\d+\.\d+), (\d+) parameters bit-identical to rank 0's",
                         job.rank_output(rank)[-1])
        assert m, job
        finals.append(float(m.group(1)))
    assert finals == [losses[-1], losses[-1]], (finals, losses)
