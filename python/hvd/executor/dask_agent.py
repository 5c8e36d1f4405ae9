"""The launcher agent that puts an elastic hvdrun job's ranks into the worker processes of a Dask cluster.

hvdrun runs it once per rank (its --launcher-agent, docs/launcher.md):

    python -m hvd.executor.dask_agent HOST PROXY --connect ADDRESS:PORT

with HVD_PROXY_TOKEN and HVD_PROXY_NAME (hvdrun's), HVD_DASK_SCHEDULER (the cluster's scheduler address),
HVD_DASK_EXECUTOR (the executor's id), HVD_DASK_CPUS and HVD_DASK_GPUS (a rank's Dask resources) in its
environment. It connects to the scheduler, claims one Dask worker process on HOST that hosts no rank and whose
resources fit (the claim is made inside that process, under the lock every rank of every Executor takes, so
two agents never take the same process), and submits one task pinned to it: run `PROXY --connect ADDRESS:PORT`
with the two hvdrun variables, and wait for it. The task holds the worker's thread (and its declared resources)
for as long as the rank lives, so Dask schedules nothing else there: the equivalent of an actor, with the rank
in a process of its own (a child of the Dask worker process) so that its environment, its output and its end
are hvdrun's to manage as for any rank. The proxy gets SIGTERM when the Dask worker process ends (it stops the
rank): a worker that leaves the cluster takes its rank with it, which hvdrun's elastic driver sees as a failed
worker; the membership the executor reports then no longer lists that slot.

The agent waits for a free worker on HOST up to HVD_AGENT_JOIN_TIMEOUT (hvdrun's own deadline, default 60 s)
less a second, then exits 1 with one line naming the host and what it found there. It stays until the task ends
(the proxy ended), and exits 0 then. Errors: exit 2 for a bad command line or environment, 1 otherwise, each
with one line on stderr (hvdrun shows it with the rank's failure).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from hvd.common import death_signal
from hvd.executor.dask_engine import _hosted, _hosted_lock, resource_shortfall

# A claim whose task has not started within this time is void (its agent died between the two steps).
CLAIM_TTL_S = 120.0


# ----------------------------------------------------------------------------------------------- worker side

def _claim(executor: str, name: str, dask_worker=None) -> str:
    """In a Dask worker process: claims it for hvdrun's proxy `name` of `executor`; "ok" or why not."""
    with _hosted_lock:
        if _hosted:
            stale = (not _hosted.get("running") and _hosted.get("claimed") is not None
                     and time.monotonic() - _hosted["claimed"] > CLAIM_TTL_S)
            if not stale:
                return f"hosts {_hosted.get('rank')} of Executor {_hosted.get('executor')}"
            _hosted.clear()
        _hosted.update(rank=name, executor=executor, claimed=time.monotonic(), running=False)
    return "ok"


def _release(executor: str, name: str, dask_worker=None) -> None:
    with _hosted_lock:
        if _hosted.get("executor") == executor and _hosted.get("rank") == name:
            _hosted.clear()


def _serve_proxy(argv: list, variables: dict, executor: str, name: str) -> int:
    """The task: runs hvd-proxy in this Dask worker process (claimed by _claim) until it ends; its exit status."""
    with _hosted_lock:
        if _hosted.get("executor") != executor or _hosted.get("rank") != name:
            raise RuntimeError(f"this Dask worker process (pid {os.getpid()}) was not claimed for {name}")
        _hosted["running"] = True
    try:
        env = dict(os.environ)
        env.update(variables)
        # This thread waits for the proxy as long as it runs, so the parent-death signal (which fires when the
        # thread that started it ends) fires only when this process ends: then the proxy stops its rank.
        env.update(death_signal.child_environment())
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
        return proc.wait()
    finally:
        _release(executor, name)


# ----------------------------------------------------------------------------------------------- agent side

def _fail(message: str, code: int = 1) -> int:
    sys.stderr.write(f"hvd.executor.dask_agent: {message}\n")
    sys.stderr.flush()
    return code


def _candidates(client, host: str, cpus: float, gpus: float) -> "tuple[list[tuple[str, dict]], list[str]]":
    """The workers on host whose resources fit (address, resources), by address; and why the others do not."""
    from distributed.comm import get_address_host
    from hvd.executor.dask_engine import _address_key
    workers = client.sync(client.scheduler.identity, callback_timeout=10)["workers"]
    fit, unfit = [], []
    for address in sorted(workers, key=_address_key):
        if get_address_host(address) != host:
            continue
        resources = workers[address].get("resources") or {}
        shortfall = resource_shortfall(resources, cpus, gpus)
        if shortfall:
            unfit.append(f"{address} ({shortfall})")
        else:
            fit.append((address, resources))
    return fit, unfit


def main(argv: "list[str]") -> int:
    if len(argv) < 2:
        return _fail("usage: python -m hvd.executor.dask_agent HOST PROXY [ARGS...]", 2)
    host, proxy = argv[0], argv[1:]
    missing = [v for v in ("HVD_PROXY_TOKEN", "HVD_PROXY_NAME", "HVD_DASK_SCHEDULER", "HVD_DASK_EXECUTOR")
               if not os.environ.get(v)]
    if missing:
        return _fail(f"{', '.join(missing)} not set: this program is started by hvdrun for an hvd.Executor", 2)
    try:
        cpus = float(os.environ.get("HVD_DASK_CPUS", "1"))
        gpus = float(os.environ.get("HVD_DASK_GPUS", "0"))
        timeout = float(os.environ.get("HVD_AGENT_JOIN_TIMEOUT", "60"))
    except ValueError as e:
        return _fail(f"bad HVD_DASK_CPUS, HVD_DASK_GPUS or HVD_AGENT_JOIN_TIMEOUT: {e}", 2)
    scheduler, executor = os.environ["HVD_DASK_SCHEDULER"], os.environ["HVD_DASK_EXECUTOR"]
    name = os.environ["HVD_PROXY_NAME"]
    variables = {"HVD_PROXY_TOKEN": os.environ["HVD_PROXY_TOKEN"], "HVD_PROXY_NAME": name}
    deadline = time.monotonic() + max(1.0, timeout - 1.0)
    import distributed
    # The functions that run in the Dask workers, by their importable name (this file runs as __main__, whose
    # functions would travel by value, with this process's lock).
    from hvd.executor import dask_agent as remote
    try:
        client = distributed.Client(scheduler, timeout=max(1.0, deadline - time.monotonic()), set_as_default=False)
    except Exception as e:
        return _fail(f"cannot reach the Dask scheduler at {scheduler}: {type(e).__name__}: {e}")
    chosen = None
    seen = "no Dask worker"
    try:
        while chosen is None:
            fit, unfit = _candidates(client, host, cpus, gpus)
            busy = []
            for address, resources in fit:
                answer = client.run(remote._claim, executor, name, workers=[address], on_error="return").get(address)
                if answer == "ok":
                    chosen = (address, resources)
                    break
                busy.append(f"{address} ({answer})")
            if chosen is None:
                seen = "; ".join(busy + unfit) or "no Dask worker"
                if time.monotonic() >= deadline:
                    return _fail(f"no free Dask worker on {host} for {name} within {timeout:g} s: {seen}")
                time.sleep(0.25)
        address, resources = chosen
        wanted = {}
        if "CPU" in resources:
            wanted["CPU"] = cpus
        if gpus and "GPU" in resources:
            wanted["GPU"] = gpus
        try:
            future = client.submit(remote._serve_proxy, proxy, variables, executor, name, workers=[address],
                                   allow_other_workers=False, pure=False, resources=wanted or None,
                                   key=f"hvd-proxy-{executor}-{name}")
        except BaseException:
            client.run(remote._release, executor, name, workers=[address], on_error="return")
            raise
        done = threading.Event()
        result = {}

        def wait():
            try:
                result["code"] = future.result()
            except BaseException as e:  # the worker left, or the task failed
                result["error"] = f"{type(e).__name__}: {e}"
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        while not done.wait(1.0):
            pass
        if "error" in result:
            return _fail(f"the Dask worker {address} ended the rank's proxy: {result['error']}")
        return 0
    except KeyboardInterrupt:
        return 1
    except Exception as e:
        return _fail(f"{type(e).__name__}: {e}")
    finally:
        try:
            client.close(timeout=2)
        except Exception:
            pass


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sys.exit(main(sys.argv[1:]))
