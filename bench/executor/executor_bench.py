#!/usr/bin/python3
"""Driver-side figures of hvd.Executor and hvd.train, for bench/compare's `executor` section.

    PYTHONPATH=build/python /usr/bin/python3 bench/executor/executor_bench.py --subject executor --calls 200
    PYTHONPATH=build/python /usr/bin/python3 bench/executor/executor_bench.py --subject hvd_run --jobs 5
    PYTHONPATH=build/python /usr/bin/python3 bench/executor/executor_bench.py --subject dask --calls 200
    PYTHONPATH=build/python /usr/bin/python3 bench/executor/executor_bench.py --subject trainer_profile

Subjects, each in a fresh driver process (hvd imported before any clock starts), --np ranks on this host:
  executor         start: Executor(num_workers=np).start() until the first run(noop) returned; then --calls
                   run(noop) calls, each timed (the workers are started once and reused).
  hvd_run          --jobs calls of hvd.run(noop, num_proc=np), each a fresh hvdrun job; first: the first call.
  dask             a distributed.LocalCluster(n_workers=np, processes=True, threads_per_worker=1) started here;
                   --calls client.submit(noop).result() round trips and --calls Executor(num_workers=np,
                   client=client).run(noop) calls, back to back in the order --order gives; the Executor's
                   start (to its first run) too. Exit 77 with {"skipped": why} when distributed is not importable.
  trainer_profile  where the time of examples/python/train_quickstart.py goes: the driver's imports, then the
                   quickstart run in this process under cProfile (its `__main__`), the time of each phase (Trainer(),
                   Executor.start, Executor.run and the checkpoint persistence inside it, shutdown, the pandas
                   DataFrame, torch.load), the per-report times of its progress.jsonl, and for comparison the import
                   floor of the plain job (hvdrun -np 3 of `import torch, hvd.torch; init()`) and one plain job.

Prints one JSON line {"bench": "executor", "subject", ...}; latencies as {"median", "min", "max", "p90", "n"} in ms.
Every wait has a deadline: past --timeout seconds the subject fails (exit 1, {"error": ...}) naming what it was
waiting for. --profile adds a cProfile of the timed run(noop) calls (executor) or the timed calls (hvd_run).
"""

import argparse
import contextlib
import cProfile
import importlib
import io
import json
import os
import pstats
import runpy
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

# Keep the source tree clean: this process and the Dask worker processes it spawns (which import this file).
sys.dont_write_bytecode = True
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
QUICKSTART = os.path.join(ROOT, "examples", "python", "train_quickstart.py")
SUBJECTS = ("executor", "hvd_run", "dask", "trainer_profile")
SKIPPED = 77


class Timeout(Exception):
    """The subject's deadline passed; the message names what it was waiting for."""


class Deadline:
    """One deadline for the whole subject (SIGALRM); `phase` says what is being waited for when it passes."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.phase = "the start"
        signal.signal(signal.SIGALRM, self._expired)
        signal.setitimer(signal.ITIMER_REAL, seconds)

    def _expired(self, signum, frame):
        raise Timeout(f"still waiting for {self.phase} after {self.seconds:g} s (--timeout)")

    def cancel(self):
        signal.setitimer(signal.ITIMER_REAL, 0)


def noop():
    """The function every call runs: nothing, so a call's time is the machinery's own."""
    return None


def stats_ms(seconds: list) -> dict:
    ms = sorted(s * 1e3 for s in seconds)
    return {"median": statistics.median(ms), "min": ms[0], "max": ms[-1],
            "p90": ms[min(len(ms) - 1, int(0.9 * len(ms)))], "n": len(ms)}


def timed(call, count: int, profile: "cProfile.Profile | None" = None) -> list:
    times = []
    for _ in range(count):
        if profile:
            profile.enable()
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
        if profile:
            profile.disable()
    return times


def top_functions(profile: cProfile.Profile, count: int = 18) -> list:
    """The profile's functions with the most own time, as text lines."""
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("tottime").print_stats(count)
    return [line for line in out.getvalue().splitlines()
            if line.strip() and not line.strip().startswith(("Ordered by", "List reduced"))]


# ---------------------------------------------------------------------------------------------------------------


def subject_executor(args, deadline: Deadline) -> dict:
    from hvd.executor import Executor, ExecutorSettings

    deadline.phase = f"Executor(num_workers={args.np}).start() and its first run(noop)"
    settings = ExecutorSettings(timeout_s=30, start_timeout_s=min(120, args.timeout))
    t0 = time.perf_counter()
    ex = Executor(settings, num_workers=args.np)
    try:
        ex.start()
        first = ex.run(noop)
        start_s = time.perf_counter() - t0
        if first != [None] * args.np:
            raise RuntimeError(f"run(noop) returned {first!r}, expected {[None] * args.np!r}")
        deadline.phase = f"{args.calls} run(noop) calls on {args.np} started workers"
        timed(lambda: ex.run(noop), min(10, args.calls))  # warm-up: connections and caches in use
        profile = cProfile.Profile() if args.profile else None
        times = timed(lambda: ex.run(noop), args.calls, profile)
        deadline.phase = "Executor.shutdown()"
        t1 = time.perf_counter()
    finally:
        ex.shutdown()
    row = {"start_ms": start_s * 1e3, "run_noop_ms": stats_ms(times),
           "shutdown_ms": (time.perf_counter() - t1) * 1e3}
    if profile:
        row["profile"] = top_functions(profile)
    return row


def subject_hvd_run(args, deadline: Deadline) -> dict:
    import hvd

    deadline.phase = f"hvd.run(noop, num_proc={args.np}), the first call"
    t0 = time.perf_counter()
    first = hvd.run(noop, num_proc=args.np)
    first_s = time.perf_counter() - t0
    if first != [None] * args.np:
        raise RuntimeError(f"hvd.run(noop) returned {first!r}, expected {[None] * args.np!r}")
    deadline.phase = f"{args.jobs} more hvd.run(noop, num_proc={args.np}) calls"
    profile = cProfile.Profile() if args.profile else None
    times = timed(lambda: hvd.run(noop, num_proc=args.np), args.jobs, profile)
    row = {"first_ms": first_s * 1e3, "run_noop_ms": stats_ms(times)}
    if profile:
        row["profile"] = top_functions(profile)
    return row


def subject_dask(args, deadline: Deadline) -> dict:
    try:
        import distributed
    except ImportError as e:
        return {"skipped": f"distributed (Dask) is not importable by {sys.executable}: {e}"}
    order = args.order.split(",")
    row = {"distributed": distributed.__version__, "order": order}
    deadline.phase = f"LocalCluster(n_workers={args.np}, processes=True) to start"
    space = tempfile.mkdtemp(prefix="hvd-executor-bench-dask-")
    try:
        return _dask_rounds(args, deadline, distributed, order, row, space)
    finally:
        shutil.rmtree(space, ignore_errors=True)


def _dask_rounds(args, deadline: Deadline, distributed, order: list, row: dict, space: str) -> dict:
    from hvd.executor import Executor, ExecutorSettings

    t0 = time.perf_counter()
    with distributed.LocalCluster(n_workers=args.np, threads_per_worker=1, processes=True, dashboard_address=None,
                                  local_directory=space, silence_logs=40) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(args.np, timeout=min(120, args.timeout))
        row["cluster_start_ms"] = (time.perf_counter() - t0) * 1e3
        for what in order:
            if what == "submit":
                deadline.phase = f"{args.calls} client.submit(noop).result() round trips"
                call = lambda: client.submit(noop, pure=False).result(timeout=30)  # noqa: E731
                timed(call, min(10, args.calls))
                row["submit_noop_ms"] = stats_ms(timed(call, args.calls))
                continue
            deadline.phase = f"Executor(num_workers={args.np}, client=client).start() and its first run(noop)"
            t1 = time.perf_counter()
            ex = Executor(ExecutorSettings(timeout_s=30, start_timeout_s=min(120, args.timeout)),
                          num_workers=args.np, client=client)
            try:
                ex.start()
                first = ex.run(noop)
                row["executor_start_ms"] = (time.perf_counter() - t1) * 1e3
                if first != [None] * args.np:
                    raise RuntimeError(f"run(noop) on Dask returned {first!r}")
                deadline.phase = f"{args.calls} run(noop) calls on {args.np} Dask-hosted ranks"
                timed(lambda: ex.run(noop), min(10, args.calls))
                row["executor_noop_ms"] = stats_ms(timed(lambda: ex.run(noop), args.calls))
            finally:
                ex.shutdown()
        deadline.phase = "the LocalCluster to close"
    return row


# ---------------------------------------------------------------------------------------------------------------


def _profiled_functions() -> dict:
    """label -> code object of the driver functions whose cumulative time makes the phases of a Trainer run."""
    import torch
    from hvd.executor.executor import Executor
    from hvd.executor.session import Session
    from hvd.train.checkpoint import CheckpointManager
    from hvd.train.trainer import Result, Trainer

    return {
        "Trainer(): argument checks, dataset shards, Executor plan": Trainer.__init__.__code__,
        "Trainer.fit(), in all": Trainer.fit.__code__,
        "  Executor.start(): hvdrun, workers connect back, setup call": Executor.start.__code__,
        "    of which connect (hvdrun until every rank said hello)": Session.connect.__code__,
        "  Executor.run(): training on the workers, reports handled": Executor.run.__code__,
        "    of which persisting rank 0's checkpoints (driver)": CheckpointManager.persist.__code__,
        "  Executor.shutdown()": Executor.shutdown.__code__,
        "result.metrics_dataframe (imports pandas)": Result.metrics_dataframe.fget.__code__,
        "torch.load of the last checkpoint": torch.load.__code__,
    }


def _cumulative(profile: cProfile.Profile, codes: dict) -> dict:
    stats = pstats.Stats(profile).stats
    out = {}
    for label, code in codes.items():
        key = (code.co_filename, code.co_firstlineno, code.co_name)
        entry = stats.get(key)
        out[label] = {"seconds": entry[3] if entry else 0.0, "calls": entry[1] if entry else 0}
    return out


def _wall(argv: list, env: dict, timeout: float, what: str) -> float:
    t0 = time.perf_counter()
    try:
        r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Timeout(f"still waiting for {what} after {timeout:g} s") from None
    if r.returncode != 0:
        tail = r.stderr.decode(errors="replace").strip()[-300:]
        raise RuntimeError(f"{what} exited {r.returncode}: {tail}")
    return time.perf_counter() - t0


def subject_trainer_profile(args, deadline: Deadline) -> dict:
    row = {}
    deadline.phase = "the driver's imports (torch, hvd.torch, hvd.train)"
    t0 = time.perf_counter()
    importlib.import_module("torch")  # the quickstart's first import, timed apart
    t1 = time.perf_counter()
    importlib.import_module("hvd.torch")
    importlib.import_module("hvd.train")
    t2 = time.perf_counter()
    row["import_torch_s"], row["import_hvd_s"] = t1 - t0, t2 - t1
    codes = _profiled_functions()

    storage = args.storage_path or tempfile.mkdtemp(prefix="hvd-executor-bench-quickstart-")
    try:
        return _trainer_profile(args, deadline, row, codes, storage)
    finally:
        if not args.storage_path:
            shutil.rmtree(storage, ignore_errors=True)


def _trainer_profile(args, deadline: Deadline, row: dict, codes: dict, storage: str) -> dict:
    deadline.phase = f"{QUICKSTART} (Trainer) under cProfile"
    saved_argv = sys.argv
    sys.argv = [QUICKSTART, "--storage-path", storage]
    profile = cProfile.Profile()
    t3 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            profile.enable()
            try:
                runpy.run_path(QUICKSTART, run_name="__main__")
            except SystemExit as e:
                if e.code not in (0, None):
                    raise RuntimeError(f"{QUICKSTART} exited with {e.code!r}") from None
            finally:
                profile.disable()
    finally:
        sys.argv = saved_argv
    row["script_s"] = time.perf_counter() - t3
    row["phases"] = _cumulative(profile, codes)
    row["top_own_time"] = top_functions(profile, 12)
    progress = os.path.join(storage, "quickstart", "progress.jsonl")
    with open(progress) as f:
        reports = [json.loads(line) for line in f if line.strip()]
    row["reports"] = [{"time_this_iter_s": r["time_this_iter_s"], "time_total_s": r["time_total_s"]}
                      for r in reports]

    from hvd.runner import _find_hvdrun

    env = dict(os.environ)
    launch = [_find_hvdrun(), "-np", "3", "-H", "localhost:3", sys.executable]
    deadline.phase = "the import floor of the plain job"
    row["plain_import_floor_s"] = _wall(launch + ["-c", "import torch, hvd.torch as h; h.init()"], env,
                                        args.timeout, "hvdrun -np 3 python -c 'import torch, hvd.torch; init()'")
    deadline.phase = "one plain quickstart job"
    row["plain_job_s"] = _wall(launch + [QUICKSTART, "--plain"], env, args.timeout,
                               "hvdrun -np 3 python train_quickstart.py --plain")
    deadline.phase = "the driver's own import floor"
    row["driver_import_floor_s"] = _wall([sys.executable, "-c", "import torch, hvd.torch, hvd.train"], env,
                                         args.timeout, "python -c 'import torch, hvd.torch, hvd.train'")
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--subject", required=True, choices=SUBJECTS)
    ap.add_argument("--np", type=int, default=4, help="ranks (default 4; the quickstart uses its own 3)")
    ap.add_argument("--calls", type=int, default=200, help="timed run(noop) / submit calls (default 200)")
    ap.add_argument("--jobs", type=int, default=5, help="timed hvd.run calls after the first (default 5)")
    ap.add_argument("--order", default="submit,executor", help="dask: which of submit,executor goes first")
    ap.add_argument("--timeout", type=float, default=300, help="deadline of the whole subject, seconds")
    ap.add_argument("--storage-path", help="trainer_profile: where the quickstart's run directory goes")
    ap.add_argument("--profile", action="store_true", help="cProfile of the timed calls (executor, hvd_run)")
    args = ap.parse_args()
    for name in ("np", "calls", "jobs"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if sorted(args.order.split(",")) != ["executor", "submit"]:
        ap.error(f"--order must name submit and executor once each, got {args.order!r}")
    if args.timeout <= 0:
        ap.error(f"--timeout must be positive, got {args.timeout}")

    row = {"bench": "executor", "subject": args.subject, "np": args.np}
    fn = {"executor": subject_executor, "hvd_run": subject_hvd_run, "dask": subject_dask,
          "trainer_profile": subject_trainer_profile}[args.subject]
    deadline = Deadline(args.timeout)
    code = 0
    try:
        row.update(fn(args, deadline))
    except Exception as e:  # reported as the subject's failure, with what it was doing
        row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:600]}"
        code = 1
    finally:
        deadline.cancel()
    if row.get("skipped"):
        code = SKIPPED
    sys.stdout.write(json.dumps(row) + "\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
