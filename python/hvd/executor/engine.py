"""Engines start and supervise the processes that host an Executor's ranks; the ranks connect back to the driver.

Engine is the contract (also implemented by the Dask engine): start() starts num_workers ranks, each running
hvd.executor.worker.serve(host, driver_port, token) with host an address of the driver reachable from that rank,
and the variables of env set; exit_status() is None while the ranks may still run, else one line saying why they
ended; stop() ends every rank it started, is idempotent and leaves no process behind.

HvdrunEngine runs ONE persistent hvdrun job, `hvdrun -np N [-H ... | --hostfile F] [ssh flags]
[--network-interfaces ...] <python> -m hvd.executor.worker`, so hvdrun does what it does for any job: local
ranks by fork/exec, remote ones over ssh, inside a Slurm allocation (SLURM_JOB_ID set, no hosts given) the hosts
of the allocation through srun; the rendezvous server; output tags; teardown of every rank when one fails or when
hvdrun gets SIGTERM. Each rank reaches the driver at HOROVOD_GLOO_RENDEZVOUS_ADDR, the address hvdrun gives its
ranks for the rendezvous server, an address of the host where hvdrun and the driver run. The driver's port and
token travel in HVD_EXECUTOR_PORT / HVD_EXECUTOR_TOKEN: hvdrun gives every rank, remote ones included, its own
environment, so no -x is needed, and the token is never on a command line.

hvdrun's own start timeout (every rank joins the rendezvous within S seconds of the start) does not fit workers
that call hvd.init() whenever the user's first function does, so it is set beyond reach; the driver has its own
deadline for the ranks to connect back (ExecutorSettings.start_timeout_s).

Threading: a supervisor thread starts hvdrun (so that PR_SET_PDEATHSIG, which fires when the thread that started
the child ends, fires only when the driver process ends) and waits for it; two threads copy its stdout and
stderr to this process's, line by line, keeping hvdrun's own stderr lines to explain how the job ended.

Errors: bad hosts, hostfiles, more workers than slots: ValueError naming the value, from the constructor,
before anything starts. start() raises ExecutorError when hvdrun cannot be started.
"""

import collections
import os
import re
import signal
import subprocess
import sys
import threading

from hvd import runner
from hvd.common import death_signal
from hvd.executor import protocol
from hvd.executor.errors import ExecutorError

# hvdrun's --start-timeout, in seconds: about 31 years, "never" for a persistent job.
_NO_START_TIMEOUT = 10 ** 9
_STOP_KILL_AFTER_S = 5.0
_HOST_ITEM = re.compile(r"^((?:[\w.-]+@)?(?:\[[0-9A-Fa-f:.%\w]+\]|[\w.-]+))(?::(\d+))?$")


class Engine:
    """Starts and supervises the processes that host an Executor's ranks; the ranks connect back to the driver."""

    def start(self, *, num_workers: int, driver_port: int, token: str, env: "dict[str, str]",
              settings) -> None:
        """Starts num_workers ranks, each running hvd.executor.worker.serve(host, driver_port, token), host being
        an address of the driver reachable from that rank, with the variables of env set. Raises ExecutorError
        (one line) when it cannot."""
        raise NotImplementedError

    def exit_status(self) -> "str | None":
        """None while the ranks may still run, else one line saying why they ended."""
        raise NotImplementedError

    def stop(self, timeout: float) -> None:
        """Ends every rank it started (waiting up to timeout seconds for them to leave by themselves first);
        idempotent; leaves no process behind."""
        raise NotImplementedError


def check_env(env: "dict[str, str] | None") -> None:
    """TypeError naming the offending entry unless env is None or a dict of str to str."""
    if env is None:
        return
    if not isinstance(env, dict):
        raise TypeError(f"env must be a dict of str to str, got {type(env).__name__}")
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"env must map str to str, got {key!r}: {value!r}")


def parse_hosts(hosts: str) -> "list[tuple[str, int]]":
    """'h1:2,user@h2:4,[fe80::1]:2' -> [(host, slots)] in order, repeated hosts merged (as hvdrun does); a host
    without :N has 1 slot. ValueError naming the bad item."""
    if not isinstance(hosts, str) or not hosts.strip():
        raise ValueError(f"hosts must be a string like 'host1:2,host2:2', got {hosts!r}")
    slots = {}
    for item in hosts.split(","):
        item = item.strip()
        match = _HOST_ITEM.match(item)
        if not match or (match.group(2) is not None and int(match.group(2)) < 1):
            raise ValueError(f"hosts={hosts!r}: {item!r} is not 'host' or 'host:slots' with slots >= 1")
        name = match.group(1)
        slots[name] = slots.get(name, 0) + int(match.group(2) or 1)
    return list(slots.items())


def parse_hostfile(hostfile) -> "list[tuple[str, int]]":
    """Lines 'host [slots=N] [max_slots=M]', '#' comments and blank lines -> [(host, slots)]. ValueError naming
    the file and line of a bad entry, or the file when it cannot be read."""
    path = os.fspath(hostfile)
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ValueError(f"hostfile={path!r} cannot be read: {e.strerror or e}") from None
    slots = {}
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        name, *fields = text.split()
        count = 1
        for field in fields:
            key, _, value = field.partition("=")
            if key not in ("slots", "max_slots") or not value.isdigit() or int(value) < 1:
                raise ValueError(f"hostfile {path}:{number}: {field!r} is not slots=N or max_slots=N (N >= 1)")
            if key == "slots":
                count = int(value)
        if not _HOST_ITEM.match(name) or ":" in name.lstrip("["):
            if not (name.startswith("[") and name.endswith("]")):
                raise ValueError(f"hostfile {path}:{number}: {name!r} is not a host name")
        slots[name] = slots.get(name, 0) + count
    if not slots:
        raise ValueError(f"hostfile={path!r} lists no host")
    return list(slots.items())




_LAUNCHERS = ("auto", "local", "ssh", "slurm")


def check_output(output) -> "str | None":
    """output= of an engine as a path (None stays None); TypeError or ValueError naming it when it cannot be a
    file the job's output is appended to."""
    if output is None:
        return None
    if not isinstance(output, (str, os.PathLike)):
        raise TypeError(f"output must be a file path, got {type(output).__name__}")
    path = os.fspath(output)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ValueError(f"output={path!r}: {path} is a directory")
    if not os.path.isdir(folder):
        raise ValueError(f"output={path!r}: the folder {folder} does not exist")
    return path


class _LockedFile:
    """A text file that two forwarding threads append whole lines to; redirect() switches files between lines."""

    def __init__(self, path: str):
        self._file = open(path, "a", encoding="utf-8", errors="replace")
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        with self._lock:
            self._file.write(text)

    def flush(self) -> None:
        with self._lock:
            self._file.flush()

    def redirect(self, path: str) -> None:
        new = open(path, "a", encoding="utf-8", errors="replace")
        with self._lock:
            old, self._file = self._file, new
        old.close()


class _Tap:
    """A stream for runner._forward that also keeps hvdrun's own lines (those without a rank tag)."""

    def __init__(self, stream, kept: collections.deque):
        self._stream = stream
        self._kept = kept

    def readline(self):
        line = self._stream.readline()
        if line and not line.startswith(b"["):
            self._kept.append(line.decode("utf-8", errors="replace").rstrip("\n"))
        return line

    def close(self):
        self._stream.close()


class HvdrunEngine(Engine):
    """Runs the ranks as one hvdrun job (see the module docstring).

    num_workers: the ranks, or None inside a Slurm allocation without hosts (then SLURM_NTASKS, which must be
    set). hosts ('h1:2,h2:2') or hostfile, not both; neither: localhost, or the Slurm allocation when
    SLURM_JOB_ID is set. num_hosts: use the first num_hosts hosts with num_workers_per_host ranks each. env: the
    base environment of the ranks (default os.environ); executable: their Python (default sys.executable).
    output: a file the job's output (hvdrun's and the ranks', tagged by rank) is appended to instead of this
    process's stdout and stderr. launcher: hvdrun's --launcher (auto, local, ssh, slurm).
    Raises ValueError naming the bad value, before anything starts."""

    def __init__(self, num_workers: "int | None", *, hosts: "str | None" = None, hostfile=None,
                 num_hosts: "int | None" = None, num_workers_per_host: int = 1,
                 env: "dict[str, str] | None" = None, executable: "str | None" = None,
                 elastic: "dict | None" = None, output=None, launcher: "str | None" = None):
        if hosts is not None and hostfile is not None:
            raise ValueError(f"hosts={hosts!r} and hostfile={hostfile!r}: pass only one of them")
        base_env = os.environ if env is None else env
        self._host_flags = []
        self._elastic_flags = []
        if elastic is not None:
            num_workers = elastic["min_np"]
            self._elastic_flags = self._plan_elastic(elastic, hosts, hostfile)
        elif hosts is not None or hostfile is not None:
            plan = parse_hosts(hosts) if hosts is not None else parse_hostfile(hostfile)
            where = f"hosts={hosts!r}" if hosts is not None else f"hostfile={os.fspath(hostfile)!r}"
            if num_hosts is not None:
                if len(plan) < num_hosts:
                    raise ValueError(f"num_hosts={num_hosts} but {where} lists {len(plan)} host(s)")
                small = [f"{name}:{slots}" for name, slots in plan[:num_hosts] if slots < num_workers_per_host]
                if small:
                    raise ValueError(f"num_workers_per_host={num_workers_per_host} but {where} gives "
                                     f"{', '.join(small)} (fewer slots)")
                self._host_flags = ["-H", ",".join(f"{name}:{num_workers_per_host}" for name, _ in
                                                   plan[:num_hosts])]
            else:
                total = sum(slots for _, slots in plan)
                if num_workers > total:
                    raise ValueError(f"num_workers={num_workers} is more than the {total} slot(s) of {where}")
                self._host_flags = (["-H", hosts] if hosts is not None else
                                    ["--hostfile", os.fspath(hostfile)])
        elif base_env.get("SLURM_JOB_ID"):
            if num_workers is None:
                ntasks = base_env.get("SLURM_NTASKS", "")
                if not ntasks.isdigit() or int(ntasks) < 1:
                    raise ValueError(f"num_workers=None inside the Slurm allocation {base_env['SLURM_JOB_ID']} "
                                     f"whose SLURM_NTASKS={ntasks!r} is not a count: pass num_workers")
                num_workers = int(ntasks)
        elif num_workers is None:
            raise ValueError("num_workers=None: pass num_workers (or num_hosts with hosts=)")
        else:
            self._host_flags = ["-H", f"localhost:{num_workers}"]
        check_env(env)
        if launcher is not None and launcher not in _LAUNCHERS:
            raise ValueError(f"launcher={launcher!r}: choose from {', '.join(map(repr, _LAUNCHERS))}")
        self._launcher = launcher
        self._output = check_output(output)
        if executable is not None and not isinstance(executable, (str, os.PathLike)):
            raise TypeError(f"executable must be the path of a Python interpreter, got {type(executable).__name__}")
        self._python = os.fspath(executable) if executable else sys.executable
        if not self._python:
            raise ValueError("executable: no Python interpreter given and sys.executable is empty")
        self.num_workers = num_workers
        self._env = env
        self._hvdrun = runner._find_hvdrun()
        self._proc = None
        self._started = threading.Event()
        self._done = threading.Event()
        self._spawn_error = None
        self._output_file = None
        self._status = None
        self._lines = collections.deque(maxlen=64)
        self._forwarders = []
        self._supervisor = None
        self._lock = threading.Lock()

    def _plan_elastic(self, elastic: dict, hosts, hostfile) -> "list[str]":
        """hvdrun's elastic flags; ValueError naming what does not fit."""
        script = elastic.get("discovery_script")
        min_np, max_np = elastic["min_np"], elastic.get("max_np")
        flags = ["--min-np", str(min_np)]
        if max_np is not None:
            flags += ["--max-np", str(max_np)]
        if script is not None:
            if hosts is not None or hostfile is not None:
                raise ValueError(f"discovery_script={script!r} with hosts/hostfile: the hosts come from one of them")
            script = os.fspath(script)
            if not (os.path.isfile(script) and os.access(script, os.X_OK)):
                raise ValueError(f"discovery_script={script!r} is not an executable file")
            flags += ["--host-discovery-script", script]
        elif hosts is not None or hostfile is not None:
            plan = parse_hosts(hosts) if hosts is not None else parse_hostfile(hostfile)
            total = sum(slots for _, slots in plan)
            where = f"hosts={hosts!r}" if hosts is not None else f"hostfile={os.fspath(hostfile)!r}"
            if min_np > total:
                raise ValueError(f"min_workers={min_np} is more than the {total} slot(s) of {where}")
            self._host_flags = ["-H", hosts] if hosts is not None else ["--hostfile", os.fspath(hostfile)]
        else:
            raise ValueError(f"min_workers={min_np}: an elastic executor needs hosts=, hostfile= or "
                             "discovery_script= (where workers may run)")
        if elastic.get("reset_limit") is not None:
            flags += ["--reset-limit", str(elastic["reset_limit"])]
        if elastic.get("cooldown_range") is not None:
            low, high = elastic["cooldown_range"]
            flags += ["--blacklist-cooldown-range", str(low), str(high)]
        if elastic.get("elastic_timeout") is not None:
            flags += ["--elastic-timeout", str(elastic["elastic_timeout"])]
        return flags

    def command(self, settings) -> "list[str]":
        """hvdrun's command line for settings (no secret on it)."""
        cmd = [self._hvdrun, "-np", str(self.num_workers), *self._host_flags]
        if self._elastic_flags:
            cmd += self._elastic_flags
        else:
            cmd += ["--start-timeout", str(_NO_START_TIMEOUT)]
        if settings.ssh_identity_file is not None:
            cmd += ["--ssh-identity-file", os.fspath(settings.ssh_identity_file)]
        if settings.ssh_port is not None:
            cmd += ["--ssh-port", str(settings.ssh_port)]
        if settings.nics:
            cmd += ["--network-interfaces", ",".join(settings.nics)]
        if self._launcher is not None:
            cmd += ["--launcher", self._launcher]
        return cmd + [self._python, "-m", "hvd.executor.worker"]

    def start(self, *, num_workers: int, driver_port: int, token: str, env: "dict[str, str]",
              settings) -> None:
        if num_workers != self.num_workers:
            raise ValueError(f"num_workers={num_workers}: this engine was planned for {self.num_workers}")
        if self._supervisor is not None:
            raise ExecutorError("HvdrunEngine.start: this engine already ran a job; make a new one")
        worker_env = dict(os.environ if self._env is None else self._env)
        worker_env.update(env)
        runner._prepend_package_path(worker_env)
        worker_env[protocol.PORT_ENV] = str(driver_port)
        worker_env[protocol.TOKEN_ENV] = token
        cmd = self.command(settings)
        self._supervisor = threading.Thread(target=self._supervise, args=(cmd, worker_env),
                                            name="hvd-executor-hvdrun", daemon=True)
        self._supervisor.start()
        if not self._started.wait(30):
            raise ExecutorError(f"hvdrun did not start within 30 s ({cmd[0]})")
        if self._spawn_error is not None:
            raise ExecutorError(f"cannot start hvdrun ({cmd[0]}): {self._spawn_error}")

    def _supervise(self, cmd, worker_env):
        try:
            # The output file first: one that cannot be opened fails the start, before there is a job to stop.
            out, err = "stdout", "stderr"
            if self._output is not None:
                out = err = self._output_file = _LockedFile(self._output)
            # SIGTERM to hvdrun when this supervisor thread, which lives as long as the driver, ends: hvdrun then
            # stops its ranks.
            self._proc = subprocess.Popen(cmd, env={**worker_env, **death_signal.child_environment()},
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except Exception as e:  # start() waits for _started: whatever went wrong is its error, at once
            where = f"output={self._output!r}: " if self._output is not None and self._output_file is None else ""
            self._spawn_error = f"{where}{type(e).__name__}: {e}"
            self._status = f"hvdrun could not be started: {self._spawn_error}"
            self._started.set()
            self._done.set()
            return
        self._forwarders = [
            threading.Thread(target=runner._forward, args=(self._proc.stdout, out), daemon=True,
                             name="hvd-executor-stdout"),
            threading.Thread(target=runner._forward, args=(_Tap(self._proc.stderr, self._lines), err),
                             daemon=True, name="hvd-executor-stderr")]
        for t in self._forwarders:
            t.start()
        self._started.set()
        code = self._proc.wait()
        # hvdrun's last lines (the failure banner) are read before the status says how the job ended.
        self._forwarders[1].join(5)
        self._status = self._describe(code)
        self._done.set()

    def _describe(self, code: int) -> str:
        text = f"hvdrun exited with status {code}"
        if code < 0:
            text = f"hvdrun was killed by signal {-code}"
        details = []
        rank_line = None
        error_goes_on = False
        for line in self._lines:
            # An error of several lines (one per ssh host that failed the preflight) goes on in lines without
            # the "hvdrun:" prefix, up to the usage hint, a failure banner or the next line of hvdrun's.
            if error_goes_on and line and not line[0].isspace() and not line.startswith(("hvdrun", "Try 'hvdrun",
                                                                                          "=")):
                details.append(line)
                continue
            error_goes_on = False
            banner = re.search(r"BAD TERMINATION OF RANK (\d+) ON HOST (\S+)(?: \(PID (\d+)\))?", line)
            if banner:
                pid = f" (pid {banner.group(3)})" if banner.group(3) else ""
                rank_line = f"rank {banner.group(1)} on {banner.group(2)}{pid}"
                continue
            status = re.search(r"(KILLED BY|EXIT STATUS:) (.*)$", line)
            if status and rank_line:
                how = ("was killed by " if status.group(1) == "KILLED BY" else "ended with ") + status.group(2).strip()
                details.append(f"{rank_line} {how}")
                rank_line = None
                continue
            if line.startswith("hvdrun: error:"):
                details.append(line[len("hvdrun: "):])
                error_goes_on = True
        return "; ".join([text] + details)

    def exit_status(self) -> "str | None":
        return self._status if self._done.is_set() else None

    def redirect_output(self, path) -> None:
        """From now on the job's output goes to path (an engine made with output= only)."""
        if self._output_file is None:
            raise ValueError("redirect_output: this engine was not made with output=")
        self._output_file.redirect(os.fspath(path))

    def stop(self, timeout: float) -> None:
        with self._lock:
            proc = self._proc
            if proc is None or self._supervisor is None:
                return
            if not self._done.wait(timeout):
                try:
                    proc.send_signal(signal.SIGTERM)
                except OSError:
                    pass
                if not self._done.wait(_STOP_KILL_AFTER_S):
                    try:
                        proc.kill()
                    except OSError:
                        pass
                    self._done.wait(_STOP_KILL_AFTER_S)
            self._supervisor.join(_STOP_KILL_AFTER_S)
            for t in self._forwarders:
                t.join(_STOP_KILL_AFTER_S)
