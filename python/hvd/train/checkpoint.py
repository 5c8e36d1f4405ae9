"""Checkpoints of hvd.train: the Checkpoint handle, packing a directory into bytes, and the driver's store.

A Checkpoint is a directory. On a worker, report(metrics, checkpoint=Checkpoint.from_directory(d)) packs d
into an uncompressed tar (pack_directory) that travels to the driver, where the CheckpointManager writes it
under the run directory:

    <storage_path>/<name>/checkpoint_000000/             the files of the reported directory
    <storage_path>/<name>/checkpoint_000000.metrics.json the metrics reported with it

Persisting is atomic: the files are unpacked into a temporary directory in the run directory
(.tmp_checkpoint_<index>_<pid>_<random>), every file and directory is fsync'ed, the metrics file is written
(aside, fsync'ed, renamed), then the temporary directory is renamed to checkpoint_<index> and the run directory
fsync'ed. A driver killed at any point leaves either a complete checkpoint_<index> directory or a temporary
one that every listing ignores and the next CheckpointManager on that run directory removes. Deleting a
checkpoint renames it to a temporary name first, so a half-deleted checkpoint never looks complete either.
One driver at a time may write a run directory.

Test hook: HVD_TRAIN_TEST_PERSIST_DELAY=<seconds> makes every persist sleep that long after the files are
written and before the rename, so that a test can kill the driver in that window.
"""

import contextlib
import io
import json
import math
import os
import re
import secrets
import shutil
import tarfile
import tempfile
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

_CHECKPOINT_RE = re.compile(r"^checkpoint_(\d{6,})$")
_METRICS_RE = re.compile(r"^checkpoint_(\d{6,})\.metrics\.json$")
_TEMP_RE = re.compile(r"^\.(?:tmp|deleting)_(?:checkpoint|metrics)_\d+_(\d+)_[0-9a-f]+(?:\.json)?$")
_PERSIST_DELAY_ENV = "HVD_TRAIN_TEST_PERSIST_DELAY"


class Checkpoint:
    """A checkpoint: a directory of files (Ray Train's Checkpoint for a local directory).

    Checkpoint.from_directory(path) wraps an existing directory; .path is its absolute path; as_directory()
    yields that path; to_directory(path=None) copies its files into path (or a new temporary directory) and
    returns that path.
    """

    def __init__(self, path: Union[str, os.PathLike]) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"Checkpoint: path must be a directory path, got {type(path).__name__} {path!r}")
        self.path: str = os.path.abspath(os.fspath(path))

    @classmethod
    def from_directory(cls, path: Union[str, os.PathLike]) -> "Checkpoint":
        """A Checkpoint of the existing directory path (ValueError naming it when it is not a directory)."""
        checkpoint = cls(path)
        if not os.path.isdir(checkpoint.path):
            raise ValueError(f"Checkpoint.from_directory: {checkpoint.path!r} is not a directory")
        return checkpoint

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """Yields the checkpoint's directory (a local one: no copy is made; do not modify it)."""
        if not os.path.isdir(self.path):
            raise FileNotFoundError(f"Checkpoint.as_directory: {self.path!r} no longer exists")
        yield self.path

    def to_directory(self, path: Optional[Union[str, os.PathLike]] = None) -> str:
        """Copies the checkpoint's files into path (created if missing) or a new temporary directory; returns
        that directory's path."""
        if path is None:
            target = tempfile.mkdtemp(prefix="hvd-checkpoint-")
        else:
            target = os.path.abspath(os.fspath(path))
        shutil.copytree(self.path, target, dirs_exist_ok=True)
        return target

    def __fspath__(self) -> str:
        return self.path

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checkpoint) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"Checkpoint(path={self.path!r})"


def pack_directory(path: Union[str, os.PathLike]) -> bytes:
    """The files of directory path (recursively, symbolic links followed) as an uncompressed tar."""
    root = os.fspath(path)
    if not os.path.isdir(root):
        raise ValueError(f"checkpoint directory {root!r} does not exist")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", dereference=True) as tar:
        for name in sorted(os.listdir(root)):
            tar.add(os.path.join(root, name), arcname=name, recursive=True)
    return buffer.getvalue()


def unpack_directory(data: bytes, path: Union[str, os.PathLike]) -> str:
    """Unpacks pack_directory's bytes into directory path (created if missing); returns path. Only regular
    files and directories with relative names inside path are accepted (ValueError naming a member that is
    not)."""
    root = os.path.abspath(os.fspath(path))
    os.makedirs(root, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        members = tar.getmembers()
        for member in members:
            target = os.path.abspath(os.path.join(root, member.name))
            if os.path.isabs(member.name) or not (target == root or target.startswith(root + os.sep)):
                raise ValueError(f"checkpoint archive: member {member.name!r} lies outside the checkpoint")
            if not (member.isfile() or member.isdir()):
                raise ValueError(f"checkpoint archive: member {member.name!r} is neither a file nor a directory")
        for member in members:
            target = os.path.join(root, member.name)
            if member.isdir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            source = tar.extractfile(member)
            with open(target, "wb") as out:
                shutil.copyfileobj(source, out)
            os.chmod(target, member.mode & 0o777 | 0o600)
    return root


def _fsync_tree(root: str) -> None:
    """fsync every file and directory under root, root included."""
    for directory, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(directory)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def checkpoint_dir_name(index: int) -> str:
    """The name of the index'th checkpoint directory of a run: checkpoint_000042."""
    return f"checkpoint_{index:06d}"


def list_checkpoints(run_dir: Union[str, os.PathLike]) -> List[Tuple[int, Checkpoint]]:
    """The complete checkpoints of a run directory, (index, Checkpoint) in index order. Temporary directories
    (a persist or a delete that did not finish) are not checkpoints and are left out."""
    root = os.path.abspath(os.fspath(run_dir))
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        match = _CHECKPOINT_RE.match(name)
        if match and os.path.isdir(os.path.join(root, name)):
            found.append((int(match.group(1)), Checkpoint(os.path.join(root, name))))
    return sorted(found, key=lambda item: item[0])


def latest_checkpoint(run_dir: Union[str, os.PathLike]) -> Optional[Checkpoint]:
    """The run directory's complete checkpoint with the highest index, or None (for resume_from_checkpoint
    after a driver that ended early)."""
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def read_metrics(checkpoint: Checkpoint) -> Dict[str, Any]:
    """The metrics persisted beside a checkpoint of a run directory ({} when there are none)."""
    try:
        with open(checkpoint.path.rstrip(os.sep) + ".metrics.json", encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def json_keys(value: Any) -> Any:
    """value with every dict key JSON can hold (a str, a number, a bool, None; json.dumps checks keys before it asks
    to_json about values), any other key as its repr: a metric {(1, 2): 3} is written as {"(1, 2)": 3}."""
    if isinstance(value, dict):
        return {k if k is None or isinstance(k, (str, int, float, bool)) else repr(k): json_keys(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_keys(v) for v in value]
    return value


def to_json(value: Any) -> Any:
    """A JSON-friendly form of a metric value: NumPy and torch scalars become numbers, other unknown objects
    their repr."""
    for conversion in ("item", "tolist"):
        convert = getattr(value, conversion, None)
        if callable(convert):
            try:
                return convert()
            except Exception:
                pass
    return repr(value)


class CheckpointManager:
    """The driver's store of a run's checkpoints (see the module docstring for the layout and atomicity).

    persist() writes one checkpoint and then applies the retention rule of the CheckpointConfig: with
    num_to_keep = n, the n best by checkpoint_score_attribute (the n latest without one) stay, and so does the
    latest checkpoint whatever its score, because a restart resumes from it. A checkpoint whose metrics lack the
    score attribute (or hold a non-number) ranks below every other. Checkpoints already in the run directory
    from an earlier driver are left alone (not counted, not deleted); new ones are numbered after them.
    """

    def __init__(self, run_dir: Union[str, os.PathLike], checkpoint_config: Any) -> None:
        self.run_dir = os.path.abspath(os.fspath(run_dir))
        self.config = checkpoint_config
        os.makedirs(self.run_dir, exist_ok=True)
        self._remove_leftovers()
        existing = list_checkpoints(self.run_dir)
        self._next_index = existing[-1][0] + 1 if existing else 0
        self._kept: List[Tuple[int, Checkpoint, Dict[str, Any]]] = []

    def _remove_leftovers(self) -> None:
        """Removes what a driver that died while persisting or deleting left: temporary directories and files
        (unless their driver still runs) and metrics files without their checkpoint directory."""
        for name in os.listdir(self.run_dir):
            path = os.path.join(self.run_dir, name)
            temp = _TEMP_RE.match(name)
            if temp:
                pid = int(temp.group(1))
                if pid == os.getpid() or not _pid_alive(pid):
                    _remove(path)
                continue
            metrics = _METRICS_RE.match(name)
            if metrics and not os.path.isdir(os.path.join(self.run_dir, checkpoint_dir_name(int(metrics.group(1))))):
                _remove(path)

    def _temp_name(self, kind: str, index: int) -> str:
        return os.path.join(self.run_dir, f".{kind}_{index}_{os.getpid()}_{secrets.token_hex(4)}")

    def persist(self, packed: bytes, metrics: Dict[str, Any]) -> Checkpoint:
        """Writes packed (pack_directory's bytes) as the next checkpoint with its metrics, atomically; applies
        the retention rule; returns the new Checkpoint."""
        index = self._next_index
        self._next_index += 1
        final = os.path.join(self.run_dir, checkpoint_dir_name(index))
        temp = self._temp_name("tmp_checkpoint", index)
        try:
            unpack_directory(packed, temp)
            _fsync_tree(temp)
            metrics_temp = self._temp_name("tmp_metrics", index) + ".json"
            with open(metrics_temp, "w", encoding="utf-8") as f:
                json.dump(json_keys(metrics), f, default=to_json)
                f.flush()
                os.fsync(f.fileno())
            os.replace(metrics_temp, final + ".metrics.json")
            delay = os.environ.get(_PERSIST_DELAY_ENV)
            if delay:
                time.sleep(float(delay))
            os.rename(temp, final)
            _fsync_dir(self.run_dir)
        except BaseException:
            _remove(temp)
            raise
        checkpoint = Checkpoint(final)
        self._kept.append((index, checkpoint, dict(metrics)))
        self._apply_retention()
        return checkpoint

    def _score(self, metrics: Dict[str, Any]) -> float:
        """The sort key of a checkpoint, higher is better."""
        value = metrics.get(self.config.checkpoint_score_attribute)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            return -math.inf
        return float(value) if self.config.checkpoint_score_order == "max" else -float(value)

    def _ranked(self) -> List[Tuple[int, Checkpoint, Dict[str, Any]]]:
        """Kept checkpoints, best first (newest first among equals); in index order without a score
        attribute."""
        if self.config.checkpoint_score_attribute is None:
            return list(self._kept)
        return sorted(self._kept, key=lambda item: (self._score(item[2]), item[0]), reverse=True)

    def _apply_retention(self) -> None:
        keep_count = self.config.num_to_keep
        if keep_count is None or len(self._kept) <= keep_count:
            return
        if self.config.checkpoint_score_attribute is None:
            keep = {item[0] for item in self._kept[-keep_count:]}
        else:
            keep = {item[0] for item in self._ranked()[:keep_count]}
        keep.add(self._kept[-1][0])
        for index, checkpoint, _ in [item for item in self._kept if item[0] not in keep]:
            doomed = self._temp_name("deleting_checkpoint", index)
            os.rename(checkpoint.path, doomed)
            _remove(checkpoint.path + ".metrics.json")
            _remove(doomed)
        self._kept = [item for item in self._kept if item[0] in keep]

    @property
    def latest(self) -> Optional[Checkpoint]:
        """The checkpoint persisted last by this manager, or None."""
        return self._kept[-1][1] if self._kept else None

    def best_checkpoints(self) -> List[Tuple[Checkpoint, Dict[str, Any]]]:
        """(Checkpoint, metrics) of every kept checkpoint, best first by the score attribute, or in the order
        they were reported when there is none."""
        return [(checkpoint, metrics) for _, checkpoint, metrics in self._ranked()]


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
