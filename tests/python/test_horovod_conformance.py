"""Horovod 0.28.1's own test/parallel/test_torch.py, the whole file as one pytest session under
`hvdrun -np 2 --horovod-compat` (hvd's `horovod` package), when HVD_HOROVOD_SOURCE names a Horovod checkout (at
least `git archive v0.28.1 test/parallel/test_torch.py test/utils`); skips saying why otherwise. Real Horovod with
Gloo on this machine: 105 passed, 10 skipped (GPU). The per-test table: tests/python/horovod_conformance.py."""

import os
import subprocess
import sys

import pytest

from conftest import HVDRUN, PACKAGE_DIR

SOURCE = os.environ.get("HVD_HOROVOD_SOURCE")
HERE = os.path.dirname(os.path.abspath(__file__))


def _why_not():
    if not SOURCE:
        return "HVD_HOROVOD_SOURCE is not set (a Horovod checkout with test/parallel/test_torch.py)"
    if not os.path.isfile(os.path.join(SOURCE, "test", "parallel", "test_torch.py")):
        return f"HVD_HOROVOD_SOURCE={SOURCE!r} has no test/parallel/test_torch.py"
    try:
        import mock  # noqa: F401  (Horovod's test utilities import it)
    except ImportError:
        return "python3-mock is not installed (Horovod's test utilities import mock)"
    return None


@pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))
def test_horovods_test_torch_runs_to_its_end_as_one_session_with_horovods_result():
    done = subprocess.run([sys.executable, os.path.join(HERE, "horovod_conformance.py"), "--source", SOURCE,
                           "--hvdrun", str(HVDRUN), "--session", "--timeout", "900"],
                          capture_output=True, text=True, timeout=960,
                          env=dict(os.environ, PYTHONPATH=str(PACKAGE_DIR)))
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last == "passed 105, failed 0, skipped 10, hung 0", done.stdout
