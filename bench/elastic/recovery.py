#!/usr/bin/python3
"""Elastic recovery times of one launcher, on bench/elastic/worker.py (Horovod's elastic API).

    recovery.py --launcher hvdrun --hvdrun build/hvdrun --pythonpath build/python --scenario death
    recovery.py --launcher horovod --pythonpath /path/to/horovod/site-packages --scenario add

Scenarios, both with a discovery script that lists the hosts "localhost" and "127.0.0.1" (two names of this
machine, so that Horovod, which blacklists a whole host at a worker's failure, can go on) and
--min-np 1 --max-np 2 --network-interface lo:
  death  2 workers train; once both have done --warm steps, the one on 127.0.0.1 is SIGKILLed. Figure: the
         time from the kill to the survivor's first step completed after it re-initialized.
  add    1 worker trains on localhost; after --warm steps, 127.0.0.1:1 is added to the discovery output.
         Figure: the time from that write to the first step completed at size 2.
Prints one JSON line: {"bench": "elastic", "scenario", "launcher", "seconds", "reset_seconds"} (seconds null
when the figure did not come within --timeout, and "error" says why; reset_seconds: from the event to the
first worker's reset callback, i.e. re-initialized in the new membership). The job is stopped after the figure (SIGTERM, then SIGKILL).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")
PYTHON = "/usr/bin/python3"
TAG = "<stdout>:"


def command(args, script):
    common = ["--min-np", "1", "--max-np", "2", "--host-discovery-script", script, "--network-interface", "lo"]
    np = "2" if args.scenario == "death" else "1"
    worker = [PYTHON, WORKER, "--step-seconds", str(args.step_seconds)]
    if args.launcher == "hvdrun":
        return [args.hvdrun, "-np", np, "--horovod-compat"] + common + worker, {"PYTHONPATH": args.pythonpath}
    return ([PYTHON, "-m", "horovod.runner.launch", "--gloo", "-np", np] + common + worker,
            {"PYTHONPATH": args.pythonpath})


def measure(args):
    tmp = tempfile.mkdtemp(prefix="hvd-elastic-bench-")
    hosts = os.path.join(tmp, "hosts")
    with open(hosts, "w") as f:
        f.write("localhost:1\n127.0.0.1:1\n" if args.scenario == "death" else "localhost:1\n")
    script = os.path.join(tmp, "discover.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\ncat {hosts}\n")
    os.chmod(script, 0o755)
    argv, extra = command(args, script)
    env = dict(os.environ, **extra)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp,
                            start_new_session=True)
    killer = threading.Timer(args.timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
    killer.start()
    steps = {}  # pid -> steps seen
    victim = None
    t0 = None
    reset_after = set()  # survivors that re-initialized after t0
    result = {"bench": "elastic", "scenario": args.scenario, "launcher": args.launcher, "seconds": None}
    tail = []
    try:
        for line in proc.stdout:
            tail = (tail + [line])[-20:]
            if TAG not in line:
                continue
            try:
                e = json.loads(line.split(TAG, 1)[1])
            except ValueError:
                continue
            if e["event"] == "reset" and t0 is not None and e["t"] > t0:
                reset_after.add(e["pid"])
                result.setdefault("reset_seconds", e["t"] - t0)
            if e["event"] != "step":
                continue
            steps[e["pid"]] = steps.get(e["pid"], 0) + 1
            if t0 is None:
                if args.scenario == "death":
                    if len(steps) >= 2 and all(n >= args.warm for n in steps.values()) and e["host"] == "127.0.0.1":
                        victim = e["pid"]
                        t0 = time.time()
                        os.kill(victim, signal.SIGKILL)
                elif steps[e["pid"]] >= args.warm:
                    with open(hosts + ".new", "w") as f:
                        f.write("localhost:1\n127.0.0.1:1\n")
                    t0 = time.time()
                    os.replace(hosts + ".new", hosts)
                continue
            if e["t"] <= t0:
                continue
            if args.scenario == "death" and e["pid"] != victim and e["pid"] in reset_after:
                result["seconds"] = e["t"] - t0
                break
            if args.scenario == "add" and e["size"] == 2:
                result["seconds"] = e["t"] - t0
                break
    finally:
        killer.cancel()
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    if result["seconds"] is None:
        result["error"] = "no figure within %s s; last output: %s" % (args.timeout, "".join(tail)[-800:])
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launcher", choices=["hvdrun", "horovod"], required=True)
    ap.add_argument("--hvdrun", default="hvdrun")
    ap.add_argument("--pythonpath", required=True, help="hvd's package directory, or Horovod's site-packages")
    ap.add_argument("--scenario", choices=["death", "add"], required=True)
    ap.add_argument("--warm", type=int, default=20, help="steps before the event")
    ap.add_argument("--step-seconds", type=float, default=0.02)
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()
    # The job runs in a temporary directory.
    args.pythonpath = os.path.abspath(args.pythonpath)
    if os.sep in args.hvdrun:
        args.hvdrun = os.path.abspath(args.hvdrun)
    print(json.dumps(measure(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
