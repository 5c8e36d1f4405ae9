"""hvd.Executor: persistent, stateful workers driven from a Python program (Horovod's RayExecutor API, without Ray).

    from hvd.executor import Executor
    ex = Executor(num_workers=4)                 # hvdrun starts the ranks (local, -H hosts, or a Slurm allocation)
    ex.start(executable_cls=Trainer)             # each rank keeps Trainer()
    ex.run(fn, args=(...))                       # fn(*args) on every rank; results in rank order
    ex.execute(lambda w: w.train())              # fn(instance) on every rank
    ex.shutdown()

Contract. The ranks are started once, by start(), and every later call reuses them: no process start and no new
rendezvous per call; their module globals, their instance and hvd's state persist between calls. The user's
functions call hvd.init() themselves (hvd.torch or hvd.numpy); a second init() does nothing. Calls run one after
the other on each rank, in the order they were made.

Errors. Bad arguments are ValueError/TypeError naming the value, raised before anything starts. A function that
raises on a rank: WorkerError (the first failure to reach the driver; the others are named in it), and the
executor stays usable when every rank answered. If the other ranks are still busy settings.timeout_s after a
rank failed, or a worker dies, or the engine ends: ExecutorError, the executor is shut down and later calls raise
ExecutorError at once; start() again (or a new Executor) starts fresh workers. Ctrl-C while a call waits shuts
the executor down and re-raises KeyboardInterrupt.

Threading. Use one Executor from one thread at a time (calls from several threads are sent in a consistent order,
but their results interleave in no defined way). Callbacks run in the calling thread.
"""

import dataclasses
import importlib.util
import math
import os
import sys
import threading

from hvd.executor import protocol
from hvd.executor.engine import Engine, HvdrunEngine, check_env
from hvd.executor.session import Session
from hvd.run_task import _pickler


def _number(value, name: str, minimum: float, *, integer: bool = False, allow_none: bool = False):
    if value is None and allow_none:
        return None
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not value >= minimum:
        kind = "an int" if integer else "a number"
        raise ValueError(f"{name} must be {kind} >= {minimum:g}, got {value!r}")
    # An infinite or astronomic timeout would fail only later, where it becomes an integer (OverflowError).
    if value > _MAX_NUMBER:
        raise ValueError(f"{name}={value!r} is more than {_MAX_NUMBER:g} (about 31 years: use that for never)")
    return value


_MAX_NUMBER = 10 ** 9  # seconds: about 31 years, hvdrun's "never"


@dataclasses.dataclass
class ExecutorSettings:
    """Settings of an Executor.

    timeout_s: the Gloo rendezvous and collective timeout of the workers (HOROVOD_GLOO_TIMEOUT_SECONDS, rounded
    up to whole seconds), and how long the driver waits for the other ranks after one rank's function raised.
    ssh_identity_file, ssh_port: for remote hosts (hvdrun's --ssh-identity-file, --ssh-port). nics: network
    interfaces for Gloo (hvdrun's --network-interfaces; the first one is HOROVOD_GLOO_IFACE).
    start_timeout_s: every rank must have connected back to the driver within this time of start().
    failure_grace_s: after one rank's function raised, how long the driver waits for the other ranks to finish the
    call before it ends the job (default: timeout_s); 0 ends it at once (a search's trial: the job is over)."""

    timeout_s: float = 30
    ssh_identity_file: "str | None" = None
    ssh_port: "int | None" = None
    nics: "list[str] | None" = None
    start_timeout_s: float = 120
    failure_grace_s: "float | None" = None

    def __post_init__(self):
        _number(self.timeout_s, "timeout_s", 1)
        _number(self.start_timeout_s, "start_timeout_s", 1)
        _number(self.failure_grace_s, "failure_grace_s", 0, allow_none=True)
        if self.ssh_port is not None and (isinstance(self.ssh_port, bool) or not isinstance(self.ssh_port, int)
                                          or not 1 <= self.ssh_port <= 65535):
            raise ValueError(f"ssh_port must be a port number (1-65535), got {self.ssh_port!r}")
        if self.ssh_identity_file is not None and not isinstance(self.ssh_identity_file, (str, os.PathLike)):
            raise TypeError(f"ssh_identity_file must be a path, got {self.ssh_identity_file!r}")
        if self.nics is not None:
            nics = self.nics
            if isinstance(nics, str):
                nics = [nic for nic in nics.split(",") if nic]
            elif isinstance(nics, (set, frozenset)):
                nics = sorted(nics)
            if not isinstance(nics, (list, tuple)) or not nics or not all(
                    isinstance(nic, str) and nic and "," not in nic for nic in nics):
                raise ValueError(f"nics must be a non-empty list of interface names, got {self.nics!r}")
            self.nics = list(nics)


def _qualname(fn) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


class Executor:
    """Persistent workers that run Python functions as the ranks of one hvd job (RayExecutor's API).

    Workers: num_workers ranks, or num_hosts hosts x num_workers_per_host ranks (with hosts= or hostfile=, the
    first num_hosts hosts with that many ranks each; without, localhost). hosts ('h1:2,h2:2') or hostfile (lines
    'host slots=N'), not both; neither: this machine, or inside a Slurm allocation (SLURM_JOB_ID set) the
    allocation's hosts, planned by hvdrun. cpus_per_worker becomes the workers' OMP_NUM_THREADS unless the
    environment sets it. use_gpu / gpus_per_worker: every rank sees its host's GPUs and picks one by local rank.
    env: the workers' base environment (default os.environ); executable: their Python (default sys.executable).
    client: a distributed.Client, to host the ranks in that Dask cluster's worker processes (hvd.executor's Dask
    engine); engine: any Engine. settings: ExecutorSettings (Executor.create_settings). output: a file the job's
    output (tagged by rank) goes to instead of this process's stdout and stderr (with client=: what the ranks'
    threads print from Python, which otherwise also comes here, tagged, instead of into the Dask workers' logs;
    not with an elastic client= executor); launcher: hvdrun's --launcher (auto, local, ssh, slurm), not with
    client=; neither applies with engine=.

    min_workers (instead of num_workers), max_workers, reset_limit, cooldown_range (min_s, max_s),
    elastic_timeout: an elastic executor. Its workers are not persistent: each run(fn) is an elastic hvdrun job
    (--min-np, --max-np, --reset-limit, --blacklist-cooldown-range, --elastic-timeout) on hosts=, hostfile=, the
    hosts a discovery_script= prints (horovodrun's format), or a Dask cluster's worker processes (client=: workers
    joining and leaving the cluster are the discovery, hvd.executor.dask_elastic), one of which is required; fn trains under
    hvd.elastic.run, every worker process runs it once, replacements and new hosts' processes too, and run()
    returns the values of the workers that returned in the job's last round, in rank order (hvd.executor.elastic).
    execute(), execute_single(), run_remote() and executable_cls are ValueErrors on it.

    Every bad argument raises ValueError or TypeError naming it here, before anything starts."""

    def __init__(self, settings: "ExecutorSettings | None" = None, num_workers: "int | None" = None,
                 num_hosts: "int | None" = None, num_workers_per_host: int = 1, cpus_per_worker: float = 1,
                 use_gpu: bool = False, gpus_per_worker: "float | None" = None, min_workers: "int | None" = None,
                 max_workers: "int | None" = None, reset_limit: "int | None" = None, cooldown_range=None,
                 elastic_timeout: float = 600, *, hosts: "str | None" = None, hostfile=None, client=None,
                 engine: "Engine | None" = None, env: "dict[str, str] | None" = None,
                 executable: "str | None" = None, discovery_script=None, output=None,
                 launcher: "str | None" = None):
        if settings is None:
            settings = ExecutorSettings()
        elif not isinstance(settings, ExecutorSettings):
            raise TypeError(f"settings must be an ExecutorSettings (Executor.create_settings), got {settings!r}")
        if num_workers is not None and num_hosts is not None:
            raise ValueError(f"num_workers={num_workers!r} and num_hosts={num_hosts!r}: pass only one of them")
        if num_workers is not None and min_workers is not None:
            raise ValueError(f"num_workers={num_workers!r} and min_workers={min_workers!r}: a fixed number of "
                             "workers or an elastic range, not both")
        if num_hosts is not None and min_workers is not None:
            raise ValueError(f"num_hosts={num_hosts!r} and min_workers={min_workers!r}: an elastic executor takes "
                             "its hosts from hosts=, hostfile= or discovery_script=")
        if max_workers is not None and min_workers is None:
            raise ValueError(f"max_workers={max_workers!r} without min_workers: pass min_workers too")
        _number(num_workers, "num_workers", 1, integer=True, allow_none=True)
        _number(num_hosts, "num_hosts", 1, integer=True, allow_none=True)
        _number(num_workers_per_host, "num_workers_per_host", 1, integer=True)
        _number(min_workers, "min_workers", 1, integer=True, allow_none=True)
        _number(max_workers, "max_workers", 1, integer=True, allow_none=True)
        if min_workers is not None and max_workers is not None and min_workers > max_workers:
            raise ValueError(f"min_workers={min_workers} is greater than max_workers={max_workers}")
        _number(cpus_per_worker, "cpus_per_worker", 1)
        if not isinstance(use_gpu, bool):
            raise TypeError(f"use_gpu must be True or False, got {use_gpu!r}")
        if gpus_per_worker is not None:
            if not use_gpu:
                raise ValueError(f"gpus_per_worker={gpus_per_worker!r} without use_gpu=True")
            _number(gpus_per_worker, "gpus_per_worker", 0)
        if min_workers is None:
            for name, value in (("reset_limit", reset_limit), ("cooldown_range", cooldown_range),
                                ("discovery_script", discovery_script)):
                if value is not None:
                    raise ValueError(f"{name}={value!r} applies to elastic executors only (min_workers=...)")
        else:
            _number(reset_limit, "reset_limit", 0, integer=True, allow_none=True)
            _number(elastic_timeout, "elastic_timeout", 1)
            if cooldown_range is not None and not (
                    isinstance(cooldown_range, (tuple, list)) and len(cooldown_range) == 2
                    and all(isinstance(v, int) and not isinstance(v, bool) for v in cooldown_range)
                    and 1 <= cooldown_range[0] <= cooldown_range[1] <= 3600):
                raise ValueError(f"cooldown_range must be (min_s, max_s) with 1 <= min_s <= max_s <= 3600, got "
                                 f"{cooldown_range!r}")
            if engine is not None:
                raise ValueError(f"min_workers={min_workers}: elastic executors run on hvdrun; engine= takes a "
                                 "fixed num_workers")
            if client is not None and discovery_script is not None:
                raise ValueError(f"discovery_script={discovery_script!r} with client=: the Dask cluster's workers "
                                 "are the discovery")
        if hosts is not None and hostfile is not None:
            raise ValueError(f"hosts={hosts!r} and hostfile={hostfile!r}: pass only one of them")
        if client is not None and engine is not None:
            raise ValueError(f"client={client!r} and engine={engine!r}: pass only one of them")
        if (client is not None or engine is not None) and (hosts is not None or hostfile is not None):
            where = "client" if client is not None else "engine"
            raise ValueError(f"hosts={hosts!r} / hostfile={hostfile!r}: the hosts come from the {where}, not "
                             "from hosts= or hostfile=")
        check_env(env)
        if engine is not None and (output is not None or launcher is not None):
            raise ValueError(f"output={output!r} / launcher={launcher!r} with engine=: they apply to the hvdrun jobs "
                             "of hosts, hostfiles and Slurm allocations, and output= to Dask clusters")
        if client is not None and launcher is not None:
            raise ValueError(f"launcher={launcher!r} with client=: Dask places the ranks itself")
        if client is not None and output is not None and min_workers is not None:
            raise ValueError(f"output={output!r} with client= and min_workers=: an elastic Dask executor's ranks "
                             "write to the Dask workers' logs")
        if engine is not None and not all(callable(getattr(engine, m, None))
                                          for m in ("start", "exit_status", "stop")):
            raise TypeError(f"engine must be an hvd.executor.Engine (start, exit_status, stop), got {engine!r}")

        if num_hosts is not None:
            num_workers = num_hosts * num_workers_per_host
        self.settings = settings
        self._base_env = env
        self._cpus_per_worker = cpus_per_worker
        self._session = None
        self._lock = threading.Lock()
        self._elastic = min_workers is not None
        self._elastic_env = None
        # An elastic executor's runs in progress (their engines) and the event that ends them: shutdown() sets
        # it and stops the engines, and each run() raises ExecutorError.
        self._elastic_stop = None
        self._elastic_engines = set()
        if self._elastic and client is not None:
            _dask_engine_class(client)  # the client's checks
            from hvd.executor.dask_elastic import DaskElasticEngine
            options = dict(env=env, executable=executable, cpus_per_worker=cpus_per_worker,
                           gpus_per_worker=(gpus_per_worker or 0) if use_gpu else 0,
                           elastic=dict(min_np=min_workers, max_np=max_workers, reset_limit=reset_limit,
                                        cooldown_range=cooldown_range, elastic_timeout=math.ceil(elastic_timeout)))
            engines = [DaskElasticEngine(client, **options)]  # validates the plan now
            self._make_engine = lambda: engines.pop() if engines else DaskElasticEngine(client, **options)
            num_workers = min_workers
        elif self._elastic:
            plan = dict(hosts=hosts, hostfile=hostfile, env=env, executable=executable, output=output,
                        launcher=launcher, elastic=dict(min_np=min_workers, max_np=max_workers, discovery_script=discovery_script,
                                     reset_limit=reset_limit, cooldown_range=cooldown_range,
                                     elastic_timeout=math.ceil(elastic_timeout)))
            first = HvdrunEngine(None, **plan)  # validates the plan now
            engines = [first]
            self._make_engine = lambda: engines.pop() if engines else HvdrunEngine(None, **plan)
            num_workers = min_workers
        elif client is not None:
            dask_engine_cls = _dask_engine_class(client)
            if num_workers is None:
                raise ValueError("num_workers=None: pass num_workers (or num_hosts) with client=")
            options = dict(num_workers=num_workers, cpus_per_worker=cpus_per_worker,
                           gpus_per_worker=(gpus_per_worker or 0) if use_gpu else 0, output=output)
            engines = [dask_engine_cls(client, **options)]  # checks the cluster now
            self._make_engine = lambda: engines.pop() if engines else dask_engine_cls(client, **options)
        elif engine is not None:
            if num_workers is None:
                raise ValueError("num_workers=None: pass num_workers (or num_hosts) with engine=")
            self._make_engine = lambda: engine
        else:
            plan = dict(hosts=hosts, hostfile=hostfile, num_hosts=num_hosts,
                        num_workers_per_host=num_workers_per_host, env=env, executable=executable, output=output,
                        launcher=launcher)
            first = HvdrunEngine(num_workers, **plan)  # validates the plan now
            num_workers = first.num_workers
            engines = [first]
            self._make_engine = lambda: engines.pop() if engines else HvdrunEngine(num_workers, **plan)
        self._num_workers = num_workers

    @staticmethod
    def create_settings(timeout_s: float = 30, ssh_identity_file: "str | None" = None, ssh_str: "str | None" = None,
                        placement_group_timeout_s: float = 100, nics=None) -> ExecutorSettings:
        """ExecutorSettings from RayExecutor.create_settings's arguments. ssh_str (a private key's text) is not
        supported: hvdrun's ssh reads keys from files, so pass ssh_identity_file. placement_group_timeout_s is
        accepted and has no effect (no placement groups here)."""
        if ssh_str is not None:
            raise ValueError("ssh_str=<a private key's text, not shown>: hvd.Executor reaches hosts with hvdrun's "
                             "ssh, which reads keys from files: write the key to a file and pass ssh_identity_file")
        _number(placement_group_timeout_s, "placement_group_timeout_s", 0)
        return ExecutorSettings(timeout_s=timeout_s, ssh_identity_file=ssh_identity_file, nics=nics)

    @property
    def num_workers(self) -> int:
        """The number of ranks."""
        return self._num_workers

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def start(self, executable_cls: "type | None" = None, executable_args: "list | tuple | None" = None,
              executable_kwargs: "dict | None" = None, extra_env_vars: "dict[str, str] | None" = None) -> None:
        """Starts the workers and waits until every rank connected back; with executable_cls, every rank then
        keeps instance = executable_cls(*executable_args, **executable_kwargs) for execute(). extra_env_vars:
        variables set for every worker.

        Raises ValueError/TypeError for bad arguments (before anything starts), RuntimeError when already
        started, ExecutorError when the workers cannot be started or do not connect back within
        settings.start_timeout_s, WorkerError when executable_cls raised on a rank (the workers are then shut
        down)."""
        if executable_cls is not None and not callable(executable_cls):
            raise TypeError(f"executable_cls must be a class (or callable), got {executable_cls!r}")
        args = _args("start", executable_args, "executable_args")
        kwargs = _kwargs("start", executable_kwargs, "executable_kwargs")
        worker_env = {"HOROVOD_GLOO_TIMEOUT_SECONDS": str(math.ceil(self.settings.timeout_s))}
        base = os.environ if self._base_env is None else self._base_env
        if "OMP_NUM_THREADS" not in base:
            worker_env["OMP_NUM_THREADS"] = str(max(1, int(self._cpus_per_worker)))
        if extra_env_vars is not None:
            if not isinstance(extra_env_vars, dict):
                raise TypeError(f"extra_env_vars must be a dict of str to str, got {type(extra_env_vars).__name__}")
            for key, value in extra_env_vars.items():
                if not isinstance(key, str) or not key or "=" in key or not isinstance(value, str):
                    raise TypeError(f"extra_env_vars must map variable names to str, got {key!r}: {value!r}")
            worker_env.update(extra_env_vars)
        if self._elastic:
            if executable_cls is not None:
                raise ValueError(f"executable_cls={_qualname(executable_cls)}: an elastic executor (min_workers=...) "
                                 "has no stateful workers; its run() starts the workers for each call")
            with self._lock:
                if self._elastic_env is not None:
                    raise RuntimeError("Executor.start: already started; call shutdown() first")
                self._elastic_env = worker_env
                self._elastic_stop = threading.Event()
            return
        payload = _dump("start", executable_cls, (executable_cls, args, kwargs))
        with self._lock:
            if self._session is not None:
                if self._session.dead is None:
                    raise RuntimeError("Executor.start: already started; call shutdown() first")
                self._session.close()
                self._session = None
            session = Session(self._make_engine(), self._num_workers, self.settings)
            self._session = session
        try:
            session.connect(worker_env)
            setup = session.submit("setup", payload, list(range(self._num_workers)),
                                   f"the setup ({_qualname(executable_cls) if executable_cls else 'no class'})")
            session.wait(setup, None)
        except BaseException:
            session.close()
            with self._lock:
                if self._session is session:
                    self._session = None
            raise

    def shutdown(self) -> None:
        """Stops every worker and the engine: each idle rank shuts hvd down and exits; a rank still running a
        call is ended. Waits up to 10 s for the workers to leave, then terminates them. Idempotent. An elastic
        executor's run() in progress (in another thread) ends at once: its job is stopped, and the run() raises
        ExecutorError."""
        with self._lock:
            session, self._session = self._session, None
            self._elastic_env = None
            stop, self._elastic_stop = self._elastic_stop, None
            engines = list(self._elastic_engines)
        if session is not None:
            session.close()
        if stop is not None:
            stop.set()
        for engine in engines:
            engine.stop(0)

    def redirect_output(self, path) -> None:
        """A started executor made with output=: the job's output goes to path from now on (lines already on their
        way may still reach the previous file). ValueError otherwise."""
        with self._lock:
            session = self._session
        engine = getattr(session, "engine", None)
        if not callable(getattr(engine, "redirect_output", None)):
            raise ValueError("Executor.redirect_output: not started, or its workers' output is not a file of this "
                             "driver's (output= with hosts, a hostfile or a Slurm allocation)")
        engine.redirect_output(path)

    @property
    def usable(self) -> bool:
        """Started, and no worker lost: calls may be made."""
        with self._lock:
            return self._session is not None and self._session.dead is None

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # ---- calls -------------------------------------------------------------------------------------------
    def run(self, fn, args: "list | tuple | None" = None, kwargs: "dict | None" = None,
            callbacks: "list | None" = None) -> list:
        """fn(*args, **kwargs) on every rank; the return values in rank order. callbacks: called in this thread,
        in order, with every value rank 0 passes to hvd.executor.send while fn runs. Raises WorkerError,
        ExecutorError (see the module docstring), ValueError when fn or its arguments cannot be pickled."""
        if self._elastic:
            return self._run_elastic(fn, args, kwargs, callbacks)
        session = self._require("run")
        payload = self._payload("run", fn, args, kwargs)
        callbacks = _callbacks("run", callbacks)
        return self._wait(session, session.submit("run", payload, self._ranks(), _qualname(fn)), callbacks)

    def run_remote(self, fn, args: "list | tuple | None" = None, kwargs: "dict | None" = None) -> list:
        """fn(*args, **kwargs) on every rank, without waiting: one concurrent.futures.Future per rank, in rank
        order, resolving to that rank's return value or raising its WorkerError (or ExecutorError)."""
        session = self._require("run_remote")
        payload = self._payload("run_remote", fn, args, kwargs)
        call = session.submit("run", payload, self._ranks(), _qualname(fn), wants_sends=False)
        return [call.futures[rank] for rank in call.ranks]

    def execute(self, fn, callbacks: "list | None" = None) -> list:
        """fn(instance) on every rank, instance being the rank's executable_cls object (None without one);
        the return values in rank order. callbacks as in run()."""
        session = self._require("execute")
        callbacks = _callbacks("execute", callbacks)
        payload = self._fn_payload("execute", fn)
        return self._wait(session, session.submit("execute", payload, self._ranks(), _qualname(fn)), callbacks)

    def execute_single(self, fn):
        """fn(instance) on rank 0 only; its return value."""
        session = self._require("execute_single")
        payload = self._fn_payload("execute_single", fn)
        return self._wait(session, session.submit("execute", payload, [0], _qualname(fn)), [])[0]

    # ---- helpers -----------------------------------------------------------------------------------------
    def _run_elastic(self, fn, args, kwargs, callbacks) -> list:
        from hvd.executor.elastic import run_elastic

        with self._lock:
            env, stop = self._elastic_env, self._elastic_stop
        if env is None:
            raise RuntimeError("Executor.run: call start() first")
        if not callable(fn):
            raise TypeError(f"Executor.run: fn must be callable, got {fn!r}")
        args, kwargs = _args("run", args, "args"), _kwargs("run", kwargs, "kwargs")
        callbacks = _callbacks("run", callbacks)
        _dump("run", fn, (fn, args, kwargs))  # unpicklable: ValueError before any process starts
        engine = self._make_engine()
        with self._lock:
            self._elastic_engines.add(engine)
        try:
            return run_elastic(engine, self.settings, fn, args, kwargs, env, callbacks,
                               lambda obj: _dump("run", fn, obj), stop)
        finally:
            with self._lock:
                self._elastic_engines.discard(engine)

    def _require(self, method: str) -> Session:
        if self._elastic:
            raise ValueError(f"Executor.{method}: an elastic executor (min_workers=...) runs functions with run() "
                             "only: stateful workers are not elastic")
        session = self._session
        if session is None:
            raise RuntimeError(f"Executor.{method}: call start() first")
        if session.dead is not None:
            raise session.dead
        return session

    def _ranks(self) -> list:
        return list(range(self._num_workers))

    def _payload(self, method: str, fn, args, kwargs) -> bytes:
        if not callable(fn):
            raise TypeError(f"Executor.{method}: fn must be callable, got {fn!r}")
        return _dump(method, fn, (fn, _args(method, args, "args"), _kwargs(method, kwargs, "kwargs")))

    def _fn_payload(self, method: str, fn) -> bytes:
        if not callable(fn):
            raise TypeError(f"Executor.{method}: fn must be callable, got {fn!r}")
        return _dump(method, fn, fn)

    def _wait(self, session: Session, call, callbacks) -> list:
        try:
            return session.wait(call, callbacks)
        except KeyboardInterrupt:
            self.shutdown()
            raise


def _args(method: str, value, name: str) -> tuple:
    if value is None:
        return ()
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"Executor.{method}: {name} must be a tuple or list, got {type(value).__name__}: {value!r}")
    return tuple(value)


def _kwargs(method: str, value, name: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise TypeError(f"Executor.{method}: {name} must be a dict with str keys, got {value!r}")
    return dict(value)


def _callbacks(method: str, callbacks) -> list:
    if callbacks is None:
        return []
    if not isinstance(callbacks, (list, tuple)) or not all(callable(c) for c in callbacks):
        raise TypeError(f"Executor.{method}: callbacks must be a list of callables, got {callbacks!r}")
    return list(callbacks)


def _dump(method: str, fn, obj) -> bytes:
    try:
        payload = _pickler.dumps(obj)
    except Exception as e:
        text = " ".join(str(e).split())
        raise ValueError(f"Executor.{method}: cannot pickle {_qualname(fn)} with its arguments: "
                         f"{type(e).__name__}: {text}") from e
    if len(payload) > protocol.MAX_PAYLOAD_BYTES:
        raise ValueError(f"Executor.{method}: {_qualname(fn)} with its arguments pickles to {len(payload)} bytes, "
                         f"more than a call carries ({protocol.MAX_PAYLOAD_BYTES})")
    return payload


def _dask_engine_class(client):
    # A distributed.Client exists only once distributed was imported: anything else is refused without importing
    # it (half a second or more), so that a wrong argument fails at once.
    distributed = sys.modules.get("distributed")
    if distributed is None and importlib.util.find_spec("distributed") is None:
        raise TypeError(f"client={client!r}: client= takes a distributed.Client, and distributed (Dask) is not "
                        "installed")
    if distributed is None or not isinstance(client, distributed.Client):
        raise TypeError(f"client must be a distributed.Client, got {type(client).__name__}: {client!r}")
    try:
        from hvd.executor.dask_engine import DaskEngine
    except ModuleNotFoundError as e:
        if e.name != "hvd.executor.dask_engine":
            raise
        raise NotImplementedError("client=: hvd.executor.dask_engine (the Dask engine) is not part of this "
                                  "installation") from None
    return DaskEngine
