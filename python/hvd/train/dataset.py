"""Datasets of hvd.train: what Trainer(datasets=...) accepts, how it is split, and the worker's DatasetShard.

A dataset is one of:
  - a list of dicts, one per row (Ray's from_items);
  - a dict of NumPy arrays of equal length (columns), or one NumPy array (the column "data");
  - a map-style torch Dataset (has __len__; a row that is not a dict becomes {"item": row}, so a
    TensorDataset's batches are {"item": [x_batch, y_batch]});
  - a list of file paths, all .npy, all .csv or all .jsonl: the rows of the files one after the other. An .npy
    file's rows are its first axis (a structured array's fields are its columns, else the column "data"); a
    .csv file has a header line naming its columns and one record per line (values that read as int or
    float become numbers); a .jsonl file has one JSON object per line. Blank lines are skipped. The files
    must be at the same path on every worker's host.
Anything else is a TypeError naming its type, raised when the Trainer is made.

Every rank gets a contiguous shard of the rows, shard sizes differing by at most one (numpy.array_split's
rule: the first len % size ranks get one more row), and reads only its own rows: the driver slices an
in-memory dataset and pickles each rank's slice separately (the slices travel together with the call and
each rank unpickles only its own; a torch Dataset that is not a TensorDataset travels whole, as a picklable
object, and each rank indexes only its rows); for files the driver finds where each shard starts (an .npy
header, or a scan of the lines) and each rank reads only its byte range (.npy through a memory map).
"""

import csv
import io
import json
import os
import pickle
import sys
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

try:
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - python3-cloudpickle is a dependency
    _pickler = pickle

_SUFFIXES = (".npy", ".csv", ".jsonl")


def shard_bounds(num_rows: int, num_shards: int) -> List[Tuple[int, int]]:
    """[start, stop) of each shard of num_rows rows split into num_shards contiguous parts whose sizes differ
    by at most one (the first num_rows % num_shards parts get the extra row)."""
    base, extra = divmod(num_rows, num_shards)
    bounds = []
    start = 0
    for r in range(num_shards):
        stop = start + base + (1 if r < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def _torch_dataset_class():
    torch = sys.modules.get("torch")  # a torch Dataset can only exist once torch is imported
    if torch is None:
        return None
    return torch.utils.data.Dataset


class _Source:
    """A dataset validated in the driver; shards(n) gives each rank's spec, a small picklable tuple."""

    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.kind, self.data = _classify(name, value)
        if self.kind == "files":
            self.files = [_scan_file(path) for path in self.data]
            suffixes = {info["suffix"] for info in self.files}
            if len(suffixes) > 1:
                raise ValueError(f"datasets[{name!r}]: files of one dataset must have one suffix, got "
                                 f"{', '.join(sorted(suffixes))}")
            if self.files and self.files[0]["suffix"] == ".npy":
                first = self.files[0]
                for info in self.files[1:]:
                    if info["shape"][1:] != first["shape"][1:] or info["dtype"] != first["dtype"]:
                        raise ValueError(f"datasets[{name!r}]: {info['path']!r} holds {info['dtype']} rows of "
                                         f"shape {info['shape'][1:]}, {first['path']!r} {first['dtype']} rows of "
                                         f"shape {first['shape'][1:]}")
            self.num_rows = sum(info["rows"] for info in self.files)
        else:
            self.num_rows = len(self.data[next(iter(self.data))]) if self.kind == "columns" else len(self.data)

    def shards(self, num_shards: int) -> List[tuple]:
        bounds = shard_bounds(self.num_rows, num_shards)
        if self.kind == "rows":
            return [("rows", pickle.dumps(self.data[a:b], protocol=pickle.HIGHEST_PROTOCOL)) for a, b in bounds]
        if self.kind == "columns":
            return [("columns", pickle.dumps({k: np.ascontiguousarray(v[a:b]) for k, v in self.data.items()},
                                             protocol=pickle.HIGHEST_PROTOCOL)) for a, b in bounds]
        if self.kind == "tensors":
            tensors = self.data.tensors
            return [("torch", _pickler.dumps(type(self.data)(*[t[a:b].clone() for t in tensors])), 0, b - a)
                    for a, b in bounds]
        if self.kind == "torch":
            blob = _pickler.dumps(self.data)  # one bytes object: pickled once with the call
            return [("torch", blob, a, b) for a, b in bounds]
        suffix = self.files[0]["suffix"] if self.files else ".jsonl"
        return [("files", suffix, pieces) for pieces in _file_pieces(self.files, bounds)]


def _classify(name: str, value: Any) -> Tuple[str, Any]:
    """(kind, normalized data) of a dataset; TypeError / ValueError naming what is wrong."""
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            raise ValueError(f"datasets[{name!r}]: a NumPy array needs at least one dimension, got a scalar")
        return "columns", {"data": value}
    if isinstance(value, dict):
        if not value:
            raise ValueError(f"datasets[{name!r}]: a dict of columns needs at least one column, got {{}}")
        lengths = {}
        for key, column in value.items():
            if not isinstance(key, str):
                raise TypeError(f"datasets[{name!r}]: column names must be str, got {type(key).__name__} {key!r}")
            if not isinstance(column, np.ndarray):
                raise TypeError(f"datasets[{name!r}][{key!r}]: columns must be NumPy arrays, got "
                                f"{type(column).__name__}")
            if column.ndim == 0:
                raise ValueError(f"datasets[{name!r}][{key!r}]: a column needs at least one dimension")
            lengths[key] = len(column)
        if len(set(lengths.values())) > 1:
            raise ValueError(f"datasets[{name!r}]: columns differ in length: {lengths}")
        return "columns", dict(value)
    if isinstance(value, (list, tuple)):
        items = list(value)
        if all(isinstance(item, dict) for item in items):
            return "rows", items
        if all(isinstance(item, (str, os.PathLike)) for item in items):
            return "files", [os.path.abspath(os.fspath(item)) for item in items]
        odd = next(item for item in items if not isinstance(item, (dict, str, os.PathLike)))
        raise TypeError(f"datasets[{name!r}]: a list must hold only row dicts or only file paths, got an item "
                        f"of type {type(odd).__name__}")
    dataset_class = _torch_dataset_class()
    if dataset_class is not None and isinstance(value, dataset_class):
        if not hasattr(type(value), "__len__"):
            raise TypeError(f"datasets[{name!r}]: {type(value).__name__} has no __len__ (an iterable-style "
                            "torch dataset cannot be split into shards): pass a map-style Dataset")
        import torch

        if type(value) is torch.utils.data.TensorDataset:
            return "tensors", value
        return "torch", value
    if isinstance(value, (str, os.PathLike)):
        raise TypeError(f"datasets[{name!r}]: got one path ({type(value).__name__} {os.fspath(value)!r}): pass a "
                        "list of file paths")
    raise TypeError(f"datasets[{name!r}]: unsupported dataset type {type(value).__module__}."
                    f"{type(value).__qualname__} (use a list of dicts, a dict of NumPy arrays, a NumPy array, a "
                    "torch Dataset or a list of .npy/.csv/.jsonl paths)")


def _scan_file(path: str) -> Dict[str, Any]:
    """What the driver needs to know of one data file: its suffix and row count (and .npy's shape and dtype,
    .csv's header)."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in _SUFFIXES:
        raise ValueError(f"dataset file {path!r}: unknown suffix {suffix!r} (use .npy, .csv or .jsonl)")
    if not os.path.isfile(path):
        raise ValueError(f"dataset file {path!r} does not exist")
    info: Dict[str, Any] = {"path": path, "suffix": suffix}
    if suffix == ".npy":
        array = np.load(path, mmap_mode="r")
        if array.ndim == 0:
            raise ValueError(f"dataset file {path!r} holds a scalar, not rows")
        info.update(rows=len(array), shape=tuple(array.shape), dtype=str(array.dtype))
        return info
    with open(path, "rb") as f:
        header_end = 0
        if suffix == ".csv":
            header = f.readline()
            header_end = len(header)
            columns = next(csv.reader([header.decode("utf-8")]), [])
            if not columns:
                raise ValueError(f"dataset file {path!r}: a .csv file needs a header line naming its columns")
            info["columns"] = columns
        rows = sum(1 for line in f if line.strip())
    info.update(rows=rows, data_start=header_end)
    return info


def _line_offsets(info: Dict[str, Any], wanted: Sequence[int]) -> Dict[int, int]:
    """Byte offsets of the rows numbered in wanted (0-based, blank lines not counted) of a .csv/.jsonl file."""
    targets = set(wanted)
    offsets = {}
    with open(info["path"], "rb") as f:
        f.seek(info["data_start"])
        offset = info["data_start"]
        row = 0
        for line in f:
            if line.strip():
                if row in targets:
                    offsets[row] = offset
                row += 1
            offset += len(line)
    for row in targets:
        offsets.setdefault(row, offset)
    return offsets


def _file_pieces(files: List[Dict[str, Any]], bounds: List[Tuple[int, int]]) -> List[List[tuple]]:
    """For each shard [start, stop) of bounds, the parts of files holding its global rows: (path, first row,
    row count, byte offset, columns) each (byte offset and columns only for .csv/.jsonl). Each text file is
    scanned once for all the shards' start offsets."""
    shards: List[List[list]] = []
    wanted: Dict[int, List[int]] = {}
    for start, stop in bounds:
        pieces = []
        base = 0
        for number, info in enumerate(files):
            first, last = max(start, base), min(stop, base + info["rows"])
            if first < last:
                pieces.append([number, first - base, last - first])
                if info["suffix"] != ".npy":
                    wanted.setdefault(number, []).append(first - base)
            base += info["rows"]
        shards.append(pieces)
    offsets = {number: _line_offsets(files[number], rows) for number, rows in wanted.items()}
    return [[(files[number]["path"], local, count,
              offsets[number][local] if number in offsets else None, files[number].get("columns"))
             for number, local, count in pieces] for pieces in shards]


def prepare_datasets(datasets: Optional[Dict[str, Any]]) -> Dict[str, _Source]:
    """Validates Trainer(datasets=...) in the driver: {name: source}; TypeError/ValueError naming the bad
    dataset."""
    if datasets is None:
        return {}
    if not isinstance(datasets, dict):
        raise TypeError(f"datasets must be a dict of name to dataset, got {type(datasets).__name__}")
    sources = {}
    for name, value in datasets.items():
        if not isinstance(name, str):
            raise TypeError(f"datasets: names must be str, got {type(name).__name__} {name!r}")
        sources[name] = _Source(name, value)
    return sources


# ---------------------------------------------------------------------------------------------- worker side

def _parse_csv_value(text: str) -> Any:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def _read_text_rows(path: str, count: int, offset: int, suffix: str, columns: Optional[List[str]]) -> List[dict]:
    lines = []
    with open(path, "rb") as f:
        f.seek(offset)
        for line in f:
            if line.strip():
                lines.append(line.decode("utf-8"))
                if len(lines) == count:
                    break
    if suffix == ".jsonl":
        rows = [json.loads(line) for line in lines]
        for row in rows:
            if not isinstance(row, dict):
                raise ValueError(f"dataset file {path!r}: a .jsonl line must be a JSON object, got "
                                 f"{type(row).__name__}")
        return rows
    return [dict(zip(columns, (_parse_csv_value(v) for v in record)))
            for record in csv.reader(io.StringIO("".join(lines)))]


def _collate(values: List[Any], to_torch: bool) -> Any:
    """One batch column from a list of row values: dicts by key, tuples element by element, tensors stacked,
    anything else through numpy.asarray (then a tensor when to_torch and the values are numbers)."""
    first = values[0]
    if isinstance(first, dict):
        return {key: _collate([v[key] for v in values], to_torch) for key in first}
    if isinstance(first, tuple):
        return [_collate([v[i] for v in values], to_torch) for i in range(len(first))]
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(first, torch.Tensor):
        stacked = torch.stack(values)
        return stacked if to_torch else stacked.numpy()
    array = np.stack(values) if isinstance(first, np.ndarray) else np.asarray(values)
    return _tensor(array) if to_torch else array


def _tensor(array: np.ndarray) -> Any:
    import torch

    if array.dtype.kind in "biufc":
        return torch.as_tensor(array)
    return array  # strings and objects stay NumPy arrays


def _convert(value: Any, dtype: Any, device: Any) -> Any:
    import torch

    if isinstance(value, dict):
        return {k: _convert(v, dtype, device) for k, v in value.items()}
    if isinstance(value, list):
        return [_convert(v, dtype, device) for v in value]
    if isinstance(value, torch.Tensor):
        if dtype is not None:
            value = value.to(dtype)
        if device is not None:
            value = value.to(device)
    return value


class DatasetShard:
    """This rank's rows of one dataset (what get_dataset_shard returns).

    Iterating gives the rows as dicts; iter_batches gives dicts of NumPy arrays, iter_torch_batches dicts of
    torch tensors. The rows are read on first use and kept.
    """

    def __init__(self, spec: tuple) -> None:
        self._spec = spec
        self._columns: Optional[Dict[str, np.ndarray]] = None
        self._rows: Optional[Sequence[Any]] = None
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        kind = self._spec[0]
        if kind == "rows":
            self._rows = pickle.loads(self._spec[1])
        elif kind == "columns":
            self._columns = pickle.loads(self._spec[1])
        elif kind == "torch":
            dataset = pickle.loads(self._spec[1])
            self._rows = _TorchRows(dataset, self._spec[2], self._spec[3])
        else:
            suffix, pieces = self._spec[1], self._spec[2]
            if suffix == ".npy":
                parts = [np.array(np.load(path, mmap_mode="r")[first:first + count])
                         for path, first, count, _, _ in pieces]
                if parts:
                    array = np.concatenate(parts)
                else:
                    array = np.zeros((0,))
                if array.dtype.names:
                    self._columns = {field: array[field] for field in array.dtype.names}
                else:
                    self._columns = {"data": array}
            else:
                rows: List[dict] = []
                for path, _, count, offset, columns in pieces:
                    rows.extend(_read_text_rows(path, count, offset, suffix, columns))
                self._rows = rows
        self._loaded = True

    def count(self) -> int:
        """Number of rows in this shard."""
        self._load()
        if self._columns is not None:
            return len(next(iter(self._columns.values()))) if self._columns else 0
        return len(self._rows)

    def __len__(self) -> int:
        return self.count()

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        """The rows, as dicts."""
        self._load()
        if self._columns is not None:
            for i in range(self.count()):
                yield {key: column[i] for key, column in self._columns.items()}
        else:
            for row in self._rows:
                yield row if isinstance(row, dict) else {"item": row}

    def iter_rows(self) -> Iterator[Dict[str, Any]]:
        """The rows, as dicts (the same as iterating the shard)."""
        return iter(self)

    def _batches(self, batch_size: Optional[int], drop_last: bool, to_torch: bool) -> Iterator[Dict[str, Any]]:
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise ValueError(f"batch_size must be a positive int or None, got {batch_size!r}")
        if not isinstance(drop_last, bool):
            raise TypeError(f"drop_last must be a bool, got {type(drop_last).__name__} {drop_last!r}")
        total = self.count()
        size = batch_size or max(total, 1)
        for start in range(0, total, size):
            stop = min(start + size, total)
            if drop_last and stop - start < size:
                return
            if self._columns is not None:
                batch = {key: column[start:stop] for key, column in self._columns.items()}
                yield {key: _tensor(np.ascontiguousarray(v)) for key, v in batch.items()} if to_torch else batch
            else:
                rows = [self._rows[i] for i in range(start, stop)]
                rows = [row if isinstance(row, dict) else {"item": row} for row in rows]
                yield _collate(rows, to_torch)

    def iter_batches(self, batch_size: Optional[int] = 256, batch_format: str = "numpy",
                     drop_last: bool = False) -> Iterator[Any]:
        """Batches of batch_size rows (None: the whole shard as one batch), the last one shorter unless
        drop_last; batch_format "numpy" gives dicts of NumPy arrays, "pandas" DataFrames."""
        if batch_format not in ("numpy", "default", "pandas"):
            raise ValueError(f"batch_format must be 'numpy' or 'pandas', got {batch_format!r}")
        self._load()
        for batch in self._batches(batch_size, drop_last, to_torch=False):
            if batch_format == "pandas":
                import pandas

                yield pandas.DataFrame({k: list(v) if getattr(v, "ndim", 1) > 1 else v for k, v in batch.items()})
            else:
                yield batch

    def iter_torch_batches(self, batch_size: Optional[int] = 256, dtypes: Any = None, device: Any = None,
                           drop_last: bool = False) -> Iterator[Dict[str, Any]]:
        """Batches as dicts of torch tensors (columns of strings stay NumPy arrays). dtypes: one torch.dtype
        for every column or {column: dtype}; device: where the tensors go (default: the CPU)."""
        import torch

        if dtypes is not None and not isinstance(dtypes, (torch.dtype, dict)):
            raise TypeError(f"dtypes must be a torch.dtype or a dict of column to torch.dtype, got "
                            f"{type(dtypes).__name__} {dtypes!r}")
        self._load()
        for batch in self._batches(batch_size, drop_last, to_torch=True):
            if isinstance(dtypes, dict):
                unknown = [key for key in dtypes if key not in batch]
                if unknown:
                    raise ValueError(f"dtypes names unknown column(s) {unknown} (columns: {sorted(batch)})")
                yield {k: _convert(v, dtypes.get(k), device) for k, v in batch.items()}
            else:
                yield {k: _convert(v, dtypes, device) for k, v in batch.items()}


class _TorchRows:
    """Rows start..stop-1 of a torch Dataset, as a sequence."""

    def __init__(self, dataset: Any, start: int, stop: int) -> None:
        self.dataset, self.start, self.stop = dataset, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.dataset[self.start + index]

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

