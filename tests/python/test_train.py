"""hvd.train (Ray Train's HorovodTrainer workflow) on hvd.Executor: real workers through build/hvdrun on
localhost, 2-3 ranks.

The training functions live at module level and reach the workers by reference (the Trainer passes the
driver's sys.path, so this module imports there); they write what each rank saw into files under a directory
given in train_loop_config, since only rank 0's reports reach the driver.
"""

import json
import os
import signal
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import PACKAGE_DIR, PYTHON
from proc_table import children

import hvd.train as train
from hvd.train import (Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, Trainer,
                       TrainingFailedError)
from hvd.train.checkpoint import list_checkpoints, read_metrics

SOURCE_DIR = Path(os.environ.get("HVD_SOURCE_DIR", Path(__file__).resolve().parents[2]))
QUICKSTART = SOURCE_DIR / "examples" / "python" / "train_quickstart.py"


def _rank():
    return train.get_context().get_world_rank()


def _dump(directory, name, value):
    path = os.path.join(directory, name)
    with open(path + ".tmp", "w") as f:
        json.dump(value, f)
    os.replace(path + ".tmp", path)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = torch.nn.Linear(1, 15)
        self.relu = torch.nn.ReLU()
        self.layer2 = torch.nn.Linear(15, 1)

    def forward(self, x):
        return self.layer2(self.relu(self.layer1(x)))


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


# ------------------------------------------------------------------------------------------------ quickstart

def quickstart_loop(config):
    import hvd.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    context = train.get_context()
    shard = train.get_dataset_shard("train")
    _dump(config["out"], f"shard_{context.get_world_rank()}",
          {"xs": [int(row["x"]) for row in shard], "size": context.get_world_size(),
           "local_rank": context.get_local_rank(), "local_size": context.get_local_world_size(),
           "node_rank": context.get_node_rank(), "checkpoint": train.get_checkpoint() is not None,
           "name": context.get_experiment_name()})
    torch.manual_seed(context.get_world_rank())  # different on each rank: the broadcast must fix that
    model = MLP()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.002),
                                         named_parameters=model.named_parameters(), op=hvd.Average)
    for epoch in range(3):
        for batch in shard.iter_torch_batches(batch_size=4, dtypes=torch.float):
            loss = torch.nn.functional.mse_loss(model(batch["x"].unsqueeze(1)), batch["y"].unsqueeze(1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        flat = _flat(model)
        in_sync = bool(torch.equal(hvd.broadcast(flat, root_rank=0, name=f"sync{epoch}"), flat))
        in_sync = hvd.allreduce(torch.tensor(float(in_sync)), op=hvd.Min, name=f"all{epoch}").item() == 1.0
        with tempfile.TemporaryDirectory() as tmpdir:
            torch.save(model.state_dict(), os.path.join(tmpdir, "model.pt"))
            train.report({"epoch": epoch, "loss": loss.item(), "in_sync": in_sync},
                         checkpoint=Checkpoint.from_directory(tmpdir))


def test_quickstart(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    rows = [{"x": x, "y": x + 1} for x in range(32)]
    trainer = Trainer(quickstart_loop, train_loop_config={"out": str(out)},
                      scaling_config=ScalingConfig(num_workers=3),
                      run_config=RunConfig(storage_path=str(tmp_path / "results"), name="quick"),
                      datasets={"train": rows})
    result = trainer.fit()

    assert result.error is None and result.attempts == 1
    assert result.metrics["epoch"] == 2 and result.metrics["training_iteration"] == 3, result.metrics
    assert all(row["in_sync"] for row in result.metrics_history), result.metrics_history
    assert result.path == str(tmp_path / "results" / "quick")
    on_disk = [os.path.basename(c.path) for _, c in list_checkpoints(result.path)]
    assert on_disk == ["checkpoint_000000", "checkpoint_000001", "checkpoint_000002"]
    assert result.checkpoint.path == os.path.join(result.path, "checkpoint_000002")
    assert [c.path for c, _ in result.best_checkpoints] == [os.path.join(result.path, n) for n in on_disk]
    assert read_metrics(result.checkpoint)["epoch"] == 2
    assert list(result.metrics_dataframe["epoch"]) == [0, 1, 2]
    with result.checkpoint.as_directory() as directory:
        state = torch.load(os.path.join(directory, "model.pt"))
    assert set(state) == {"layer1.weight", "layer1.bias", "layer2.weight", "layer2.bias"}
    progress = [json.loads(line) for line in (Path(result.path) / "progress.jsonl").read_text().splitlines()]
    assert [row["epoch"] for row in progress] == [0, 1, 2]
    assert [row["checkpoint_dir_name"] for row in progress] == on_disk
    summary = json.loads((Path(result.path) / "result.json").read_text())
    assert summary["checkpoint"] == result.checkpoint.path and summary["error"] is None

    shards = [json.loads((out / f"shard_{r}").read_text()) for r in range(3)]
    sizes = [len(s["xs"]) for s in shards]
    assert sizes == [11, 11, 10], sizes
    assert sorted(x for s in shards for x in s["xs"]) == list(range(32))
    assert all(s["xs"] == list(range(s["xs"][0], s["xs"][0] + len(s["xs"]))) for s in shards)  # contiguous
    assert all(s["size"] == 3 and s["local_size"] == 3 and s["node_rank"] == 0 for s in shards)
    assert sorted(s["local_rank"] for s in shards) == [0, 1, 2]
    assert not any(s["checkpoint"] for s in shards) and all(s["name"] == "quick" for s in shards)


def test_quickstart_example(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR))
    completed = subprocess.run([PYTHON, str(QUICKSTART), "--storage-path", str(tmp_path)], env=env,
                               capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "'epoch': 2" in completed.stdout, completed.stdout
    assert f"checkpoint: {tmp_path / 'quickstart' / 'checkpoint_000002'}" in completed.stdout, completed.stdout


# ------------------------------------------------------------------------------------------- restarts

def restart_loop(config):
    """6 deterministic epochs; rank 1 SIGKILLs itself at the start of epoch kill_epoch unless the marker file
    exists (it creates it first, so only the first attempt dies)."""
    import hvd.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    rank = _rank()
    torch.manual_seed(0)
    model = MLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.002, momentum=0.5)
    start = 0
    checkpoint = train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            saved = torch.load(os.path.join(directory, "state.pt"))
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        start = saved["epoch"] + 1
        if rank == 0:
            _dump(config["out"], f"resumed_{os.getpid()}", saved["epoch"])
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), op=hvd.Average)
    shard = train.get_dataset_shard("train")
    marker = os.path.join(config["out"], "killed")
    for epoch in range(start, 6):
        if rank == 1 and epoch == config["kill_epoch"] and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        for batch in shard.iter_torch_batches(batch_size=4, dtypes=torch.float):
            loss = torch.nn.functional.mse_loss(model(batch["x"].unsqueeze(1)), batch["y"].unsqueeze(1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with tempfile.TemporaryDirectory() as tmpdir:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                       os.path.join(tmpdir, "state.pt"))
            train.report({"epoch": epoch, "loss": loss.item()}, checkpoint=Checkpoint.from_directory(tmpdir))


def _restart_trainer(tmp_path, name, max_failures, kill_epoch, resume=None):
    rows = [{"x": x / 8, "y": x / 8 + 1} for x in range(24)]
    return Trainer(restart_loop, train_loop_config={"out": str(tmp_path), "kill_epoch": kill_epoch},
                   scaling_config=ScalingConfig(num_workers=2),
                   run_config=RunConfig(storage_path=str(tmp_path / "results"), name=name,
                                        failure_config=FailureConfig(max_failures=max_failures)),
                   datasets={"train": rows}, resume_from_checkpoint=resume)


def _model_state(checkpoint):
    return torch.load(os.path.join(checkpoint.path, "state.pt"))["model"]


def test_restart_after_sigkill_resumes_bit_identical(tmp_path):
    result = _restart_trainer(tmp_path, "restart", max_failures=1, kill_epoch=3).fit()
    assert (tmp_path / "killed").exists()
    assert result.attempts == 2 and result.error is None
    assert result.metrics["epoch"] == 5, result.metrics
    resumed = [json.loads(p.read_text()) for p in tmp_path.glob("resumed_*")]
    assert len(resumed) == 1 and resumed[0] <= 2, resumed
    # The persisted checkpoint the restart resumed from: the only one holding that epoch (the restart reports
    # later epochs only).
    matches = [c for _, c in list_checkpoints(result.path) if read_metrics(c)["epoch"] == resumed[0]]
    assert len(matches) == 1, [read_metrics(c) for _, c in list_checkpoints(result.path)]
    epochs = [row["epoch"] for row in result.metrics_history]
    assert epochs[-(5 - resumed[0]):] == list(range(resumed[0] + 1, 6)), epochs

    again = _restart_trainer(tmp_path, "again", max_failures=0, kill_epoch=3, resume=matches[0]).fit()
    assert again.attempts == 1 and again.metrics["epoch"] == 5
    first, second = _model_state(result.checkpoint), _model_state(again.checkpoint)
    assert first.keys() == second.keys()
    for key in first:
        assert torch.equal(first[key], second[key]), key


def test_max_failures_zero_raises_naming_the_dead_rank(tmp_path):
    started = time.monotonic()
    with pytest.raises(TrainingFailedError) as info:
        _restart_trainer(tmp_path, "fail", max_failures=0, kill_epoch=1).fit()
    message = str(info.value)
    assert "rank 1" in message and "1 time(s)" in message and "max_failures=0" in message, message
    assert "SIGKILL" in message or "signal 9" in message or "killed" in message, message
    assert type(info.value.__cause__).__name__ == "ExecutorError"
    assert info.value.result.error is info.value.__cause__
    assert time.monotonic() - started < 60
    summary = json.loads((tmp_path / "results" / "fail" / "result.json").read_text())
    assert "rank 1" in summary["error"] and summary["failures"] == 1


def flaky_loop(config):
    """Attempt 0 raises before reporting, attempt 1 reports a checkpoint and then raises, attempt 2 succeeds;
    every attempt records what get_checkpoint() gave this rank."""
    out, rank = Path(config["out"]), _rank()
    attempt = len(list(out.glob(f"attempt_{rank}_*")))
    (out / f"attempt_{rank}_{attempt}").write_text("")
    checkpoint = train.get_checkpoint()
    seen = Path(checkpoint.path, "state").read_text() if checkpoint is not None else None
    _dump(config["out"], f"seen_{attempt}_{rank}", seen)
    if attempt == 0:
        raise ValueError(f"attempt {attempt} fails on rank {rank}")
    with tempfile.TemporaryDirectory() as tmpdir:
        Path(tmpdir, "state").write_text(f"from-{attempt}")
        train.report({"attempt": attempt}, checkpoint=Checkpoint.from_directory(tmpdir))
    if attempt == 1:
        raise ValueError(f"attempt {attempt} fails on rank {rank}")


def test_unlimited_restarts_after_raising_ranks(tmp_path):
    source = tmp_path / "initial"
    source.mkdir()
    (source / "state").write_text("initial")
    result = Trainer(flaky_loop, train_loop_config={"out": str(tmp_path)}, scaling_config=ScalingConfig(num_workers=2),
                     run_config=RunConfig(storage_path=str(tmp_path / "results"), name="flaky",
                                          failure_config=FailureConfig(max_failures=-1)),
                     resume_from_checkpoint=Checkpoint.from_directory(source)).fit()
    assert result.attempts == 3 and result.error is None
    # Attempt 1 starts from resume_from_checkpoint (nothing persisted yet), attempt 2 from attempt 1's report.
    for rank in (0, 1):
        seen = [json.loads((tmp_path / f"seen_{a}_{rank}").read_text()) for a in range(3)]
        assert seen == ["initial", "initial", "from-1"], (rank, seen)
    assert [row["attempt"] for row in result.metrics_history] == [1, 2]
    assert Path(result.checkpoint.path, "state").read_text() == "from-2"


# ---------------------------------------------------------------------------------------- checkpoints

def score_loop(config):
    for i, loss in enumerate(config["losses"]):
        with tempfile.TemporaryDirectory() as tmpdir:
            Path(tmpdir, "i").write_text(str(i))
            Path(tmpdir, "sub").mkdir()
            Path(tmpdir, "sub", "rank").write_text(str(_rank()))
            train.report({"loss": loss, "i": i}, checkpoint=Checkpoint.from_directory(tmpdir))


@pytest.mark.parametrize("attribute", ["loss", None])
def test_num_to_keep(tmp_path, attribute):
    losses = [5.0, 3.0, 4.0, 1.0, 2.0, 6.0]
    config = CheckpointConfig(num_to_keep=2, checkpoint_score_attribute=attribute, checkpoint_score_order="min")
    result = Trainer(score_loop, train_loop_config={"losses": losses}, scaling_config=ScalingConfig(num_workers=2),
                     run_config=RunConfig(storage_path=str(tmp_path), name="keep", checkpoint_config=config)).fit()
    kept = [int(Path(c.path, "i").read_text()) for _, c in list_checkpoints(result.path)]
    expected = [3, 4, 5] if attribute else [4, 5]  # the 2 lowest losses and the latest, or the 2 latest
    assert kept == expected, kept
    assert [m["i"] for _, m in result.best_checkpoints] == ([3, 4, 5] if attribute else [4, 5])
    assert all(Path(c.path, "sub", "rank").read_text() == "0" for c, _ in result.best_checkpoints)
    assert result.checkpoint.path.endswith("checkpoint_000005")
    names = sorted(os.listdir(result.path))
    assert names == sorted([f"checkpoint_{i:06d}" for i in expected] +
                           [f"checkpoint_{i:06d}.metrics.json" for i in expected] +
                           ["progress.jsonl", "result.json"]), names
    assert [row["loss"] for row in result.metrics_history] == losses


def test_checkpoint_pack_and_copy(tmp_path):
    from hvd.train.checkpoint import pack_directory, unpack_directory

    source = tmp_path / "src"
    (source / "deep" / "er").mkdir(parents=True)
    (source / "top").write_bytes(b"\x00\x01")
    (source / "deep" / "er" / "leaf").write_text("leaf")
    unpacked = unpack_directory(pack_directory(source), tmp_path / "out")
    assert (Path(unpacked) / "top").read_bytes() == b"\x00\x01"
    assert (Path(unpacked) / "deep" / "er" / "leaf").read_text() == "leaf"
    checkpoint = Checkpoint.from_directory(source)
    copy = checkpoint.to_directory(tmp_path / "copy")
    assert (Path(copy) / "deep" / "er" / "leaf").read_text() == "leaf"
    with checkpoint.as_directory() as directory:
        assert directory == str(source)

    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(ValueError, match=r"'\.\./escape'"):
        unpack_directory(buffer.getvalue(), tmp_path / "bad")
    assert not (tmp_path / "escape").exists()


def resume_loop(config):
    checkpoint = train.get_checkpoint()
    with checkpoint.as_directory() as directory:
        content = Path(directory, "state").read_text()
    _dump(config["out"], f"rank_{_rank()}", {"content": content, "path": checkpoint.path})


def test_resume_from_checkpoint_reaches_every_rank(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    (source / "state").write_text("hello")
    Trainer(resume_loop, train_loop_config={"out": str(tmp_path)}, scaling_config=ScalingConfig(num_workers=3),
            run_config=RunConfig(storage_path=str(tmp_path / "results"), name="resume"),
            resume_from_checkpoint=Checkpoint.from_directory(source)).fit()
    seen = [json.loads((tmp_path / f"rank_{r}").read_text()) for r in range(3)]
    assert [s["content"] for s in seen] == ["hello"] * 3
    paths = {s["path"] for s in seen}
    assert len(paths) == 3 and str(source) not in paths  # a local copy per rank...
    assert not any(os.path.exists(p) for p in paths)  # ...removed when the training function returned


# ---------------------------------------------------------------------------------------- atomic persist

DRIVER = """
import os, sys, tempfile
from pathlib import Path
sys.path.insert(0, {package!r})
import hvd.train as train

def loop():
    Path({pids!r}, str(os.getpid())).write_text("")
    for i in range(3):
        with tempfile.TemporaryDirectory() as d:
            Path(d, "a").write_text("a" * 1000)
            Path(d, "b").write_text("b" * 1000)
            train.report({{"i": i}}, checkpoint=train.Checkpoint.from_directory(d))

result = train.Trainer(loop, scaling_config=train.ScalingConfig(num_workers=2),
                       run_config=train.RunConfig(storage_path={storage!r}, name="atomic")).fit()
print("DONE", result.checkpoint.path, flush=True)
"""


def _wait_for(predicate, what, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_driver_killed_while_persisting_leaves_no_checkpoint(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    run_dir = tmp_path / "atomic"
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(DRIVER.format(package=str(PACKAGE_DIR), pids=str(pids),
                                                    storage=str(tmp_path))))
    env = dict(os.environ, HVD_TRAIN_TEST_PERSIST_DELAY="60")
    driver = subprocess.Popen([PYTHON, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        # The first persist has written its files and sleeps before the rename. Rank 0 reports without waiting
        # for rank 1, which on a loaded machine may not have started its loop yet: both must be running when
        # the driver dies, so that the test sees both end.
        _wait_for(lambda: (run_dir / "checkpoint_000000.metrics.json").exists(), "the first persist", 90)
        _wait_for(lambda: len(list(pids.iterdir())) == 2, "both workers to start their loop", 90)
        temp = [p for p in run_dir.iterdir() if p.name.startswith(".tmp_checkpoint_")]
        assert len(temp) == 1 and sorted(os.listdir(temp[0])) == ["a", "b"]
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    workers = [int(p.name) for p in pids.iterdir()]
    assert len(workers) == 2
    _wait_for(lambda: not any(_alive(pid) for pid in workers), "the workers to end after the driver died", 30)

    assert list_checkpoints(run_dir) == [] and train.latest_checkpoint(run_dir) is None
    assert not any(p.name.startswith("checkpoint_") and p.is_dir() for p in run_dir.iterdir())

    # A later driver on the same run directory removes the leftovers and numbers from 0.
    completed = subprocess.run([PYTHON, str(script)], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert f"DONE {run_dir / 'checkpoint_000002'}" in completed.stdout
    names = sorted(p.name for p in run_dir.iterdir())
    assert not any(name.startswith(".") for name in names), names
    assert [os.path.basename(c.path) for _, c in list_checkpoints(run_dir)] == [
        "checkpoint_000000", "checkpoint_000001", "checkpoint_000002"]
    assert Path(run_dir, "checkpoint_000001", "b").read_text() == "b" * 1000


# ------------------------------------------------------------------------------------------- datasets

def dataset_loop(config):
    rank = _rank()
    seen = {}
    for name in ("columns", "array", "tensors", "npy", "jsonl", "csv"):
        shard = train.get_dataset_shard(name)
        rows = list(shard)
        if name in ("columns", "npy", "array"):
            key = "data" if name in ("npy", "array") else "x"
            ids = [int(np.asarray(row[key]).reshape(-1)[0]) for row in rows]
            batches = list(shard.iter_torch_batches(batch_size=2, dtypes=torch.float64))
            assert all(b[key].dtype == torch.float64 for b in batches)
            assert [int(v) for b in batches for v in b[key].reshape(len(b[key]), -1)[:, 0]] == ids
        elif name == "tensors":
            ids = [int(row["item"][0]) for row in rows]
            batches = list(shard.iter_torch_batches(batch_size=2, drop_last=True))
            assert all(len(b["item"][0]) == 2 for b in batches)
            assert torch.equal(torch.cat([b["item"][1] for b in batches]),
                               torch.cat([b["item"][0] for b in batches]) * 10)
        else:
            ids = [int(row["id"]) for row in rows]
            batches = list(shard.iter_batches(batch_size=3))
            assert [int(v) for b in batches for v in b["id"]] == ids
            assert all(isinstance(v, str) for row in rows for v in [row["name"]])
        seen[name] = ids
    _dump(config["out"], f"rank_{rank}", seen)


def test_dataset_types(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(5 * 2).reshape(5, 2))
    np.save(tmp_path / "b.npy", np.arange(10, 18).reshape(4, 2))
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in range(3)))
    (tmp_path / "b.jsonl").write_text("\n" + "".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n"
                                                     for i in range(3, 9)))
    (tmp_path / "c.csv").write_text("id,name\n" + "".join(f"{i},n{i}\n" for i in range(7)))
    datasets = {
        "columns": {"x": np.arange(9), "y": np.arange(9) * 2.0},
        "array": np.arange(11),
        "tensors": torch.utils.data.TensorDataset(torch.arange(7), torch.arange(7) * 10),
        "npy": [tmp_path / "a.npy", str(tmp_path / "b.npy")],
        "jsonl": [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")],
        "csv": [str(tmp_path / "c.csv")],
    }
    Trainer(dataset_loop, train_loop_config={"out": str(tmp_path)}, scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(storage_path=str(tmp_path / "results"), name="data"), datasets=datasets).fit()
    seen = [json.loads((tmp_path / f"rank_{r}").read_text()) for r in range(2)]
    expected = {"columns": list(range(9)), "array": list(range(11)), "tensors": list(range(7)),
                "npy": [0, 2, 4, 6, 8, 10, 12, 14, 16], "jsonl": list(range(9)), "csv": list(range(7))}
    for name, values in expected.items():
        split = [list(part) for part in np.array_split(values, 2)]
        assert [seen[0][name], seen[1][name]] == split, (name, seen[0][name], seen[1][name])


# -------------------------------------------------------------------------------------------- bad input

def _children():
    return set(children(os.getpid()))


def two_args(a, b):
    pass


def no_args():
    pass


@pytest.mark.parametrize("make, error, text", [
    (lambda p: Trainer(no_args, datasets={"d": {1, 2}}), TypeError, "set"),
    (lambda p: Trainer(no_args, datasets={"d": [1, 2]}), TypeError, "int"),
    (lambda p: Trainer(no_args, datasets={"d": "a.csv"}), TypeError, "a.csv"),
    (lambda p: Trainer(no_args, datasets={"d": [str(p / "missing.csv")]}), ValueError, "missing.csv"),
    (lambda p: Trainer(no_args, datasets={"d": [str(p / "x.parquet")]}), ValueError, ".parquet"),
    (lambda p: Trainer(no_args, datasets={"d": {"x": np.arange(3), "y": np.arange(4)}}), ValueError, "4"),
    (lambda p: CheckpointConfig(num_to_keep=0), ValueError, "0"),
    (lambda p: CheckpointConfig(checkpoint_score_order="avg"), ValueError, "'avg'"),
    (lambda p: FailureConfig(max_failures=-2), ValueError, "-2"),
    (lambda p: ScalingConfig(num_workers=0), ValueError, "0"),
    (lambda p: ScalingConfig(num_workers=2, resources_per_worker={"TPU": 1}), ValueError, "TPU"),
    (lambda p: RunConfig(name="a/b"), ValueError, "a/b"),
    (lambda p: RunConfig(storage_path="/etc/hostname"), ValueError,
     "RunConfig.storage_path='/etc/hostname' is a file, not a folder"),
    (lambda p: Trainer(two_args), ValueError, "two_args"),
    (lambda p: Trainer(no_args, train_loop_config=[1]), TypeError, "list"),
    (lambda p: Trainer(no_args, resume_from_checkpoint=str(p)), TypeError, "str"),
    (lambda p: Checkpoint.from_directory(p / "nowhere"), ValueError, "nowhere"),
])
def test_bad_input_fails_before_anything_starts(tmp_path, make, error, text):
    before = _children()
    started = time.monotonic()
    with pytest.raises(error) as info:
        make(tmp_path)
    assert text in str(info.value) and "\n" not in str(info.value), str(info.value)
    assert time.monotonic() - started < 2
    assert _children() <= before


def test_session_functions_outside_a_run():
    for call in (lambda: train.report({"a": 1}), train.get_checkpoint, train.get_context,
                 lambda: train.get_dataset_shard("x")):
        with pytest.raises(RuntimeError, match="outside a training function"):
            call()


def bad_report_loop():
    train.report([("loss", 1.0)])


def test_bad_report_fails_the_run(tmp_path):
    with pytest.raises(TrainingFailedError) as info:
        Trainer(bad_report_loop, scaling_config=ScalingConfig(num_workers=2),
                run_config=RunConfig(storage_path=str(tmp_path), name="bad")).fit()
    assert "metrics must be a dict, got list" in str(info.value), str(info.value)
    assert type(info.value.__cause__).__name__ == "WorkerError"


def odd_metrics_loop(config):
    train.report({"pair": {(1, 2): 3}, "kinds": {"a"}, "loss": 0.5})


def test_metrics_that_json_cannot_hold_are_written_as_their_repr(tmp_path):
    """A metric is any picklable value (as in Ray Train); the run's files hold what JSON cannot as its repr."""
    result = Trainer(odd_metrics_loop, scaling_config=ScalingConfig(num_workers=1),
                     run_config=RunConfig(storage_path=str(tmp_path), name="odd")).fit()
    assert result.error is None
    assert result.metrics["pair"] == {(1, 2): 3} and result.metrics["kinds"] == {"a"}
    row = json.loads((tmp_path / "odd" / "progress.jsonl").read_text())
    assert row["pair"] == {"(1, 2)": 3} and row["kinds"] == "{'a'}" and row["loss"] == 0.5, row
    assert json.loads((tmp_path / "odd" / "result.json").read_text())["metrics"]["pair"] == {"(1, 2)": 3}


# ----------------------------------------------------------------------------------------------- Dask

def dask_loop(config):
    import hvd.torch as hvd

    hvd.init()
    shard = train.get_dataset_shard("d")
    total = hvd.allreduce(torch.tensor(float(sum(row["x"] for row in shard))), op=hvd.Sum, name="total").item()
    _dump(config["out"], f"rank_{_rank()}", {"xs": [row["x"] for row in shard], "pid": os.getpid()})
    train.report({"total": total, "size": train.get_context().get_world_size()})


def test_scaling_config_client_runs_the_workers_in_dask(tmp_path):
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, distributed.Client(cluster) as client:
        dask_pids = set(client.run(os.getpid).values())
        result = Trainer(dask_loop, train_loop_config={"out": str(tmp_path)},
                         scaling_config=ScalingConfig(num_workers=2, client=client),
                         run_config=RunConfig(storage_path=str(tmp_path / "results"), name="dask"),
                         datasets={"d": [{"x": x} for x in range(10)]}).fit()
    assert result.metrics["total"] == 45.0 and result.metrics["size"] == 2, result.metrics
    seen = [json.loads((tmp_path / f"rank_{r}").read_text()) for r in range(2)]
    assert [s["xs"] for s in seen] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert {s["pid"] for s in seen} == dask_pids  # the ranks ran inside the Dask worker processes


PANDAS_MEANWHILE = """
import os, sys
import hvd.train as train

def loop():
    train.report({"x": 1})

result = train.Trainer(loop, scaling_config=train.ScalingConfig(num_workers=1),
                       run_config=train.RunConfig(storage_path=sys.argv[1], name="p")).fit()
print("pandas while fitting:", "pandas" in sys.modules)
print("rows:", len(result.metrics_dataframe))
"""


def test_pandas_is_imported_while_the_workers_train_only_with_a_cpu_to_spare(tmp_path):
    """fit() starts importing pandas (for metrics_dataframe) in the background when this host has a CPU beside
    the workers', and not otherwise (the import would slow the training as much as it saves)."""
    script = tmp_path / "fit.py"
    script.write_text(PANDAS_MEANWHILE)
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR))
    cpus = len(os.sched_getaffinity(0))
    for allowed, expected in ((cpus, cpus > 1), (1, False)):
        completed = subprocess.run(["taskset", "-c", ",".join(map(str, sorted(os.sched_getaffinity(0))[:allowed])),
                                    PYTHON, str(script), str(tmp_path / f"r{allowed}")],
                                   env=env, capture_output=True, text=True, timeout=120)
        assert completed.returncode == 0, completed.stdout + completed.stderr
        assert f"pandas while fitting: {expected}" in completed.stdout, (allowed, completed.stdout)
        assert "rows: 1" in completed.stdout
