"""Shared fixtures for the Python tests: real multi-rank jobs through the build tree's hvdrun.

Environment (set by ctest, see tests/python/CMakeLists.txt): HVD_BUILD_DIR, the build tree holding
hvdrun and python/ (the hvd package).
"""

import json
import os
import queue
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BUILD_DIR = Path(os.environ.get("HVD_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
HVDRUN = BUILD_DIR / "hvdrun"
# The workers' interpreter: Debian's, which has torch; HVD_TEST_PYTHON names another (the GPU checks run
# where the interpreter with CUDA torch is elsewhere).
PYTHON = os.environ.get("HVD_TEST_PYTHON", "/usr/bin/python3")
PACKAGE_DIR = BUILD_DIR / "python"

# The test process itself imports hvd (hvd.run, single-process checks).
if str(PACKAGE_DIR) not in sys.path:
    sys.path.insert(0, str(PACKAGE_DIR))


class Job:
    """The outcome of one hvdrun job: exit code, output, and each rank's stdout lines."""

    def __init__(self, completed):
        self.returncode = completed.returncode
        self.stdout = completed.stdout
        self.stderr = completed.stderr
        self.lines = {}
        for line in completed.stdout.splitlines():
            m = re.match(r"\[(\d+)\]<stdout>:(.*)", line)
            if m:
                self.lines.setdefault(int(m.group(1)), []).append(m.group(2))

    def rank_output(self, rank):
        return self.lines.get(rank, [])

    def __repr__(self):
        return f"Job(returncode={self.returncode})\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


@pytest.fixture
def hvdrun(tmp_path):
    """hvdrun(np, code, *args, env=None, timeout=120, flags=()) runs `code` (a Python script's text) on np
    local ranks with /usr/bin/python3 and returns a Job. The script's stdout is tagged per rank."""

    def run(np, code, *args, env=None, timeout=120, flags=(), hosts=None):
        script = tmp_path / f"worker_{run.count}.py"
        run.count += 1
        script.write_text(textwrap.dedent(code))
        full_env = dict(os.environ)
        full_env.pop("PYTHONPATH", None)  # hvdrun must find the package by itself
        if env:
            full_env.update(env)
        cmd = [str(HVDRUN), "-np", str(np), "-H", hosts or f"localhost:{np}", *flags, PYTHON, str(script),
               *map(str, args)]
        completed = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout,
                                   cwd=tmp_path)
        return Job(completed)

    run.count = 0
    return run


def driver_report(driver, lines, timeout):
    """The JSON object a driver script prints first (its pids), read from `lines` (a queue fed with the driver's
    stdout lines); when another line or none comes within `timeout` s, kills the driver and fails the test with
    its stderr."""
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        line = f"(nothing within {timeout} s)"
    if not line.startswith("{"):
        driver.kill()
        pytest.fail(f"the driver printed {line!r} instead of its pids; stderr:\n{driver.communicate()[1]}")
    return json.loads(line)


# For the worker scripts (prepend it to a script's text): expect_error(kind, fragment, fn, *args, **kwargs) calls
# fn, asserts that it raises `kind` with `fragment` in the message, and returns the exception.
EXPECT_ERROR = r"""
def expect_error(kind, fragment, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except kind as e:
        assert fragment in str(e), (kind, fragment, str(e))
        return e
    raise AssertionError(f"expected {kind.__name__} containing {fragment!r} from {fn!r}")
"""


def assert_ok(job, np):
    """Every rank exited 0 and printed OK as its last line."""
    if job.returncode != 0:
        pytest.fail(f"hvdrun exited {job.returncode}\n{job!r}", pytrace=False)
    for r in range(np):
        if not job.rank_output(r) or job.rank_output(r)[-1] != "OK":
            pytest.fail(f"rank {r} did not print OK last\n{job!r}", pytrace=False)
