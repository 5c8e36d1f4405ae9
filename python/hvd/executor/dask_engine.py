"""DaskEngine: the ranks of an hvd.Executor hosted in the worker processes of an existing Dask cluster.

    client = distributed.Client("tcp://scheduler:8786")
    with hvd.Executor(num_workers=4, client=client) as ex:     # Executor builds DaskEngine(client, ...)
        ex.run(fn)

Contract. Each rank lives in one Dask worker process, as a Dask actor (_Rank) pinned to that worker. The actor
sets the rank's variables in the worker's os.environ (HOROVOD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _CROSS_RANK,
_CROSS_SIZE, HOROVOD_HOSTNAME, the rendezvous address, port and token, HOROVOD_CONTROLLER / CPU_OPERATIONS=gloo,
HOROVOD_GLOO_IFACE, NCCL_SOCKET_IFNAME and the executor's own variables), then runs
hvd.executor.worker.serve(driver host, driver port, token) in a daemon thread of its own, so the actor call
returns and the Dask worker keeps serving other work. When serve() returns (the driver said stop, or closed the
connection or died while no call ran) the thread shuts hvd down (serve does), puts the variables back as they
were and frees the process for another Executor. A driver that vanishes while a call runs ends the Dask worker
process itself, a second after (serve's exit_on_driver_loss), and a shutdown() while a call runs ends it at once:
a thread cannot be stopped, and a training function must not outlive its driver; a nanny (`dask worker --nanny`,
the default) starts a fresh worker process in its place. A Dask worker process hosts one rank at a time.

Placement follows hvdrun: the eligible workers are grouped by host (the host of their Dask address) and the ranks
fill the hosts in order (all ranks of the first host, then the next), hosts and workers sorted by address. A
worker is eligible when it imports hvd, hosts no rank of another Executor, and its declared Dask resources allow
cpus_per_worker ("CPU") and gpus_per_worker ("GPU"); a worker that declares no resources counts as one slot for
CPU work (and none for GPU work). Ranks of one host exchange data through shared memory and ranks of different
hosts over TCP, as under hvdrun: the rendezvous server is an hvd-rendezvous daemon started by the driver (next to
hvdrun), with a fresh token, listening on the driver's address. That address, also the one the ranks connect
back to, is the local address this process uses to reach the scheduler (the route to a worker's host when the
scheduler is on this machine and a worker is not), or the address of settings.nics[0]. A rank's
HOROVOD_GLOO_IFACE is the interface holding its Dask worker's address (settings.nics[0] when given).

Errors. DaskEngine(client) raises TypeError when client is not a distributed.Client, ValueError when it is not
connected, and (given num_workers) ValueError naming the numbers when the cluster has too few eligible workers;
start() checks the same before starting anything. A failure after that (an actor that cannot be placed, the daemon
cannot listen) stops what started and raises ExecutorError. exit_status() reports a rank's Dask worker that left
the cluster ("rank R's Dask worker ADDR left the cluster") and a dead rendezvous daemon; a scheduler that does not
answer is no end of the ranks (they do not need it, and a rank that dies closes its connection to the driver).

Threading. start(), exit_status() and stop() are called by the Executor, one at a time or from its watcher
thread; exit_status() asks the scheduler at most every STATUS_INTERVAL_S and answers from its last look between.
Every request to the cluster has a deadline. A fixed-size executor does not follow the cluster growing or
shrinking; an elastic one (min_workers) does, through hvd.executor.dask_elastic.
"""

from __future__ import annotations

import builtins
import ipaddress
import os
import secrets
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import uuid
import warnings

from hvd.common import death_signal
from hvd.executor.engine import _LockedFile, check_output
from hvd.executor.engine import Engine
from hvd.executor.errors import ExecutorError
from hvd.runner import _PACKAGE_PARENT, _find_hvdrun, _uses_compat

# How long one request to the scheduler or the workers may take; a look for exit_status() takes less.
REQUEST_TIMEOUT_S = 10.0
STATUS_TIMEOUT_S = 2.0
STATUS_INTERVAL_S = 0.25
_SIOCGIFADDR = 0x8915

# In a Dask worker process: the rank it hosts ({"rank", "executor"}), empty when none.
_hosted: dict = {}
_hosted_lock = threading.Lock()


# ----------------------------------------------------------------------------------------------- worker side

def _interface_address(name: str) -> str | None:
    """The IPv4 address of this machine's network interface `name`, or None."""
    import fcntl
    import struct
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(raw[20:24])


def _interface_of(address: str) -> str | None:
    """The name of this machine's network interface holding the IPv4 address, or None."""
    for _, name in socket.if_nameindex():
        if _interface_address(name) == address:
            return name
    return None


def _describe_worker(dask_worker) -> dict:
    """What the driver needs to know about this Dask worker process before placing a rank on it."""
    from distributed.comm import get_address_host
    host = get_address_host(dask_worker.address)
    try:
        ip = socket.gethostbyname(host)
    except OSError:
        ip = host
    with _hosted_lock:
        busy = dict(_hosted) if _hosted else None
    return {"error": None, "busy": busy, "iface": _interface_of(ip), "pid": os.getpid()}


def _probe_source(dask_worker):
    # Pickled by value (see _probe): runs on a worker that may not import hvd at all.
    try:
        import hvd.executor.dask_engine as engine
        import hvd.executor.worker  # noqa: F401
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}
    return engine._describe_worker(dask_worker)


def _probe():
    """A copy of _probe_source that cloudpickle cannot find by name in any module, so it travels by value."""
    copy = types.FunctionType(_probe_source.__code__, {"__builtins__": builtins}, "probe")
    copy.__qualname__ = copy.__name__ = "hvd_executor_probe"
    return copy


class _Rank:
    """A Dask actor hosting one rank of an Executor in its Dask worker process (see the module docstring)."""

    def __init__(self):
        self._thread = None

    def start(self, rank: int, variables: dict, driver_host: str, driver_port: int, token: str, executor: str,
              compat: bool) -> int:
        """Claims this process for the rank, sets its variables, and starts serve() in a daemon thread; returns
        the process id. ValueError when the process already hosts a rank of another Executor."""
        with _hosted_lock:
            if _hosted:
                raise ValueError(f"this Dask worker process (pid {os.getpid()}) already hosts rank "
                                 f"{_hosted['rank']} of another Executor ({_hosted['executor']})")
            _hosted.update(rank=rank, executor=executor)
        previous = {name: os.environ.get(name) for name in variables}
        os.environ.update(variables)
        added_path = None
        if compat:
            import hvd
            compat_dir = os.path.join(os.path.dirname(os.path.realpath(hvd.__file__)), "compat")
            if compat_dir not in sys.path:
                sys.path.insert(0, compat_dir)
                added_path = compat_dir
        self._thread = threading.Thread(target=self._serve, name=f"hvd-executor-rank-{rank}", daemon=True,
                                        args=(rank, previous, added_path, driver_host, driver_port, token))
        try:
            self._thread.start()
        except BaseException:
            self._restore(previous, added_path)
            raise
        return os.getpid()

    def _serve(self, rank, previous, added_path, driver_host, driver_port, token):
        try:
            from hvd.executor.worker import serve
            serve(driver_host, driver_port, token, exit_on_driver_loss=True, forward_output=True)
        except BaseException as e:
            sys.stderr.write(f"hvd.executor.dask_engine: rank {rank} ended with {type(e).__name__}: {e}\n")
        finally:
            self._restore(previous, added_path)

    @staticmethod
    def _restore(previous, added_path):
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if added_path is not None:
            try:
                sys.path.remove(added_path)
            except ValueError:
                pass
        with _hosted_lock:
            _hosted.clear()

    def finish(self, timeout: float) -> bool:
        """Waits up to timeout seconds for the rank's thread to end; True when it has."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True


# ----------------------------------------------------------------------------------------------- driver side

class _Slot:
    """One rank's place: its Dask worker and its numbers."""

    def __init__(self, address: str, host: str, iface: str | None):
        self.address = address
        self.host = host
        self.iface = iface
        self.rank = self.local_rank = self.local_size = self.cross_rank = self.cross_size = 0


def _check_client(client):
    try:
        import distributed
    except ImportError:
        raise TypeError(f"client={client!r}: not a distributed.Client (Dask's distributed is not installed)") \
            from None
    if not isinstance(client, distributed.Client):
        raise TypeError(f"client={client!r}: expected a distributed.Client, got {type(client).__name__}")
    if client.status != "running":
        raise ValueError(f"client={client!r}: the Dask client is {client.status}, not connected to a scheduler")
    if client.asynchronous:
        raise ValueError(f"client={client!r}: an asynchronous Dask client; hvd.Executor needs a synchronous one")


def _positive(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r}: expected an int >= 1")
    return value


def _number(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= minimum:
        raise ValueError(f"{name}={value!r}: expected a number >= {minimum}")
    return value


def _host_key(host: str):
    try:
        return (0, ipaddress.ip_address(host).packed, "")
    except ValueError:
        return (1, b"", host)


def _address_key(address: str):
    from distributed.comm import get_address_host, parse_host_port
    from distributed.comm.addressing import parse_address
    host = get_address_host(address)
    try:
        port = parse_host_port(parse_address(address)[1])[1] or 0
    except (ValueError, TypeError):
        port = 0
    return (_host_key(host), port, address)


def _route_to(host: str) -> str:
    """The local address this machine uses to reach host (a UDP connect sends nothing)."""
    infos = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)
    family, _, _, _, sockaddr = infos[0]
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect(sockaddr)
        return s.getsockname()[0]


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def resource_shortfall(resources: dict, cpus: float, gpus: float) -> str | None:
    """Why a Dask worker declaring these resources cannot host a rank needing cpus CPU and gpus GPU, or None."""
    if not resources:
        return None if gpus == 0 else f"declare no resources (gpus_per_worker={gpus:g} needs GPU)"
    declared = resources.get("CPU")
    if declared is not None and declared < cpus:
        return f"declare CPU={declared:g} < cpus_per_worker={cpus:g}"
    declared = resources.get("GPU", 0)
    if declared < gpus:
        return f"declare GPU={declared:g} < gpus_per_worker={gpus:g}"
    return None


def survey(client, cpus: float, gpus: float, executor: str | None = None):
    """The Dask cluster's worker processes that may host a rank: (workers, eligible, why). workers: the scheduler's
    view, by address; eligible: a _Slot per eligible worker, by address order; why: {reason: [addresses]} for the
    others. A worker hosting a rank of `executor` counts as eligible (it hosts one of that executor's ranks).
    ExecutorError when the cluster does not answer within REQUEST_TIMEOUT_S."""
    scheduler = client.scheduler.address
    try:
        workers = client.sync(client.scheduler.identity, callback_timeout=REQUEST_TIMEOUT_S)["workers"]
        probes = client.run(_probe(), workers=list(workers), on_error="return",
                            callback_timeout=REQUEST_TIMEOUT_S) if workers else {}
    except Exception as e:
        raise ExecutorError(f"the Dask cluster at {scheduler} did not answer within {REQUEST_TIMEOUT_S:g} s: "
                            f"{type(e).__name__}: {e}") from e
    eligible = []
    why = {}
    processes = set()
    for address in sorted(workers, key=_address_key):
        info, probe = workers[address], probes.get(address)
        if not isinstance(probe, dict):
            reason = f"did not answer ({type(probe).__name__}: {probe})"
        elif probe.get("error"):
            reason = (f"cannot import hvd ({probe['error']}; start them with {_PACKAGE_PARENT} or wherever hvd "
                      "is on their PYTHONPATH)")
        elif probe.get("busy") and (executor is None or probe["busy"].get("executor") != executor):
            reason = "host ranks of another Executor"
        elif (info.get("host"), probe.get("pid")) in processes:
            # Workers of threads (a LocalCluster with processes=False) share one process and its environment.
            reason = "share their process with another Dask worker"
        else:
            reason = resource_shortfall(info.get("resources") or {}, cpus, gpus)
        if isinstance(probe, dict):
            processes.add((info.get("host"), probe.get("pid")))
        if reason:
            why.setdefault(reason, []).append(address)
        else:
            eligible.append(_Slot(address, info.get("host") or address, probe.get("iface")))
    return workers, eligible, why


class DaskEngine(Engine):
    """Hosts an Executor's ranks in the worker processes of the Dask cluster of `client` (a connected, synchronous
    distributed.Client), one rank per Dask worker process (see the module docstring).

    num_workers: when given, the cluster is checked at once (ValueError naming the numbers when it has too few
    eligible workers); start() checks again. cpus_per_worker / gpus_per_worker: the Dask resources ("CPU",
    "GPU") a worker must declare to host a rank."""

    def __init__(self, client, *, num_workers: int | None = None, cpus_per_worker: float = 1,
                 gpus_per_worker: float = 0, output=None) -> None:
        _check_client(client)
        # Where the ranks' printed lines go (the session writes them, tagged by rank); None: this process's
        # stdout and stderr.
        path = check_output(output)
        self.output_file = _LockedFile(path) if path is not None else None
        self._client = client
        self._cpus = _number(cpus_per_worker, "cpus_per_worker", 1)
        self._gpus = _number(gpus_per_worker or 0, "gpus_per_worker", 0)
        self._lock = threading.Lock()
        self._slots: list[_Slot] = []
        self._futures = []
        self._actors = []
        self._daemon = None
        self._status = None
        self._last_look = 0.0
        self._stopped = False
        self._started = False
        if num_workers is not None:
            self._plan(_positive(num_workers, "num_workers"), None)

    def redirect_output(self, path) -> None:
        """From now on the ranks' output goes to path (an engine made with output= only)."""
        if self.output_file is None:
            raise ValueError("redirect_output: this engine was not made with output=")
        self.output_file.redirect(os.fspath(path))

    @property
    def placement(self) -> list[str]:
        """The Dask worker address of each rank, in rank order (empty before start())."""
        return [slot.address for slot in self._slots]

    # ----- planning

    def _identity(self, timeout: float = REQUEST_TIMEOUT_S) -> dict:
        client = self._client
        return client.sync(client.scheduler.identity, callback_timeout=timeout)

    def _plan(self, num_workers: int, settings) -> list[_Slot]:
        """The slots of num_workers ranks; ValueError when the cluster has too few eligible workers."""
        scheduler = self._client.scheduler.address
        workers, eligible, why = survey(self._client, self._cpus, self._gpus)
        if len(eligible) < num_workers:
            details = "; ".join(f"{len(addresses)} {reason} ({', '.join(sorted(addresses)[:3])}"
                                f"{', ...' if len(addresses) > 3 else ''})" for reason, addresses in why.items())
            raise ValueError(f"num_workers={num_workers}: the Dask cluster at {scheduler} has {len(workers)} worker "
                             f"processes, {len(eligible)} of them eligible (cpus_per_worker={self._cpus:g}, "
                             f"gpus_per_worker={self._gpus:g}){': ' + details if details else ''}; a rank needs a "
                             "Dask worker process of its own")
        hosts: dict[str, list[_Slot]] = {}
        for slot in eligible:
            hosts.setdefault(slot.host, []).append(slot)
        chosen = []
        for host in sorted(hosts, key=_host_key):
            take = hosts[host][:num_workers - len(chosen)]
            for local_rank, slot in enumerate(take):
                slot.local_rank, slot.local_size = local_rank, len(take)
            chosen += take
            if len(chosen) == num_workers:
                break
        for rank, slot in enumerate(chosen):
            slot.rank = rank
            peers = [s for s in chosen if s.local_rank == slot.local_rank]
            slot.cross_rank, slot.cross_size = peers.index(slot), len(peers)
        return chosen

    def _driver_host(self, slots: list[_Slot], settings) -> str:
        nics = list(getattr(settings, "nics", None) or [])
        if nics:
            address = _interface_address(nics[0])
            if address is None:
                raise ValueError(f"nics={nics!r}: this machine has no interface {nics[0]!r} with an IPv4 address")
            return address
        from distributed.comm import get_address_host
        target = get_address_host(self._client.scheduler.address)
        try:
            address = _route_to(target)
            if _is_loopback(address):
                # The scheduler runs here: the ranks on other machines need an address they can reach.
                for slot in slots:
                    target = slot.host
                    if not _is_loopback(_route_to(target)):
                        return _route_to(target)
        except OSError as e:
            raise ExecutorError(f"no route from this machine to {target}, a host of the Dask cluster: {e}") from e
        return address

    # ----- Engine

    def start(self, *, num_workers: int, driver_port: int, token: str, env: dict[str, str],
              settings) -> None:
        """Places num_workers ranks on the cluster's workers and starts serve() in each (see the module
        docstring). ValueError before anything starts when the cluster has too few eligible workers;
        ExecutorError (after stopping what started) when a rank cannot be started."""
        with self._lock:
            if self._started:
                raise ExecutorError("this DaskEngine was started already: an Executor makes a new engine per start")
            self._started = True
        slots = self._plan(_positive(num_workers, "num_workers"), settings)
        driver_host = self._driver_host(slots, settings)
        nics = list(getattr(settings, "nics", None) or [])
        deadline = time.monotonic() + float(getattr(settings, "start_timeout_s", 120))
        self._slots = slots
        try:
            rdv_port, rdv_token = self._start_daemon(driver_host, slots)
            executor = uuid.uuid4().hex[:12]
            base = {name: str(value) for name, value in (env or {}).items()}
            compat = _uses_compat(base)
            for slot in slots:
                key = f"hvd-executor-{executor}-rank-{slot.rank}"
                self._futures.append(self._client.submit(_Rank, actor=True, workers=[slot.address],
                                                         allow_other_workers=False, pure=False, key=key))
            for slot, future in zip(slots, self._futures):
                try:
                    # The actor's proxy binds to the current client when it unpickles: make that this one, not
                    # whichever client is the process's default.
                    with self._client.as_current():
                        self._actors.append(future.result(timeout=max(0.1, deadline - time.monotonic())))
                except Exception as e:
                    raise ExecutorError(f"rank {slot.rank}'s actor on the Dask worker {slot.address} did not start: "
                                        f"{type(e).__name__}: {e}") from e
            calls = []
            for slot, actor in zip(slots, self._actors):
                iface = nics[0] if nics else (slot.iface or "")
                variables = dict(base)
                variables.update({
                    "HOROVOD_HOSTNAME": slot.host, "HOROVOD_RANK": str(slot.rank), "HOROVOD_SIZE": str(len(slots)),
                    "HOROVOD_LOCAL_RANK": str(slot.local_rank), "HOROVOD_LOCAL_SIZE": str(slot.local_size),
                    "HOROVOD_CROSS_RANK": str(slot.cross_rank), "HOROVOD_CROSS_SIZE": str(slot.cross_size),
                    "HOROVOD_GLOO_RENDEZVOUS_ADDR": driver_host, "HOROVOD_GLOO_RENDEZVOUS_PORT": str(rdv_port),
                    "HVD_RENDEZVOUS_TOKEN": rdv_token, "HOROVOD_CONTROLLER": "gloo",
                    "HOROVOD_CPU_OPERATIONS": "gloo", "HOROVOD_GLOO_IFACE": iface,
                    "NCCL_SOCKET_IFNAME": ",".join(nics) if nics else iface})
                calls.append(actor.start(slot.rank, variables, driver_host, driver_port, token, executor, compat))
            for slot, call in zip(slots, calls):
                try:
                    call.result(timeout=max(0.1, deadline - time.monotonic()))
                except ValueError as e:
                    raise ValueError(f"rank {slot.rank}'s Dask worker {slot.address}: {e}") from None
                except Exception as e:
                    raise ExecutorError(f"rank {slot.rank} did not start on the Dask worker {slot.address}: "
                                        f"{type(e).__name__}: {e}") from e
        except BaseException:
            self.stop(5.0)
            raise

    def _start_daemon(self, bind: str, slots: list[_Slot]):
        """Starts hvd-rendezvous on bind:0 with a fresh token and the job's scope sizes; returns (port, token)."""
        binary = os.path.join(os.path.dirname(_find_hvdrun()), "hvd-rendezvous")
        if not os.access(binary, os.X_OK):
            raise ExecutorError(f"cannot find hvd-rendezvous next to hvdrun ({binary})")
        scopes = {"global": len(slots)}
        for slot in slots:
            scopes[f"local_{slot.host}"] = slot.local_size
            scopes[f"cross_{slot.local_rank}"] = slot.cross_size
        token = secrets.token_hex(16)
        fd, token_file = tempfile.mkstemp(prefix="hvd-dask-rendezvous-")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(token + "\n")
            cmd = [binary, "--bind", bind, "--port", "0", "--token-file", token_file]
            for scope, size in scopes.items():
                cmd += ["--scope-size", f"{scope}={size}"]
            first_line = []
            started = threading.Event()
            # The daemon is started by a thread that lives as long as it runs: its parent-death signal fires when
            # the thread that started it ends, so only when this process ends (or once the daemon has exited).
            thread = threading.Thread(target=self._supervise_daemon, args=(cmd, first_line, started),
                                      name="hvd-dask-rendezvous", daemon=True)
            thread.start()
            if not started.wait(REQUEST_TIMEOUT_S) or not first_line:
                raise ExecutorError(f"hvd-rendezvous did not start within {REQUEST_TIMEOUT_S:g} s ({binary})")
        finally:
            os.unlink(token_file)
        line = first_line[0]
        prefix = "hvd-rendezvous listening on "
        if not line.startswith(prefix):
            raise ExecutorError(f"hvd-rendezvous did not start on {bind}: {line.strip() or 'no output'}")
        return int(line[len(prefix):].strip().rsplit(":", 1)[1]), token

    def _supervise_daemon(self, cmd, first_line, started):
        try:
            self._daemon = subprocess.Popen(cmd, env={**os.environ, **death_signal.child_environment()},
                                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except OSError as e:
            first_line.append(f"{type(e).__name__}: {e}")
            started.set()
            return
        try:
            first_line.append(_read_line(self._daemon, REQUEST_TIMEOUT_S))
        finally:
            started.set()
        # Its later output (nothing, normally) is read so that it never fills the pipe.
        try:
            while os.read(self._daemon.stdout.fileno(), 65536):
                pass
        except (OSError, ValueError):
            pass
        self._daemon.wait()
        self._daemon.stdout.close()

    def exit_status(self) -> str | None:
        """None while the ranks may run; else why they ended: a rank's Dask worker left the cluster, the rendezvous
        daemon exited, or the engine was stopped."""
        with self._lock:
            if self._status is not None or not self._slots:
                return self._status
            if self._daemon is not None and self._daemon.poll() is not None:
                self._status = (f"the hvd-rendezvous daemon of the Dask ranks exited with status "
                                f"{self._daemon.returncode}")
                return self._status
            now = time.monotonic()
            if now - self._last_look < STATUS_INTERVAL_S:
                return None
            self._last_look = now
        try:
            workers = self._identity(STATUS_TIMEOUT_S)["workers"]
        except Exception:
            # The ranks do not need the scheduler (they talk to the driver and to each other), and a rank that
            # dies closes its connection to the driver: no answer says nothing about them.
            return None
        gone = [slot for slot in self._slots if slot.address not in workers]
        status = f"rank {gone[0].rank}'s Dask worker {gone[0].address} left the cluster" if gone else None
        with self._lock:
            if self._status is None:
                self._status = status
            return self._status

    def stop(self, timeout: float) -> None:
        """Waits up to timeout seconds for every rank's thread to end (serve() returns once the driver said stop or
        closed its connection), releases the actors and stops the rendezvous daemon. Idempotent. A rank whose
        function still runs after timeout is named in a warning: a thread of a Dask worker cannot be killed."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            if self._status is None:
                self._status = "the Executor stopped its Dask ranks"
        deadline = time.monotonic() + max(0.0, timeout)
        if self._actors and self._client.status == "running":
            calls = []
            for slot, actor in zip(self._slots, self._actors):
                try:
                    calls.append((slot, actor.finish(max(0.0, deadline - time.monotonic()))))
                except Exception:
                    pass
            stuck = []
            for slot, call in calls:
                try:
                    if not call.result(timeout=max(0.1, deadline - time.monotonic()) + 1.0):
                        stuck.append(slot)
                except Exception:
                    pass  # the worker is gone, and the rank with it
            if stuck:
                warnings.warn("hvd.Executor: the function of rank(s) " +
                              ", ".join(f"{s.rank} (Dask worker {s.address})" for s in stuck) +
                              f" still runs {timeout:g} s after the stop; it keeps its Dask worker until it returns",
                              RuntimeWarning, stacklevel=2)
        if self._futures:
            try:
                self._client.cancel(self._futures, force=True)
            except Exception:
                pass
        self._actors.clear()
        self._futures.clear()
        if self._daemon is not None and self._daemon.poll() is None:
            self._daemon.terminate()
            try:
                self._daemon.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._daemon.kill()
                self._daemon.wait()


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    """proc's first stdout line, or "" when it exits or says nothing within timeout."""
    deadline = time.monotonic() + timeout
    data = b""
    fd = proc.stdout.fileno()
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").split("\n", 1)[0]

