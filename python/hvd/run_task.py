"""One rank of hvd.run: `python -m hvd.run_task <function file> <result dir>` (started by hvdrun).

Loads the pickled function, arguments and driver's sys.path from <function file>, calls the function,
and writes <result dir>/<rank> (rank from HOROVOD_RANK): a pickled dict, either
{"ok": True, "value": <pickled return value>} or {"ok": False, "type", "message", "traceback", "time",
"exception": <pickled exception or None>}. The file appears atomically (written aside, then renamed).
Exits 0 after a success and 1 after a failure (the exit code of SystemExit when it is a non-zero int),
so hvdrun stops the other ranks.
"""

import os
import pickle
import sys
import time
import traceback

try:
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover
    _pickler = pickle


def _write(result_dir, rank, record):
    path = os.path.join(result_dir, str(rank))
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(record, f)
    os.replace(tmp, path)


def _failure(exc, tb):
    try:
        exception = pickle.dumps(exc)
        pickle.loads(exception)
    except Exception:
        exception = None
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return {"ok": False, "type": name, "message": str(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, tb)), "time": time.time(),
            "exception": exception}


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: python -m hvd.run_task <function file> <result dir> (started by hvd.run)\n")
        return 2
    func_file, result_dir = argv[1], argv[2]
    rank = int(os.environ.get("HOROVOD_RANK", "0"))
    try:
        with open(func_file, "rb") as f:
            payload = pickle.load(f)
    except OSError as e:
        sys.stderr.write(f"hvd.run_task: rank {rank} cannot read the function file {func_file}: {e.strerror}; "
                         "with remote hosts, set HVD_RUN_TMPDIR to a directory shared by every host\n")
        return 1
    for entry in payload["sys_path"]:
        if entry not in sys.path:
            sys.path.append(entry)

    code = 0
    try:
        func, args, kwargs = pickle.loads(payload["func"])
    except BaseException as e:
        record = _failure(e, e.__traceback__)
        record["message"] = f"cannot unpickle the function on rank {rank}: {record['message']}"
        code = 1
    else:
        try:
            value = func(*args, **kwargs)
        except BaseException as e:
            # Leave out this module's frame: the traceback starts in the user's function.
            record = _failure(e, e.__traceback__.tb_next)
            code = e.code if isinstance(e, SystemExit) and isinstance(e.code, int) and e.code else 1
        else:
            try:
                record = {"ok": True, "value": _pickler.dumps(value)}
            except Exception as e:
                record = _failure(e, e.__traceback__)
                record["message"] = f"the return value of rank {rank} cannot be pickled: {record['message']}"
                code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    _write(result_dir, rank, record)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
