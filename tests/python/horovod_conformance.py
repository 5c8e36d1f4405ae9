#!/usr/bin/python3
"""Horovod's own test suite under hvdrun: test/parallel/test_torch.py of a Horovod checkout, run through
`hvdrun --horovod-compat` (hvd's `horovod` package; no Horovod install needed), printing the per-test table.

    /usr/bin/python3 tests/python/horovod_conformance.py --source ~/horovod            # one test per job
    /usr/bin/python3 tests/python/horovod_conformance.py --source ~/horovod --session  # the file as one job

--source (default $HVD_HOROVOD_SOURCE): a Horovod checkout holding test/parallel/test_torch.py and
test/utils/ (`git archive v0.28.1 test/parallel/test_torch.py test/utils` of Horovod's repository is enough).
--hvdrun (default: next to the hvd package in use, else on PATH), --python (the workers' interpreter, default
$HVD_TEST_PYTHON or /usr/bin/python3), --np (2), -k (a pytest -k filter), --timeout
(seconds per job: a job past it counts as a hang). Prints a Markdown table (test, outcome, seconds), then one line
"passed N, failed N, skipped N, hung N"; exits 0 when nothing failed or hung, 1 otherwise, 2 for bad input
(naming it). Needs python3-mock (Horovod's test utilities import mock).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

OUTCOME = re.compile(r"(\d+) (passed|failed|skipped|error|errors)")


def hvdrun_path(given):
    if given:
        return given
    try:
        from hvd import runner
        return runner._find_hvdrun()
    except Exception:
        return shutil.which("hvdrun")


def counts(text):
    """{"passed": n, ...} from pytest's last summary line of rank 0 (hvdrun tags it [0]<stdout>:)."""
    lines = [line for line in text.splitlines() if line.startswith("[0]<stdout>:") and
             re.search(r"\d+ (passed|failed|skipped|error)", line) and " in " in line]
    found = {}
    if lines:
        for n, kind in OUTCOME.findall(lines[-1]):
            found["error" if kind == "errors" else kind] = int(n)
    return found


def run_job(hvdrun, python, np_, directory, selector, timeout, target="test_torch.py"):
    cmd = [hvdrun, "-np", str(np_), "-H", f"localhost:{np_}", "--horovod-compat", python, "-m",
           "pytest", "-q", "-p", "no:cacheprovider", target] + (["-k", selector] if selector else [])
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=directory, capture_output=True, text=True, timeout=timeout)
        return counts(done.stdout), time.monotonic() - started, done.stdout + done.stderr, False
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return {}, time.monotonic() - started, out, True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default=os.environ.get("HVD_HOROVOD_SOURCE"))
    ap.add_argument("--hvdrun")
    ap.add_argument("--python", default=os.environ.get("HVD_TEST_PYTHON", "/usr/bin/python3"))
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("-k", dest="selector")
    ap.add_argument("--session", action="store_true", help="the whole file as one pytest session")
    ap.add_argument("--timeout", type=float, default=None)
    args = ap.parse_args()
    if not args.source:
        print("horovod_conformance: no --source and HVD_HOROVOD_SOURCE is not set", file=sys.stderr)
        return 2
    directory = os.path.join(args.source, "test", "parallel")
    test_file = os.path.join(directory, "test_torch.py")
    if not os.path.isfile(test_file):
        print(f"horovod_conformance: {test_file} does not exist (--source {args.source!r})", file=sys.stderr)
        return 2
    hvdrun = hvdrun_path(args.hvdrun)
    if not hvdrun:
        print("horovod_conformance: hvdrun not found (pass --hvdrun)", file=sys.stderr)
        return 2
    hvdrun = os.path.abspath(hvdrun)  # the jobs run in the test file's folder
    totals = {"passed": 0, "failed": 0, "skipped": 0, "hung": 0}
    print("| test | outcome | s |\n|---|---|---|")
    if args.session:
        found, seconds, out, hung = run_job(hvdrun, args.python, args.np, directory, args.selector, args.timeout or 1800)
        for kind in ("passed", "failed", "skipped"):
            totals[kind] += found.get(kind, 0) + (found.get("error", 0) if kind == "failed" else 0)
        totals["hung"] += int(hung)
        for name in re.findall(r"^\[0\]<stdout>:FAILED \S+::(\w+)", out, re.M):
            print(f"| {name} | failed | - |")
        print(f"| (the whole file) | {'hung' if hung else 'ran to its end'} | {seconds:.1f} |")
    else:
        with open(test_file, encoding="utf-8") as f:
            names = re.findall(r"^    def (test_\w+)\(self", f.read(), re.M)
        for name in names:
            if args.selector and args.selector not in name:
                continue
            found, seconds, _, hung = run_job(hvdrun, args.python, args.np, directory, None, args.timeout or 300,
                                              f"test_torch.py::TorchTests::{name}")
            if hung:
                outcome = "hung"
            elif found.get("failed") or found.get("error"):
                outcome = "failed"
            elif found.get("passed"):
                outcome = "passed"
            elif found.get("skipped"):
                outcome = "skipped"
            else:
                outcome = "failed"  # no summary: the job ended without pytest's last word
            totals[outcome] += 1
            print(f"| {name} | {outcome} | {seconds:.1f} |", flush=True)
    print(f"\npassed {totals['passed']}, failed {totals['failed']}, skipped {totals['skipped']}, hung {totals['hung']}")
    return 0 if not totals["failed"] and not totals["hung"] else 1


if __name__ == "__main__":
    sys.exit(main())
