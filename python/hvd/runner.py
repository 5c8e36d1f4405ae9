"""hvd.run: runs a Python function on N ranks through hvdrun and returns the results (horovod.run).

    import hvd
    def work(scale):
        import hvd.torch as hvd_torch
        hvd_torch.init()
        return hvd_torch.rank() * scale
    hvd.run(work, args=(10,), np=2)          # -> [0, 10]

How it works: the function, its arguments and this process's sys.path are pickled (cloudpickle when it is
installed, so lambdas and closures work; else pickle) into a private temporary directory. hvdrun starts
each rank as `<executable> -m hvd.run_task <function file> <result dir>`; the rank loads the function,
calls it, and writes its pickled return value, or its exception and traceback, to <result dir>/<rank>.
Nothing travels on a command line but the two paths. The workers' output is forwarded to this process's
sys.stdout / sys.stderr with hvdrun's `[rank]<stdout>:` tags. When the job ends the directory is removed
and no worker is left running (hvdrun stops every rank when one fails).

With remote hosts the temporary directory must be visible at the same path on every host: set
HVD_RUN_TMPDIR to a shared directory (a remote rank that cannot read the function file says so).

Workers import hvd from this package's location (its parent directory is put first on their PYTHONPATH),
and `horovod` from hvd's compatibility layer when this process uses it or HVD_HOROVOD_COMPAT=1 is set.
"""

import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import warnings

from hvd.common import death_signal

try:
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - Debian's python3-cloudpickle is a dependency
    _pickler = pickle

_PACKAGE_DIR = os.path.dirname(os.path.realpath(__file__))
_PACKAGE_PARENT = os.path.dirname(_PACKAGE_DIR)
_COMPAT_DIR = os.path.join(_PACKAGE_DIR, "compat")

# Parameters of horovod.run that only elastic mode uses.
_ELASTIC = ("min_num_proc", "max_num_proc", "min_np", "max_np", "host_discovery_script", "reset_limit",
            "cooldown_range")


def run(func, args=(), kwargs=None, num_proc=None, min_num_proc=None, max_num_proc=None, slots=None,
        reset_limit=None, cooldown_range=None, hosts=None, hostfile=None, host_discovery_script=None,
        start_timeout=None, ssh_port=None, ssh_identity_file=None, disable_cache=None, output_filename=None,
        verbose=None, use_gloo=None, use_mpi=None, mpi_args=None, network_interface=None,
        network_interfaces=None, executable=None, np=None, min_np=None, max_np=None, env=None):
    """Runs func(*args, **kwargs) on num_proc ranks started by hvdrun; returns the list of return values in
    rank order.

    func, args and kwargs must be picklable (by cloudpickle: lambdas, closures and functions of __main__
    are fine), and so must each rank's return value. The function usually calls hvd.init() (through
    hvd.torch, hvd.numpy or horovod.torch) and uses the collectives.

    num_proc (np is a deprecated alias): number of ranks, default 1. hosts ("host1:2,host2:2") or hostfile
    (a path; lines "host slots=N"), not both; default "localhost:<num_proc>". slots: slots of hosts written
    without ":N". start_timeout (seconds), ssh_port, ssh_identity_file, output_filename (a directory for
    per-rank logs), verbose, disable_cache, network_interfaces (a list; network_interface, a deprecated
    comma-separated string) become hvdrun's flags. executable: the Python interpreter of the workers
    (default sys.executable). env: the workers' environment (default: this process's os.environ), to which
    PYTHONPATH is prepended the directory holding hvd.

    hvd runs on Gloo only and hvd.run runs a fixed number of ranks: use_mpi=True, mpi_args, and the elastic parameters
    (min_num_proc, max_num_proc, min_np, max_np, host_discovery_script, reset_limit, cooldown_range) are
    ValueErrors, as are hosts with hostfile, use_gloo with use_mpi, hosts or a hostfile that do not parse or
    have fewer slots than num_proc (without slots=), and arguments of the wrong type.

    Raises RuntimeError when a rank fails: the message names the rank that failed first and carries its
    exception's type, message and traceback (and the exception itself as __cause__ when it unpickles),
    then the other ranks that failed or left no result. FileNotFoundError when hvdrun cannot be found.
    """
    values = dict(locals())
    for name in _ELASTIC:
        if values[name] is not None:
            raise ValueError(f"{name}={values[name]!r}: hvd.run runs a fixed number of ranks; for an elastic job, "
                             "run a script using hvd.elastic.run under hvdrun --min-np/--host-discovery-script")
    if not callable(func):
        raise ValueError(f"func must be callable, got {type(func).__name__}")
    if not isinstance(args, (tuple, list)):
        raise ValueError(f"args must be a tuple or list, got {type(args).__name__}")
    if kwargs is None:
        kwargs = {}
    elif not isinstance(kwargs, dict):
        raise ValueError(f"kwargs must be a dict, got {type(kwargs).__name__}")
    for key in kwargs:
        if not isinstance(key, str):
            raise ValueError(f"kwargs must be a dict with str keys, got {key!r}")
    if np is not None:
        warnings.warn("np is deprecated: use num_proc", DeprecationWarning, stacklevel=2)
        if num_proc is not None and num_proc != np:
            raise ValueError(f"num_proc={num_proc!r} and np={np!r} disagree: pass only num_proc")
        num_proc = np
    if num_proc is None:
        num_proc = 1
    if isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"num_proc must be a positive int, got {num_proc!r}")
    if hosts is not None and hostfile is not None:
        raise ValueError(f"hosts={hosts!r} and hostfile={hostfile!r}: pass only one of them")
    if use_gloo and use_mpi:
        raise ValueError("use_gloo=True and use_mpi=True: pass only one of them")
    if use_mpi:
        raise ValueError("use_mpi=True: hvd runs on Gloo only (hvdrun has no MPI controller)")
    if mpi_args is not None:
        raise ValueError(f"mpi_args={mpi_args!r}: hvd runs on Gloo only (no MPI)")
    if env is not None and not isinstance(env, dict):
        raise ValueError(f"env must be a dict of str to str, got {type(env).__name__}")

    # The hosts are checked here, as Executor checks them, so that a bad one is this call's one-line error rather
    # than a failed job (hvdrun's own message would only be on its stderr).
    from hvd.executor.engine import parse_hostfile, parse_hosts

    flags = ["-np", str(num_proc)]
    if hostfile is not None:
        where = f"hostfile={_path(hostfile, 'hostfile')!r}"
        planned = parse_hostfile(hostfile)
        flags += ["--hostfile", os.fspath(hostfile)]
    else:
        if hosts is None:
            hosts = f"localhost:{num_proc}"
        where = f"hosts={hosts!r}"
        planned = parse_hosts(hosts)
        flags += ["-H", hosts]
    if slots is not None:
        flags += ["--slots-per-host", _positive(slots, "slots")]
    elif num_proc > sum(count for _, count in planned):
        raise ValueError(f"num_proc={num_proc} is more than the {sum(c for _, c in planned)} slot(s) of {where}")
    if start_timeout is not None:
        flags += ["--start-timeout", _positive(start_timeout, "start_timeout")]
    if ssh_port is not None:
        flags += ["--ssh-port", _positive(ssh_port, "ssh_port")]
    if ssh_identity_file is not None:
        flags += ["--ssh-identity-file", _path(ssh_identity_file, "ssh_identity_file")]
    if disable_cache:
        flags.append("--disable-cache")
    if output_filename is not None:
        flags += ["--output-filename", _path(output_filename, "output_filename")]
    if verbose:
        flags.append("--verbose")
    if network_interface is not None:
        warnings.warn("network_interface is deprecated: use network_interfaces", DeprecationWarning, stacklevel=2)
        if network_interfaces is not None:
            raise ValueError("network_interface and network_interfaces: pass only network_interfaces")
        network_interfaces = [nic for nic in str(network_interface).split(",") if nic]
    if network_interfaces is not None:
        if isinstance(network_interfaces, str):
            network_interfaces = [nic for nic in network_interfaces.split(",") if nic]
        if not isinstance(network_interfaces, (list, tuple)) or not all(isinstance(n, str) and n
                                                                          for n in network_interfaces):
            raise ValueError(f"network_interfaces must be a list of interface names, got {network_interfaces!r}")
        flags += ["--network-interfaces", ",".join(network_interfaces)]

    worker_env = dict(os.environ if env is None else env)
    for key, value in worker_env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"env must map str to str, got {key!r}: {value!r}")
    _prepend_package_path(worker_env)

    hvdrun = _find_hvdrun()
    python = _path(executable, "executable") if executable else sys.executable
    if not python:
        raise ValueError("executable: no Python interpreter given and sys.executable is empty")

    try:
        pickled = _pickler.dumps((func, tuple(args), kwargs))
    except Exception as e:
        raise ValueError(f"hvd.run: func, args and kwargs must be picklable to reach the ranks: "
                         f"{type(e).__name__}: {e}") from e
    payload = pickle.dumps({"sys_path": list(sys.path), "func": pickled})
    root = os.environ.get("HVD_RUN_TMPDIR") or tempfile.gettempdir()
    _remove_orphans(root)
    work_dir = tempfile.mkdtemp(prefix=_WORK_PREFIX, dir=root)
    try:
        with open(os.path.join(work_dir, _DRIVER_FILE), "w") as f:
            f.write(_process_identity(os.getpid()))
        func_file = os.path.join(work_dir, "func.pkl")
        result_dir = os.path.join(work_dir, "results")
        os.mkdir(result_dir)
        with open(func_file, "wb") as f:
            f.write(payload)
        cmd = [hvdrun, *flags, python, "-m", "hvd.run_task", func_file, result_dir]
        status = _run_job(cmd, worker_env)
        return _collect(result_dir, num_proc, status)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


_WORK_PREFIX = "hvd-run-"
_DRIVER_FILE = "driver"  # in a work folder: "PID START" of the driver that made it


def _process_identity(pid):
    """ "PID START" (START: the process's start time in clock ticks since boot, so that a reused pid does not
    pass for it); "" when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return f"{pid} {fields[19]}"
    except (OSError, IndexError):
        return ""


def _remove_orphans(root):
    """Removes the work folders in root whose driver is gone: one killed with SIGKILL or SIGTERM cannot remove its
    own (its hvdrun and ranks stop with it: they get a parent-death signal)."""
    try:
        entries = os.listdir(root)
    except OSError:
        return
    for name in entries:
        if not name.startswith(_WORK_PREFIX):
            continue
        folder = os.path.join(root, name)
        try:
            with open(os.path.join(folder, _DRIVER_FILE)) as f:
                driver = f.read().strip()
        except OSError:
            continue  # not ours, or a driver that has not written it yet
        pid = driver.split(" ", 1)[0]
        if not pid.isdigit() or _process_identity(int(pid)) != driver:
            shutil.rmtree(folder, ignore_errors=True)


def _path(value, name):
    """value as a str path; ValueError naming the argument when it is not one."""
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"{name} must be a path, got {value!r}")
    return os.fspath(value)


def _positive(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return str(value)


def _prepend_package_path(worker_env):
    """Puts the directory holding hvd first on worker_env's PYTHONPATH (and hvd's `horovod` compatibility
    package before it when _uses_compat), keeping what PYTHONPATH already held after them. Also used by
    hvd.executor's hvdrun engine."""
    path = [_PACKAGE_PARENT]
    if _uses_compat(worker_env):
        path.insert(0, _COMPAT_DIR)
    if worker_env.get("PYTHONPATH"):
        path.append(worker_env["PYTHONPATH"])
    worker_env["PYTHONPATH"] = os.pathsep.join(path)


def _uses_compat(worker_env):
    """True when the workers should import `horovod` from hvd's compatibility layer: this process imported it
    from there, or HVD_HOROVOD_COMPAT=1."""
    if worker_env.get("HVD_HOROVOD_COMPAT") == "1" or os.environ.get("HVD_HOROVOD_COMPAT") == "1":
        return True
    module = sys.modules.get("horovod")
    origin = getattr(module, "__file__", None) or ""
    return bool(origin) and os.path.realpath(origin).startswith(_COMPAT_DIR + os.sep)


def _find_hvdrun():
    """hvdrun next to this package: <build>/hvdrun for the build tree (<build>/python/hvd), else
    <prefix>/bin/hvdrun for an installed package (<prefix>/lib/.../hvd); else the first on $PATH."""
    tried = []
    directory = _PACKAGE_PARENT
    candidates = [os.path.join(directory, os.pardir, "hvdrun")]
    for _ in range(5):
        directory = os.path.dirname(directory)
        candidates.append(os.path.join(directory, "bin", "hvdrun"))
    for candidate in candidates:
        candidate = os.path.normpath(candidate)
        tried.append(candidate)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("hvdrun")
    if found:
        return found
    raise FileNotFoundError(f"hvd.run: cannot find hvdrun (looked at {', '.join(tried)} and on $PATH)")


def _forward(stream, target):
    """Copies hvdrun's output to target line by line: "stdout" or "stderr" (this process's sys.stdout or
    sys.stderr, as they are at each line), or a text file object (written whole lines, under its own lock)."""
    for line in iter(stream.readline, b""):
        out = target if not isinstance(target, str) else sys.stdout if target == "stdout" else sys.stderr
        try:
            out.write(line.decode("utf-8", errors="replace"))
            out.flush()
        except Exception:
            pass  # our own stream is closed or missing: keep draining so hvdrun never blocks
    stream.close()


def _run_job(cmd, env):
    """Runs hvdrun to completion, forwarding its output; returns its exit status. On KeyboardInterrupt (or
    any exception while waiting) hvdrun gets SIGTERM, which it passes on to every rank, then SIGKILL; so it does
    when this process dies (a parent-death signal: this thread waits for hvdrun, so it outlives it)."""
    proc = subprocess.Popen(cmd, env={**env, **death_signal.child_environment()}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    threads = [threading.Thread(target=_forward, args=(proc.stdout, "stdout"), daemon=True),
               threading.Thread(target=_forward, args=(proc.stderr, "stderr"), daemon=True)]
    for t in threads:
        t.start()
    try:
        status = proc.wait()
    except BaseException:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    finally:
        for t in threads:
            t.join()
    return status


def _load_result(path):
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        return None


def _collect(result_dir, num_proc, status):
    """The return values in rank order; RuntimeError describing the failure otherwise."""
    records = [_load_result(os.path.join(result_dir, str(r))) for r in range(num_proc)]
    failed = [(r, rec) for r, rec in enumerate(records) if rec is not None and not rec["ok"]]
    missing = [r for r, rec in enumerate(records) if rec is None]
    if not failed and not missing and status == 0:
        results = []
        for r, rec in enumerate(records):
            try:
                results.append(pickle.loads(rec["value"]))
            except Exception as e:
                raise RuntimeError(f"hvd.run: cannot unpickle the return value of rank {r} in this process: "
                                   f"{type(e).__name__}: {e}") from e
        return results

    lines = []
    cause = None
    if failed:
        failed.sort(key=lambda item: item[1]["time"])
        first, rec = failed[0]
        lines.append(f"hvd.run: rank {first} failed with {rec['type']}: {rec['message']}")
        lines.append(f"rank {first}'s traceback:")
        lines.append(rec["traceback"].rstrip("\n"))
        for r, other in failed[1:]:
            lines.append(f"rank {r} also failed with {other['type']}: {other['message']}")
        if rec.get("exception") is not None:
            try:
                cause = pickle.loads(rec["exception"])
            except Exception:
                cause = None
    else:
        lines.append(f"hvd.run: the job failed (hvdrun exited with status {status}) and no rank reported an "
                     "exception")
    if missing:
        ranks = ", ".join(str(r) for r in missing)
        lines.append(f"rank(s) {ranks} left no result (stopped with the job, or died: their output is above)")
    error = RuntimeError("\n".join(lines))
    if cause is not None:
        raise error from cause
    raise error
