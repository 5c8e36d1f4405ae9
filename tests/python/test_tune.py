"""hvd.tune on this machine: searches whose trials are 2-rank hvdrun jobs packed onto localhost slots. A grid x
samples search runs every config exactly once and finds the best; never more ranks than slots and two trials at
once on 4 slots; TPE with median pruning ends bad trials early (their ranks gone within a second); a trial that
raises, one that is SIGKILLed and a flaky one retried; a SIGKILLed driver resumed; bad input refused before
anything runs; the experiment directory's files."""

import json
import math
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

optuna = pytest.importorskip("optuna")

import hvd.tune as tune  # noqa: E402
import pbt_task  # noqa: E402
from hvd.tune.trial import ERROR, PRUNED, TERMINATED  # noqa: E402


def quadratic(config):
    """loss = (x - 3)^2 + offset, averaged over the ranks; one report per epoch; each rank leaves a file
ran.<pid>.<time> saying what it ran."""
    import hvd.numpy as hn

    hn.init()
    if hn.rank() == 0:
        print(f"quadratic x={config['x']} offset={config.get('offset', 0.0)}", flush=True)
    with open(os.path.join(config["dir"], f"ran.{os.getpid()}.{time.monotonic_ns()}"), "w") as f:
        json.dump({"x": config["x"], "rank": hn.rank(), "size": hn.size()}, f)
    for epoch in range(config.get("epochs", 1)):
        value = (config["x"] - 3.0) ** 2 + config.get("offset", 0.0) + epoch * 0.0
        loss = float(hn.allreduce(np.array([value]), op=hn.Average)[0])
        tune.report(loss=loss, epoch=epoch)
        time.sleep(config.get("sleep", 0.0))


def overlaps(trials):
    """The most trials that ran at the same time (by the driver's start and end times)."""
    edges = sorted([(t.started, 1) for t in trials] + [(t.ended, -1) for t in trials])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_a_grid_times_samples_runs_every_config_once_two_at_a_time_and_finds_the_best(tmp_path):
    config = {"x": tune.grid_search([1.0, 2.0, 3.0, 5.0]), "offset": tune.uniform(0.0, 0.01), "epochs": 2,
              "sleep": 0.3, "dir": str(tmp_path)}
    analysis = tune.run(quadratic, config, num_samples=2, metric="loss", mode="min", workers_per_trial=2,
                        hosts="localhost:4", storage_path=str(tmp_path / "results"), name="grid", seed=7)
    trials = analysis.trials
    assert len(trials) == 8 and all(t.status == TERMINATED for t in trials), [(t.trial_id, t.status, t.error)
                                                                              for t in trials]
    assert sorted(t.config["x"] for t in trials) == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 5.0, 5.0]
    # Exactly once: each trial's two ranks ran it, nothing more.
    ran = [json.loads((tmp_path / name).read_text()) for name in os.listdir(tmp_path) if name.startswith("ran.")]
    assert len(ran) == 16 and all(r["size"] == 2 for r in ran), ran
    # Tune's reuse_actors: the trials ran in the ranks of the first two jobs, started once.
    pids = {name.split(".")[1] for name in os.listdir(tmp_path) if name.startswith("ran.")}
    assert len(pids) == 4, pids
    assert analysis.best_config["x"] == 3.0
    assert analysis.best_result["loss"] == min(t.last("loss") for t in trials)
    # 4 slots, 2-rank trials: never more than 2 at once, and 2 at once at some point.
    assert overlaps(trials) == 2
    # The study: every trial COMPLETE with its last loss.
    study = optuna.load_study(study_name="grid", storage=f"sqlite:///{tmp_path}/results/grid/study.db")
    assert sorted(t.value for t in study.trials) == sorted(t.last("loss") for t in trials)
    # The experiment directory.
    results = analysis.results
    assert list(results["status"]) == [TERMINATED] * 8
    assert {"trial_id", "loss", "best_loss", "training_iteration", "wall_s", "config/x", "config/offset"} <= set(
        results.columns)
    experiment = tmp_path / "results" / "grid"
    assert (experiment / "results.csv").exists() and (experiment / "loss.png").stat().st_size > 1000
    first = experiment / "trial_00000"
    assert json.loads((first / "params.json").read_text())["x"] == trials[0].config["x"]
    assert len((first / "progress.jsonl").read_text().splitlines()) == 2
    for t in trials:  # each trial's output.log holds its own rank 0's line (the reused jobs' output follows them)
        log = (experiment / f"trial_{t.trial_id}" / "output.log").read_text()
        assert f"[0]<stdout>:quadratic x={t.config['x']} offset={t.config['offset']}" in log, (t.trial_id, log)
    # The same name again without resume is refused.
    with pytest.raises(ValueError, match=r"exists: pass resume=True to continue it, or another name"):
        tune.run(quadratic, config, metric="loss", hosts="localhost:4", storage_path=str(tmp_path / "results"),
                 name="grid")


def test_tpe_with_median_pruning_stops_bad_trials_early_and_their_ranks_exit(tmp_path):
    marker = f"HVD_TEST_TUNE={os.getpid()}"
    config = {"offset": tune.grid_search([0.0, 0.1, 40.0, 50.0]), "x": tune.uniform(2.5, 3.5), "epochs": 12,
              "sleep": 0.15, "dir": str(tmp_path)}
    analysis = tune.run(quadratic, config, metric="loss", mode="min", search_alg="optuna", scheduler="median",
                        workers_per_trial=2, hosts="localhost:2", max_concurrent_trials=1, seed=3,
                        storage_path=str(tmp_path / "results"), name="tpe",
                        env=dict(os.environ, HVD_TEST_TUNE=marker.split("=")[1]))
    by_offset = {t.config["offset"]: t for t in analysis.trials}
    assert by_offset[0.0].status == TERMINATED and by_offset[0.1].status == TERMINATED
    for offset in (40.0, 50.0):
        t = by_offset[offset]
        assert t.status == PRUNED, (offset, t.status, len(t.history))
        assert len(t.history) < 12
        assert t.ended - t.pruned_at < 1.0, t.ended - t.pruned_at   # its job ended within a second
    assert analysis.best_config["offset"] == 0.0
    left = subprocess.run(["pgrep", "-f", "hvd.executor.worker"], capture_output=True, text=True).stdout.split()
    mine = [p for p in left if marker.encode() in open(f"/proc/{p}/environ", "rb").read().split(b"\0")]
    assert not mine


def faulty(config):
    import hvd.numpy as hn

    # The flaky trial's first attempt is told by the flag file, which every rank looks for and then leaves before
    # init: once any rank raises (after init), the flag is there, however soon the attempt's other ranks are
    # stopped. (Left by rank 0 after init, a rank 1 that raised first could have the attempt torn down before
    # rank 0 wrote it, and the retry failed as a first attempt again.)
    first_attempt = config["mode"] == "flaky" and not os.path.exists(config["flag"])
    if config["mode"] == "flaky":
        open(config["flag"], "a").close()
    hn.init()
    if config["mode"] == "raise" and hn.rank() == 1:
        raise RuntimeError("bad hyperparameters")
    if config["mode"] == "kill" and hn.rank() == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    if first_attempt:
        raise RuntimeError("first attempt fails")
    tune.report(loss=float(hn.allreduce(np.array([1.0]), op=hn.Sum)[0]))


def test_a_raising_a_killed_and_a_flaky_trial(tmp_path):
    config = {"mode": tune.grid_search(["ok", "raise", "kill", "flaky"]), "flag": str(tmp_path / "flag")}
    analysis = tune.run(faulty, config, metric="loss", workers_per_trial=2, hosts="localhost:4", max_failures=1,
                        storage_path=str(tmp_path / "results"), name="faults")
    by_mode = {t.config["mode"]: t for t in analysis.trials}
    assert by_mode["ok"].status == TERMINATED and by_mode["ok"].last("loss") == 2.0
    assert by_mode["flaky"].status == TERMINATED and by_mode["flaky"].attempts == 2
    raised = by_mode["raise"]
    assert raised.status == ERROR and raised.attempts == 2
    assert "rank 1 raised RuntimeError: bad hyperparameters" in raised.error
    assert "Traceback" in (tmp_path / "results" / "faults" / f"trial_{raised.trial_id}" / "error.txt").read_text()
    killed = by_mode["kill"]
    assert killed.status == ERROR and "signal 9" in killed.error, killed.error
    results = analysis.results.set_index("config/mode")
    assert results.loc["raise", "error"].startswith("rank 1 raised RuntimeError")


DRIVER = """
import sys, time
sys.path.insert(0, {tests!r})
import hvd.tune as tune
from test_tune import quadratic
config = {{"x": tune.grid_search([1.0, 2.0, 3.0, 4.0]), "epochs": 3, "sleep": 0.4, "dir": {dir!r}}}
a = tune.run(quadratic, config, metric="loss", workers_per_trial=2, hosts="localhost:2", max_concurrent_trials=1,
             storage_path={results!r}, name="resumable", resume={resume}, verbose=False)
print("best", a.best_config["x"], len(a.trials), flush=True)
"""


def driver(tmp_path, resume: bool, wait: bool):
    """DRIVER's search (4 sequential trials into tmp_path/results): a Popen reading its output, or (wait) its
    CompletedProcess."""
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(tests=os.path.dirname(os.path.abspath(__file__)), dir=str(tmp_path),
                                    results=str(tmp_path / "results"), resume=resume))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    if wait:
        return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)


def test_a_killed_driver_leaves_nothing_running_and_resume_runs_only_what_did_not_finish(tmp_path):
    driver_ = driver(tmp_path, resume=False, wait=False)
    started = 0
    for line in driver_.stdout:
        started += "started" in line
        if started == 2:  # the first trial finished, the second runs
            break
    # Killed once the second trial's ranks run (each leaves its ran.* file after init; the trial then has 1.2 s of
    # epochs left), not after a fixed sleep, which a loaded machine can outlast before they start.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and \
            not any(json.loads(p.read_text() or "{}").get("x") == 2.0 for p in tmp_path.glob("ran.*")):
        time.sleep(0.02)
    driver_.kill()
    driver_.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _workers_of(tmp_path):
        time.sleep(0.1)
    assert not _workers_of(tmp_path)
    ran_before = {json.loads(p.read_text())["x"] for p in tmp_path.glob("ran.*")}
    assert 1.0 in ran_before and 2.0 in ran_before
    for p in tmp_path.glob("ran.*"):
        p.unlink()
    out = driver(tmp_path, resume=True, wait=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "best 3.0 4" in out.stdout, out.stdout
    rerun = sorted(json.loads(p.read_text())["x"] for p in tmp_path.glob("ran.*"))
    assert rerun == [2.0, 2.0, 3.0, 3.0, 4.0, 4.0], rerun   # the finished trial not again, the running one again


def _workers_of(directory):
    """Ranks of the killed driver's trials still alive (they write into `directory`)."""
    out = subprocess.run(["pgrep", "-f", "hvd.executor.worker"], capture_output=True, text=True).stdout.split()
    alive = []
    for pid in out:
        try:
            if list(directory.glob(f"ran.{pid}.*")):
                alive.append(pid)
        except OSError:
            pass
    return alive


def test_bad_input_is_refused_before_anything_runs(tmp_path):
    base = dict(metric="loss", hosts="localhost:4", storage_path=str(tmp_path), name="bad")
    cases = [
        (dict(config={"x": lambda spec: 1}), ValueError, r"config\['x'\] = .*unknown search space type function"),
        (dict(config={"x": optuna.distributions.FloatDistribution(0, 1)}), ValueError,
         r"unknown search space type optuna\.distributions\.FloatDistribution"),
        (dict(num_samples=0), ValueError, r"num_samples=0: expected an int >= 1"),
        (dict(workers_per_trial=8), ValueError, r"workers_per_trial=8 x 1 slot\(s\) each needs 8 slots; "
                                               r"hosts='localhost:4' has 4"),
        (dict(mode="median"), ValueError, r"mode='median': choose 'min' or 'max'"),
        (dict(search_alg="bayes"), ValueError, r"search_alg='bayes': choose from"),
        (dict(scheduler="hyperband"), ValueError, r"scheduler='hyperband': choose from"),
        (dict(workers_per_trial=3, nodes_per_trial=2), ValueError, r"workers_per_trial=3 is not a multiple of "
                                                                  r"nodes_per_trial=2"),
        (dict(hosts="localhost:4", client=object()), ValueError, r"pass at most one of them"),
        (dict(settings=5), TypeError, r"settings must be an hvd.executor.ExecutorSettings, got int"),
        (dict(env={"A": 1}), TypeError, r"env must map str to str, got 'A': 1"),
        (dict(gpus_per_worker=1), ValueError, r"gpus_per_worker=1 without use_gpu=True"),
        (dict(storage="nope"), ValueError, r"storage='nope': "),
        (dict(storage_path=5), TypeError, r"storage_path must be a folder's path, got int"),
    ]
    for extra, error, pattern in cases:
        kwargs = dict(base, **extra)
        config = kwargs.pop("config", {"x": 1.0})
        with pytest.raises(error, match=pattern):
            tune.run(quadratic, config, **kwargs)
    for make, pattern in ((lambda: tune.choice([]), r"choice: categories must be a non-empty list, got \[\]"),
                          (lambda: tune.loguniform(0, 1), r"loguniform\(0, 1\): a log scale needs low > 0"),
                          (lambda: tune.randint(3, 3), r"randint\(3, 3\): low must be below high"),
                          (lambda: tune.grid_search(5), r"grid_search: values must be a non-empty list, got 5")):
        with pytest.raises(ValueError, match=pattern):
            make()
    assert not (tmp_path / "bad").exists()


def reports_accuracy(config):
    import hvd.numpy as hn

    hn.init()
    tune.report(accuracy=0.5, epoch=0)


def test_a_metric_no_trial_reports_is_named_at_the_end_with_the_reported_keys(tmp_path):
    with pytest.raises(ValueError, match=r"metric='loss': no trial reported it \(the reports held \['accuracy', "
                                         r"'epoch'\]\)"):
        tune.run(reports_accuracy, {"x": 1}, metric="loss", hosts="localhost:2", workers_per_trial=2,
                 storage_path=str(tmp_path), name="nometric")
    assert (tmp_path / "nometric" / "results.csv").exists()


def with_checkpoints(config):
    """Three epochs; loss is lowest at epoch 1; each epoch's checkpoint holds its epoch."""
    import tempfile

    import hvd.numpy as hn
    import hvd.train as train

    hn.init()
    for epoch in range(3):
        loss = config["base"] + [2.0, 0.5, 1.0][epoch]
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch.txt"), "w") as f:
                f.write(str(epoch))
            train.report({"loss": loss, "epoch": epoch}, checkpoint=train.Checkpoint.from_directory(d))


def test_get_best_checkpoint_is_the_best_trials_best_checkpoint(tmp_path):
    analysis = tune.run(with_checkpoints, {"base": tune.grid_search([0.0, 10.0])}, metric="loss", mode="min",
                        workers_per_trial=2, hosts="localhost:4", storage_path=str(tmp_path), name="ckpt")
    assert analysis.best_config == {"base": 0.0}
    assert repr(analysis) == "Analysis(2 trials, metric='loss', mode='min', best_config={'base': 0.0})"
    # Without a metric there is no best config, and the repr says what there is instead of raising.
    from hvd.tune.analysis import Analysis
    assert repr(Analysis(analysis.trials, None, "min", analysis.experiment_path)) == \
        "Analysis(2 trials, metric=None, mode='min')"
    best = analysis.get_best_checkpoint()
    assert best is not None and open(os.path.join(best.path, "epoch.txt")).read() == "1"
    assert best.path.startswith(analysis.best_logdir)


def test_ctrl_c_waits_for_the_drivers_next_step():
    """The driver's Ctrl-C is raised only where its loop checks for it, so never inside a write to the study; a
    second one at once; and the handler is put back."""
    from hvd.tune.tuner import _DeferredInterrupt
    ctrl_c = _DeferredInterrupt()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs here, in the middle of "a write": nothing may be raised
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.check()
        ctrl_c.check()  # taken once
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)  # the second, before a check: raised at once
            time.sleep(1)
    finally:
        ctrl_c.restore()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_stops_every_trial_and_resume_continues(tmp_path):
    results = str(tmp_path / "results")
    driver_ = driver(tmp_path, resume=False, wait=False)
    for line in driver_.stdout:
        if "started" in line:
            break
    # Ctrl-C once the first trial's ranks run (each leaves its ran.* file after init; the trial then has 1.2 s of
    # epochs left), not after a fixed sleep: on a loaded machine the ranks may not have started by then, nor on
    # an idle one may the trial still be running.
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob("ran.*")) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert list(tmp_path.glob("ran.*")), "the first trial's ranks did not start within 30 s"
    driver_.send_signal(signal.SIGINT)
    rest = driver_.communicate(timeout=30)[0]
    assert driver_.returncode != 0 and "KeyboardInterrupt" in rest, rest
    assert not _workers_of(tmp_path)  # stopped before the driver exited
    study = optuna.load_study(study_name="resumable", storage=f"sqlite:///{results}/resumable/study.db")
    interrupted = [t for t in study.trials if t.user_attrs.get("interrupted")]
    assert len(interrupted) == 1 and interrupted[0].state == optuna.trial.TrialState.FAIL, \
        (rest, [(t.number, t.state, t.user_attrs) for t in study.trials])
    out = driver(tmp_path, resume=True, wait=True)
    assert out.returncode == 0 and "best 3.0 4" in out.stdout, out.stdout + out.stderr


def test_the_live_table_redraws_in_place():
    import io

    from hvd.tune.progress import Progress
    from hvd.tune.trial import RUNNING, Trial

    stream = io.StringIO()
    progress = Progress("loss", "min", total=3, stream=stream, live=True)
    a, b = Trial(0, 0, {"lr": 0.1}, "/tmp/a"), Trial(1, 1, {"lr": 0.2}, "/tmp/b")
    a.status, a.started, a.history = TERMINATED, time.time() - 2, [{"loss": 0.5}]
    b.status, b.started, b.history = RUNNING, time.time() - 1, [{"loss": 0.7}]
    progress.table([a, b], force=True)
    progress.table([a, b], force=True)
    text = stream.getvalue()
    assert text.count("== hvd.tune: 1 running, 1 pending, 1 done, 0 pruned, 0 error; best loss=0.5 (trial 00000)") == 2
    assert "\x1b[4F\x1b[J" in text   # the second drawing replaces the first's 4 lines
    assert "00001  RUNNING           0.7" in text


def test_without_reuse_every_trial_is_a_fresh_job(tmp_path):
    analysis = tune.run(quadratic, {"x": tune.grid_search([1.0, 2.0, 3.0]), "dir": str(tmp_path)}, metric="loss",
                        workers_per_trial=2, hosts="localhost:2", reuse_actors=False, storage_path=str(tmp_path / "r"),
                        name="fresh")
    assert [t.status for t in analysis.trials] == [TERMINATED] * 3
    pids = {name.split(".")[1] for name in os.listdir(tmp_path) if name.startswith("ran.")}
    assert len(pids) == 6, pids


def test_the_examples_run_as_they_are(tmp_path):
    source = os.environ.get("HVD_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    simple = subprocess.run([sys.executable, os.path.join(source, "examples", "python", "tune_simple.py"), "--hosts",
                             "localhost:4", "--storage-path", str(tmp_path)], capture_output=True, text=True,
                            timeout=300, env=env)
    assert simple.returncode == 0, simple.stdout + simple.stderr
    assert simple.stdout.strip().splitlines()[-1] == "{'epochs': 3}", simple.stdout
    deephyper = subprocess.run([sys.executable, os.path.join(source, "examples", "python", "tune_deephyper.py"),
                                "--hosts", "localhost:4", "--evals", "4", "--storage-path", str(tmp_path)],
                               capture_output=True, text=True, timeout=300, env=env)
    assert deephyper.returncode == 0, deephyper.stdout + deephyper.stderr
    assert deephyper.stdout.strip().splitlines()[-1].startswith("best objective -"), deephyper.stdout


def test_distributed_trainable_creator_sizes_the_trials(tmp_path):
    trainable = tune.DistributedTrainableCreator(quadratic, num_slots=2, num_hosts=1, timeout_s=20)
    analysis = tune.run(trainable, {"x": tune.grid_search([3.0]), "dir": str(tmp_path)}, metric="loss",
                        hosts="localhost:2", storage_path=str(tmp_path / "r"), name="creator")
    assert analysis.trials[0].status == TERMINATED
    ran = [json.loads((tmp_path / n).read_text()) for n in os.listdir(tmp_path) if n.startswith("ran.")]
    assert sorted(r["rank"] for r in ran) == [0, 1] and all(r["size"] == 2 for r in ran)
    with pytest.raises(ValueError, match=r"num_workers=2 and num_slots=2: pass one of them"):
        tune.DistributedTrainableCreator(quadratic, num_workers=2, num_slots=2)
    with pytest.raises(ValueError, match=r"replicate_pem=True"):
        tune.DistributedTrainableCreator(quadratic, replicate_pem=True)


def test_asha_prunes_trials_worse_than_the_rung_before_them(tmp_path):
    config = {"offset": tune.grid_search([0.0, 10.0, 20.0, 30.0, 40.0, 50.0]), "x": 3.0, "epochs": 6, "sleep": 0.15,
              "dir": str(tmp_path)}
    analysis = tune.run(quadratic, config, metric="loss", mode="min", scheduler="asha", workers_per_trial=2,
                        hosts="localhost:2", max_concurrent_trials=1, storage_path=str(tmp_path / "r"), name="asha")
    by_offset = {t.config["offset"]: t for t in analysis.trials}
    assert by_offset[0.0].status == TERMINATED and len(by_offset[0.0].history) == 6
    pruned = [o for o, t in by_offset.items() if t.status == PRUNED]
    assert pruned and all(len(by_offset[o].history) < 6 for o in pruned), {o: t.status for o, t in by_offset.items()}


def _pbt_search(tmp_path, name, config, num_samples=4, **kwargs):
    """A search of pbt_task.drifting_optimum's 4 two-rank trials at once on 8 slots (num_samples of config, which
    holds 4 configs or a grid of 4), seed 3; its Analysis and its exploits (pbt_global.txt's lines, in order)."""
    (tmp_path / f"{name}_starts").mkdir()
    analysis = tune.run(pbt_task.drifting_optimum, dict(config, dir=str(tmp_path / f"{name}_starts")), name=name,
                        num_samples=num_samples, metric="skill", mode="max", workers_per_trial=2,
                        hosts="localhost:8", seed=3, storage_path=str(tmp_path), num_to_keep=2, **kwargs)
    assert all(t.status == TERMINATED for t in analysis.trials), \
        [(t.trial_id, t.status, t.error) for t in analysis.trials]
    log = tmp_path / name / "pbt_global.txt"
    exploits = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return analysis, exploits


def _without_timing(exploits):
    """The exploits with the config keys that only set the run's pace and place (step_s, dir) left out."""
    def strip(config):
        return {k: v for k, v in config.items() if k not in ("step_s", "dir")}
    return [dict(e, old_config=strip(e["old_config"]), new_config=strip(e["new_config"])) for e in exploits]


def _rows(trial):
    return {row["training_iteration"]: row for row in trial.history}


def test_synchronous_pbt_gives_the_same_exploits_whatever_the_schedule_and_beats_random_search(tmp_path):
    """4 trials of 2 ranks, 60 steps each, the same 4 initial learning rates (same seed). Random search keeps them;
    synchronous PBT stops every trial at each shared point (every 3 iterations), and the worst one takes the best
    one's checkpoint and its lr halved, doubled or drawn anew. Which trial ranks where depends only on the reported
    values, so two searches whose steps take 0 and 0.05 s (a different schedule) decide alike, exploit for
    exploit; and since every outcome is fixed, so is its benefit: 2.6x random search's best skill with this seed
    (a schedule-free simulation gives 2x-4x over 200 seeds), of which 1.3x is asserted."""
    config = {"lr": tune.loguniform(0.01, 0.1), "steps": 60, "population": 4}
    plain, _ = _pbt_search(tmp_path, "random", dict(config, step_s=0.0))
    runs = []
    for name, step_s in (("fast", 0.0), ("slow", 0.05)):
        pbt = tune.PopulationBasedTraining(perturbation_interval=3, perturbation_factors=(2.0, 0.5),
                                           hyperparam_mutations={"lr": tune.loguniform(1e-4, 0.1)}, synch=True)
        runs.append(_pbt_search(tmp_path, name, dict(config, step_s=step_s), scheduler=pbt))
    (fast, fast_exploits), (slow, slow_exploits) = runs
    assert _without_timing(fast_exploits) == _without_timing(slow_exploits)
    assert [[r["skill"] for r in t.history] for t in fast.trials] == \
        [[r["skill"] for r in t.history] for t in slow.trials]
    # Each shared point (3, 6, ..., 60) has exactly one exploit: 4 trials, a quantile of 1 at either end.
    assert [e["training_iteration"] for e in fast_exploits] == list(range(3, 61, 3)), fast_exploits
    by_id = {t.trial_id: t for t in fast.trials}
    # The same seed draws the same initial configs for the plan's trials in both searches.
    lrs = {t.trial_id: plain.trials[t.index].config["lr"] for t in fast.trials}
    for e in fast_exploits:
        trial, donor, point = by_id[e["trial"]], by_id[e["donor"]], e["training_iteration"]
        assert trial is not donor
        # The new config is the donor's at that point, explored: its lr halved or doubled, or drawn anew.
        assert e["old_config"]["lr"] == lrs[e["trial"]], (e, lrs)
        new_lr = e["new_config"]["lr"]
        assert math.isclose(new_lr, 2 * lrs[e["donor"]]) or math.isclose(new_lr, lrs[e["donor"]] / 2) or \
            1e-4 <= new_lr <= 0.1, (e, lrs)
        lrs[e["trial"]] = new_lr
        # The donor's checkpoint is the one it held at that point, and the trial went on from its state: the
        # next step is one past the donor's, and from the donor's skill.
        held = _rows(donor)[point]
        assert held["checkpoint_dir_name"] == e["checkpoint"], (e, held)
        if point < 60:
            after = _rows(trial)[point + 1]
            assert after["step"] == held["step"] + 1 and after["skill"] > held["skill"], (e, held, after)
        # The worst of the four at the point took the best one's state.
        scores = sorted((_rows(t)[point]["skill"], t.trial_id) for t in fast.trials)
        assert (scores[0][1], scores[-1][1]) == (e["trial"], e["donor"]), (e, scores)
    for t in fast.trials:  # every trial reported every iteration once: nothing past a point was kept
        assert [r["training_iteration"] for r in t.history] == list(range(1, 61))
        assert [r["step"] for r in t.history] == list(range(1, 61))
        mine = [e for e in fast_exploits if e["trial"] == t.trial_id]
        if mine:
            assert t.config == mine[-1]["new_config"], (t.trial_id, t.config, mine[-1])
            assert json.loads((tmp_path / "fast" / f"trial_{t.number:05d}" / "params.json").read_text()) == t.config
    best_plain = max(t.last("skill") for t in plain.trials)
    best_pbt = max(t.last("skill") for t in fast.trials)
    assert best_pbt > 1.3 * best_plain, (best_pbt, best_plain)
    # The search's best trial ended on a learning rate below every one random search started with and kept.
    assert fast.best_config["lr"] < min(t.config["lr"] for t in plain.trials), \
        (fast.best_config, [t.config for t in plain.trials])


def test_asynchronous_pbt_exploits_only_a_reported_checkpoint_of_another_trial_with_its_config_explored(tmp_path):
    """The default, asynchronous mode decides at each trial's own point against what the others reported by then,
    so how many exploits happen and from whom depends on the schedule; what holds for every schedule is checked.
    One of the four learning rates (1e-6) gains almost nothing, so its trial is the worst whenever another trial
    has reported, and exploits at its first point unless the other three have not reported once in its first 3
    steps."""
    config = {"lr": tune.grid_search([1e-6, 0.03, 0.01, 0.003]), "steps": 30, "population": 4, "step_s": 0.1}
    pbt = tune.PopulationBasedTraining(perturbation_interval=3, perturbation_factors=(2.0, 0.5),
                                       hyperparam_mutations={"lr": tune.loguniform(1e-4, 0.1)})
    found, exploits = _pbt_search(tmp_path, "pbt", config, num_samples=1, scheduler=pbt)
    assert exploits, "no exploit"
    by_id = {t.trial_id: t for t in found.trials}
    configs = {t.trial_id: {"lr": [1e-6, 0.03, 0.01, 0.003][t.index]} for t in found.trials}
    for e in exploits:  # in the order they were decided
        donor = by_id[e["donor"]]
        assert e["trial"] != e["donor"] and e["trial"] in by_id
        # The donor had reported that checkpoint.
        assert e["checkpoint"] in {r["checkpoint_dir_name"] for r in donor.history}, (e, donor.history)
        # The new config is the donor's at that moment, explored: its lr halved or doubled, or drawn anew.
        donor_lr, new_lr = configs[e["donor"]]["lr"], e["new_config"]["lr"]
        assert math.isclose(new_lr, 2 * donor_lr) or math.isclose(new_lr, donor_lr / 2) or 1e-4 <= new_lr <= 0.1, \
            (e, donor_lr)
        assert {k: v for k, v in e["new_config"].items() if k != "lr"} == \
            {k: v for k, v in e["old_config"].items() if k != "lr"}
        configs[e["trial"]] = {"lr": new_lr}
    for trial_id, trial in by_id.items():
        mine = [e for e in exploits if e["trial"] == trial_id]
        if mine:
            assert trial.config == mine[-1]["new_config"], (trial_id, trial.config, mine[-1])
            assert json.loads((tmp_path / "pbt" / f"trial_{trial.number:05d}" / "params.json").read_text()) == \
                trial.config


def test_pbt_bad_input_is_refused_before_anything_runs(tmp_path):
    for kwargs, message in [
        (dict(perturbation_interval=0), "perturbation_interval=0"),
        (dict(quantile_fraction=0.7), "quantile_fraction=0.7"),
        (dict(resample_probability=2), "resample_probability=2"),
        (dict(perturbation_factors=(1.2,)), "perturbation_factors=(1.2,)"),
        (dict(hyperparam_mutations={"lr": []}), "hyperparam_mutations['lr'] = []"),
        (dict(hyperparam_mutations={"lr": 3}), "hyperparam_mutations['lr'] = 3"),
        (dict(burn_in_period=-1), "burn_in_period=-1"),
        (dict(mode="up"), "mode='up'"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            tune.PopulationBasedTraining(**kwargs)
    with pytest.raises(TypeError, match="synch must be a bool, got str 'yes'"):
        tune.PopulationBasedTraining(synch="yes")
    with pytest.raises(TypeError, match="hyperparam_mutations must be a dict, got list"):
        tune.PopulationBasedTraining(hyperparam_mutations=["lr"])
    run = dict(storage_path=str(tmp_path), workers_per_trial=1, hosts="localhost:1")
    with pytest.raises(ValueError, match="scheduler='pbt' needs metric="):
        tune.run(pbt_task.drifting_optimum, {"lr": tune.uniform(0.1, 1)}, scheduler="pbt", **run)
    with pytest.raises(ValueError, match="the config has no domain"):
        tune.run(pbt_task.drifting_optimum, {"lr": 0.1}, scheduler="pbt", metric="skill", **run)
    with pytest.raises(ValueError, match="is a function and the config has no 'momentum'"):
        tune.run(pbt_task.drifting_optimum, {"lr": 0.1}, metric="skill",
                 scheduler=tune.PopulationBasedTraining(hyperparam_mutations={"momentum": lambda: 0.9}), **run)
    with pytest.raises(ValueError, match="metric='skill' and the scheduler's metric='loss' differ"):
        tune.run(pbt_task.drifting_optimum, {"lr": 0.1}, metric="skill",
                 scheduler=tune.PopulationBasedTraining(metric="loss", hyperparam_mutations={"lr": [0.1, 0.2]}), **run)
    assert not list(tmp_path.iterdir())  # nothing ran, no experiment left behind
