#!/usr/bin/python3
"""The chaos soak: an elastic PyTorch job (chaos_train.py), np=4 over three ssh hosts in network namespaces
(tests/python/ssh_lab.py: h1 with 2 slots, h2 and h3 with 1), trained through faults injected one after the
other at seeded random steps, then checked against a replay without faults.

    chaos_soak.py --faults 20 --seed 1            # what the ctest runs (tests/chaos/test_chaos_soak.py)
    chaos_soak.py --faults 200 --json             # the benchmark mode (bench/compare's elastic section)

Fault kinds, in equal numbers, shuffled by the seed:
  kill     SIGKILL of a worker (a random rank)
  stop     SIGSTOP of a worker, SIGCONT 5 s later
  cut      a host cut from the network (its bridge port down) for 3 s, then restored
  proxy    SIGKILL of a host's hvd-proxy (its ranks die with it)
  flood    64 connections at the rendezvous port: half send garbage and close, a quarter send half a request
           and stay, a quarter connect and stay silent (the server must cut both kinds)

A fault is injected once the job has trained at full size for a random 3 to 8 steps since the last one
recovered; the next waits until the job is back at 4 ranks. Per fault the soak measures, from rank 0's step
lines: recovery (injection to the first step completed beyond the last step seen before it), full (to the
first step completed at 4 ranks again) and steps lost (steps trained again after the rollback to the last
commit).

Checks (each a line of the report; `ok` is their conjunction): the job exits 0 with every fault injected;
every rank ends with the same parameters, and they equal bit for bit those of a replay without faults
(hvdrun -np 4 on this machine: the training's result does not depend on the membership, see chaos_train.py);
no process is left on any host; nothing new in /dev/shm; hvdrun's open file descriptors at the end (full
size, every rank at the gate) equal their count after the first steps at full size (both taken once the
server's idle timeout has closed what init left open), and its RSS has grown by at most 1 MiB + 16 KiB per
fault (a summary row per worker started is all it should keep); the server cut every silent connection of
the floods.

Prints a human-readable report, or with --json one JSON object (figures in seconds).
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

from ssh_lab import SshLab, unavailable  # noqa: E402

PYTHON = "/usr/bin/python3"
TRAIN = os.path.join(HERE, "chaos_train.py")
KINDS = ("kill", "stop", "cut", "proxy", "flood")
SLOTS = {1: 2, 2: 1, 3: 1}
SIZE = 4
COMMIT_EVERY = 4
STOP_SECONDS = 5.0
CUT_SECONDS = 3.0
FLOOD_CONNECTIONS = 64
# hvdrun keeps a summary row per worker it started (about 1 KiB) and the output tail of the 32 that ended
# last; anything it kept per fault beyond that (a launcher object, a buffer) would exceed this.
RSS_ALLOWANCE_BASE = 1 << 20
RSS_ALLOWANCE_PER_FAULT = 16 << 10
SERVER_IDLE = 10.5  # the rendezvous server closes a connection idle for its read timeout (10 s), and then some

STEP = re.compile(r"<stdout>:step (\d+) size (\d+) round (-?\d+) t (\S+)")
START = re.compile(r"<stdout>:start: step (\d+) size (\d+) round (-?\d+) t (\S+)")
RENDEZVOUS = re.compile(r"<stdout>:rendezvous (\S+) (\d+)")
GATE = re.compile(r"<stdout>:gate: step (\d+) size (\d+)")
FINAL = re.compile(r"<stdout>:final: steps (\d+) sha256 ([0-9a-f]+)")


def schedule(faults: int, seed: int) -> "list[tuple[str, int]]":
    """(kind, steps to train at full size before it) per fault: kinds in equal numbers, shuffled."""
    rng = random.Random(seed)
    kinds = [KINDS[i % len(KINDS)] for i in range(faults)]
    rng.shuffle(kinds)
    return [(kind, rng.randint(3, 8)) for kind in kinds]


class Watcher:
    """Reads hvdrun's output on a thread: rank 0's step and start lines with their times, the rendezvous
    address, the gate and the final hash; keeps the whole output for the report."""

    def __init__(self, proc: subprocess.Popen, log_path: str):
        self.proc = proc
        self.cond = threading.Condition()
        self.steps = []   # (t, step, size)
        self.starts = []  # (t, step, size)
        self.rendezvous = None
        self.gate = None
        self.final = None
        self.log = open(log_path, "w")
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.log.write(line)
            self.log.flush()
            with self.cond:
                if m := STEP.search(line):
                    self.steps.append((float(m[4]), int(m[1]), int(m[2])))
                elif m := START.search(line):
                    self.starts.append((float(m[4]), int(m[1]), int(m[2])))
                elif m := RENDEZVOUS.search(line):
                    self.rendezvous = (m[1], int(m[2]))
                elif m := GATE.search(line):
                    self.gate = (int(m[1]), int(m[2]))
                elif m := FINAL.search(line):
                    self.final = (int(m[1]), m[2])
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait(self, predicate, timeout: float, what: str):
        """Waits until predicate() (called under the lock) is true; RuntimeError naming `what` after timeout
        seconds or when hvdrun's output ends first."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                value = predicate()
                if value:
                    return value
                if not self.thread.is_alive():
                    raise RuntimeError(f"hvdrun's output ended (exit {self.proc.poll()}) while waiting for {what}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"no {what} within {timeout:.0f} s")
                self.cond.wait(min(left, 0.5))

    def full_steps_since(self, t: float) -> int:
        return sum(1 for ts, _, size in self.steps if ts > t and size == SIZE)


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def fd_targets(pid: int) -> "list[str]":
    """What each open fd of pid refers to (readlink of /proc/PID/fd/N), sorted."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return sorted(out)


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def settled_fds(pid: int, seconds: float = 1.5) -> int:
    """The smallest fd count seen over `seconds` (transient connections such as a report in flight come and go)."""
    low = fd_count(pid)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.05)
        low = min(low, fd_count(pid))
    return low


class Injector:
    def __init__(self, lab: SshLab, rng: random.Random):
        self.lab = lab
        self.rng = rng
        self.silent = []  # flood connections that must be cut by the server

    def _pick(self, needle: str) -> "tuple[int, int]":
        found = [(host, pid) for host in range(1, self.lab.n + 1) for pid, cmd in self.lab.processes(host)
                 if needle in cmd and not cmd.startswith(("bash", "sh ", "/bin/sh"))]
        if not found:
            raise RuntimeError(f"no process running {needle!r} on any host")
        return self.rng.choice(sorted(found))

    def inject(self, kind: str, rendezvous: "tuple[str, int]") -> str:
        """Injects one fault; returns what it did. Returns once the fault is over (SIGCONT sent, link up)."""
        if kind == "kill":
            host, pid = self._pick("chaos_train.py")
            os.kill(pid, signal.SIGKILL)
            return f"SIGKILL worker pid {pid} on h{host}"
        if kind == "proxy":
            host, pid = self._pick("hvd-proxy")
            os.kill(pid, signal.SIGKILL)
            return f"SIGKILL hvd-proxy pid {pid} on h{host}"
        if kind == "stop":
            host, pid = self._pick("chaos_train.py")
            os.kill(pid, signal.SIGSTOP)
            time.sleep(STOP_SECONDS)
            os.kill(pid, signal.SIGCONT)
            return f"SIGSTOP worker pid {pid} on h{host} for {STOP_SECONDS:.0f} s"
        if kind == "cut":
            host = self.rng.randint(1, self.lab.n)
            port = f"vx{host}"
            self.lab_link(port, "down")
            try:
                time.sleep(CUT_SECONDS)
            finally:
                self.lab_link(port, "up")
            return f"cut h{host} from the network for {CUT_SECONDS:.0f} s"
        if kind == "flood":
            return self.flood(rendezvous)
        raise ValueError(f"unknown fault kind {kind!r}")

    def lab_link(self, port: str, state: str):
        subprocess.run(["ip", "netns", "exec", self.lab.hub, "ip", "link", "set", port, state], check=True,
                       capture_output=True)

    def flood(self, rendezvous: "tuple[str, int]") -> str:
        garbage = silent = partial = 0
        for i in range(FLOOD_CONNECTIONS):
            s = socket.create_connection(rendezvous, timeout=2)
            if i % 2 == 0:
                s.sendall(self.rng.randbytes(self.rng.randint(1, 2048)))
                s.close()
                garbage += 1
            elif i % 4 == 1:
                s.sendall(b"PUT /r0.global/rank_7 HTTP/1.1\r\nHost: x\r\nContent-Len")
                self.silent.append(s)
                partial += 1
            else:
                self.silent.append(s)
                silent += 1
        return f"{garbage} garbage, {partial} half-sent, {silent} silent connections at {rendezvous[0]}:{rendezvous[1]}"

    def uncut(self, timeout: float) -> "list[str]":
        """Waits up to timeout seconds for the server to close the flood's silent connections (the client
        reads EOF or a reset), then closes them all; those the server had not closed."""
        deadline = time.monotonic() + timeout
        left = list(self.silent)
        while left:
            still = []
            for s in left:
                s.setblocking(False)
                try:
                    while s.recv(4096):  # the 408 for a half-sent request, then EOF
                        pass
                except BlockingIOError:
                    still.append(s)
                except OSError:
                    pass
            left = still
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        names = [str(s.getsockname()) for s in left]
        for s in self.silent:
            s.close()
        self.silent = []
        return names


def run_job(lab, args, workdir, log):
    """The faulty run. Returns the report's dict."""
    hosts = ",".join(f"h{h}:{n}" for h, n in SLOTS.items())
    gate = os.path.join(workdir, "gate")
    os.makedirs(gate)
    plan = schedule(args.faults, args.seed)
    stop = os.path.join(workdir, "stop")
    argv = [args.hvdrun, "-np", str(SIZE), "--min-np", "2", "--max-np", str(SIZE), "-H", hosts,
            "--ssh-identity-file", lab.key, "--blacklist-cooldown-range", "1", "2",
            "-x", f"PYTHONPATH={args.pythonpath}",
            PYTHON, TRAIN, "--steps", "1000000", "--stop-file", stop, "--commit-every", str(COMMIT_EVERY),
            "--size", str(SIZE), "--step-seconds", str(args.step_seconds), "--gate", gate,
            "--out", os.path.join(workdir, "faulty.bin")]
    shm_before = set(os.listdir("/dev/shm"))
    proc = subprocess.Popen(argv, env=lab.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=workdir, start_new_session=True)
    w = Watcher(proc, log)
    rng = random.Random(args.seed + 1)
    injector = Injector(lab, rng)
    faults = []
    report = {"faults": faults, "seed": args.seed}
    try:
        w.wait(lambda: any(size == SIZE and s >= 3 for _, s, size in w.steps), 120, "step 3 at full size")
        rendezvous = w.rendezvous
        # Connections that init opened to the server and no longer uses stay open until the server's idle
        # timeout closes them: the fds are compared in the steady state after it, at both ends.
        with w.cond:
            started = w.starts[-1][0]
        time.sleep(max(0.0, started + SERVER_IDLE - time.time()))
        fds_start = settled_fds(proc.pid)
        fd_list_start = fd_targets(proc.pid)
        rss_start = rss_bytes(proc.pid)
        since = time.time()
        for n, (kind, gap) in enumerate(plan, 1):
            w.wait(lambda: w.full_steps_since(since) >= gap, args.fault_timeout,
                   f"{gap} steps at full size before fault {n} ({kind})")
            with w.cond:
                before = w.steps[-1][1]
            t0 = time.time()
            what = injector.inject(kind, rendezvous)

            def recovered():
                after = [(t, s, size) for t, s, size in w.steps if t > t0]
                beyond = next((t for t, s, _ in after if s > before), None)
                full = next((t for t, _, size in after if size == SIZE), None)
                return (beyond, full) if beyond is not None and full is not None else None

            beyond, full = w.wait(recovered, args.fault_timeout, f"recovery from fault {n} ({what})")
            with w.cond:
                resumed = [s for t, s, _ in w.starts if t > t0]
            lost = max(0, before - min(resumed)) if resumed else 0
            faults.append({"n": n, "kind": kind, "what": what, "step": before, "recovery": beyond - t0,
                           "full": full - t0, "steps_lost": lost, "resets": len(resumed)})
            if args.verbose:
                print(f"fault {n:3d} {kind:5s} at step {before}: recovered in {beyond - t0:.2f} s, full size in "
                      f"{full - t0:.2f} s, {lost} steps lost ({what})", flush=True)
            since = full
        # A few steps at full size after the last fault, then the job stops at its next commit.
        w.wait(lambda: w.full_steps_since(since) >= 3, args.fault_timeout, "3 steps at full size after the last fault")
        open(stop, "w").close()
        gated = w.wait(lambda: w.gate, args.fault_timeout + 120, "the gate (every rank done, full size)")
        # The server cuts a connection that sends no whole request within its read timeout (10 s).
        uncut = injector.uncut(SERVER_IDLE + 5)
        with w.cond:
            started = w.starts[-1][0]
        time.sleep(max(0.0, started + SERVER_IDLE - time.time()))
        fds_end = settled_fds(proc.pid)
        fd_list_end = fd_targets(proc.pid)
        if args.verbose and fds_end != fds_start:
            print("fds at the start:", fd_list_start, "\nfds at the end:", fd_list_end, flush=True)
            subprocess.run(["ss", "-tanp"], check=False)
        rss_end = rss_bytes(proc.pid)
        digests = {}
        for name in os.listdir(gate):
            with open(os.path.join(gate, name)) as f:
                digests[name] = f.read()
        open(os.path.join(gate, "go"), "w").close()
        rc = proc.wait(timeout=60)
        w.thread.join(10)
        report.update(rc=rc, final=w.final, steps=w.final[0] if w.final else None, gate=gated,
                      fds=(fds_start, fds_end), rss=(rss_start, rss_end), digests=digests, uncut=uncut)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        injector.uncut(0)
    report["leftovers"] = {f"h{h}": procs for h, procs in lab.wait_empty(10).items()}
    report["shm_new"] = sorted(set(os.listdir("/dev/shm")) - shm_before)
    return report


def replay(args, workdir, steps) -> str:
    out = os.path.join(workdir, "replay.bin")
    r = subprocess.run([args.hvdrun, "-np", str(SIZE), "-x", f"PYTHONPATH={args.pythonpath}", PYTHON, TRAIN,
                        "--steps", str(steps), "--commit-every", str(COMMIT_EVERY), "--out", out],
                       capture_output=True, text=True, timeout=600, cwd=workdir)
    if r.returncode != 0:
        raise RuntimeError(f"the replay failed ({r.returncode}): {r.stdout[-2000:]}{r.stderr[-2000:]}")
    return out


def summarize(faults):
    kinds = {}
    for kind in KINDS:
        rows = [f for f in faults if f["kind"] == kind]
        if not rows:
            continue
        kinds[kind] = {
            "count": len(rows),
            "recovery_median": statistics.median(f["recovery"] for f in rows),
            "recovery_max": max(f["recovery"] for f in rows),
            "full_median": statistics.median(f["full"] for f in rows),
            "full_max": max(f["full"] for f in rows),
            "steps_lost_median": statistics.median(f["steps_lost"] for f in rows),
            "steps_lost_max": max(f["steps_lost"] for f in rows),
        }
    return kinds


def soak(args) -> dict:
    """Runs the soak and the replay; the report with its checks."""
    why = unavailable()
    if why:
        return {"ok": False, "skipped": why}
    workdir = tempfile.mkdtemp(prefix="hvd-chaos-")
    log = os.path.join(workdir, "hvdrun.log")
    try:
        with SshLab(hosts=3) as lab:
            report = run_job(lab, args, workdir, log)
        replayed = replay(args, workdir, report["steps"])
        with open(os.path.join(workdir, "faulty.bin"), "rb") as a, open(replayed, "rb") as b:
            same = a.read() == b.read()
        fds, rss = report["fds"], report["rss"]
        rss_allowance = RSS_ALLOWANCE_BASE + RSS_ALLOWANCE_PER_FAULT * args.faults
        checks = {
            "exit 0": report["rc"] == 0,
            f"{args.faults} faults injected": len(report["faults"]) == args.faults,
            "every rank has rank 0's parameters": len(set(report["digests"].values())) == 1
                                                   and len(report["digests"]) == SIZE,
            "parameters equal the replay's bit for bit": same,
            "no process left on any host": not report["leftovers"],
            "nothing new in /dev/shm": not report["shm_new"],
            "hvdrun's fds back to their start": fds[1] == fds[0],
            f"hvdrun's RSS within {rss_allowance >> 10} KiB of its start": rss[1] - rss[0] <= rss_allowance,
            "the server cut every silent flood connection": not report["uncut"],
        }
        report.update(checks=checks, ok=all(checks.values()), kinds=summarize(report["faults"]), log=log)
        if report["ok"] and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
            report["log"] = None
        return report
    except BaseException:
        print(f"chaos soak: hvdrun's output is in {log}", file=sys.stderr)
        raise


def format_report(r: dict) -> str:
    if "skipped" in r:
        return f"chaos soak skipped: {r['skipped']}"
    lines = [f"chaos soak: {len(r['faults'])} faults, seed {r['seed']}, {r['steps']} steps: "
             f"{'ok' if r['ok'] else 'FAILED'}"]
    for name, good in r["checks"].items():
        lines.append(f"  [{'x' if good else ' '}] {name}")
    lines.append(f"  fds {r['fds'][0]} -> {r['fds'][1]}, RSS {r['rss'][0] >> 10} -> {r['rss'][1] >> 10} KiB")
    if r["leftovers"]:
        lines.append(f"  left on hosts: {r['leftovers']}")
    if r["shm_new"]:
        lines.append(f"  new in /dev/shm: {r['shm_new']}")
    lines.append("  kind   count  recovery s (median, max)  full size s (median, max)  steps lost (median, max)")
    for kind, k in r["kinds"].items():
        lines.append(f"  {kind:6s} {k['count']:5d}  {k['recovery_median']:8.2f} {k['recovery_max']:8.2f}"
                     f"          {k['full_median']:8.2f} {k['full_max']:8.2f}"
                     f"           {k['steps_lost_median']:5.1f} {k['steps_lost_max']:5d}")
    if r.get("log"):
        lines.append(f"  hvdrun's output: {r['log']}")
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    build = os.environ.get("HVD_BUILD_DIR", os.path.join(ROOT, "build"))
    p.add_argument("--faults", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--hvdrun", default=os.path.join(build, "hvdrun"))
    p.add_argument("--pythonpath", default=os.path.join(build, "python"))
    p.add_argument("--step-seconds", type=float, default=0.05)
    p.add_argument("--fault-timeout", type=float, default=90.0, help="deadline for each wait of the soak")
    p.add_argument("--json", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--verbose", action="store_true", help="a line per fault as it recovers")
    args = p.parse_args(argv)
    if args.faults < 1:
        p.error(f"--faults must be at least 1, got {args.faults}")
    return args


def main():
    args = parse_args()
    report = soak(args)
    if args.json:
        print(json.dumps({"bench": "chaos", **{k: v for k, v in report.items() if k != "digests"}}))
    else:
        print(format_report(report))
    return 0 if report.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
