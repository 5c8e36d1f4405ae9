#!/usr/bin/python3
"""Driver-side figures of hvd.tune, for bench/compare's `tune` section.

    PYTHONPATH=build/python /usr/bin/python3 bench/tune/tune_bench.py --subject tune --trials 20 --seconds 1
    PYTHONPATH=build/python /usr/bin/python3 bench/tune/tune_bench.py --subject optuna_hvd_run --trials 20

Subjects, each in a fresh driver process, --trials trials of a --seconds-long 2-rank train_fn (hvd.numpy init, one
allreduce, a sleep, one report) on 4 slots of this host:
  tune            hvd.tune.run(..., workers_per_trial=2, hosts="localhost:4"): 2 trials at a time. Also the start
                  of one 2-rank job (hvd.run of the same init and allreduce, median of 3) for the ideal:
                  trials x seconds / 2 + one start. overhead_ms: the median scheduling cost of a trial after
                  the first two (the wait after the trial before it on its slots ended, plus its driver-side time
                  beyond train_fn's sleep); fixed_s: what the search costs once (imports, the first jobs' start,
                  the plot).
  optuna_hvd_run  the obvious hand-written alternative: optuna's study.optimize(objective, n_trials, n_jobs=2) whose
                  objective runs the trial with hvd.run(train_fn, np=2) (a fresh hvdrun job per trial).
Prints one JSON line {"bench": "tune", "subject", "wall_s", ...}. Past --timeout seconds the subject fails (exit 1,
{"error": ...}) naming what it was waiting for.
"""

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time

sys.dont_write_bytecode = True
PHASE = ["starting"]


def train_fn(config):
    import numpy as np

    import hvd.numpy as hn
    import hvd.tune as tune

    hn.init()
    value = float(hn.allreduce(np.array([config["x"]]), op=hn.Average)[0])
    time.sleep(config["seconds"])
    tune.report(loss=value)


def plain_fn(x, seconds):
    import numpy as np

    import hvd.numpy as hn

    hn.init()
    value = float(hn.allreduce(np.array([x]), op=hn.Average)[0])
    time.sleep(seconds)
    return value


def start_only():
    import numpy as np

    import hvd.numpy as hn

    hn.init()
    return float(hn.allreduce(np.array([1.0]), op=hn.Sum)[0])


def subject_tune(args) -> dict:
    import hvd
    import hvd.tune as tune

    PHASE[0] = "three hvd.run jobs (the start of one job)"
    starts = []
    for _ in range(3):
        t = time.perf_counter()
        hvd.run(start_only, np=2)
        starts.append(time.perf_counter() - t)
    start_s = statistics.median(starts)
    PHASE[0] = f"hvd.tune.run of {args.trials} trials"
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        analysis = tune.run(train_fn, {"x": tune.uniform(0, 1), "seconds": args.seconds}, num_samples=args.trials,
                            metric="loss", workers_per_trial=2, hosts="localhost:4", storage_path=d, name="bench",
                            verbose=False, seed=1)
        wall = time.perf_counter() - t
    done = sum(1 for tr in analysis.trials if tr.status == "TERMINATED")
    if done != args.trials:
        raise RuntimeError(f"{done} of {args.trials} trials terminated")
    ideal = args.trials * args.seconds / 2 + start_s
    # A trial's own scheduling cost: the wait between the end of the trial before it on its slots and its start,
    # plus its driver-side time beyond train_fn's sleep; for the trials after the first two (whose time includes
    # the jobs' start).
    trials = sorted(analysis.trials, key=lambda tr: tr.started)
    costs = []
    for i, tr in enumerate(trials[2:], 2):
        before = max(o.ended for o in trials[:i] if o.ended <= tr.started + 1e-3)
        costs.append((tr.started - before) + (tr.ended - tr.started - args.seconds))
    return {"wall_s": wall, "start_s": start_s, "ideal_s": ideal, "ratio_to_ideal": wall / ideal,
            "overhead_ms": statistics.median(costs) * 1000.0,
            "overhead_max_ms": max(costs) * 1000.0, "fixed_s": wall - args.trials / 2 * (args.seconds + statistics.median(costs)),
            "trials": args.trials, "seconds": args.seconds}


def subject_optuna_hvd_run(args) -> dict:
    import optuna

    import hvd

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def objective(trial):
        x = trial.suggest_float("x", 0, 1)
        return hvd.run(plain_fn, args=(x, args.seconds), np=2)[0]

    PHASE[0] = f"optuna study.optimize of {args.trials} trials calling hvd.run"
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    t = time.perf_counter()
    study.optimize(objective, n_trials=args.trials, n_jobs=2)
    wall = time.perf_counter() - t
    return {"wall_s": wall, "trials": args.trials, "seconds": args.seconds}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subject", choices=("tune", "optuna_hvd_run"), required=True)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()

    def expire(*_):
        raise TimeoutError(f"no result within {args.timeout:g} s, waiting for {PHASE[0]}")

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, args.timeout)
    row = {"bench": "tune", "subject": args.subject}
    try:
        row.update(subject_tune(args) if args.subject == "tune" else subject_optuna_hvd_run(args))
    except BaseException as e:  # noqa: B036 -- reported as the subject's failure
        row["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(row), flush=True)
        return 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
