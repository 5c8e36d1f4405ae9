"""DaskElasticEngine: an elastic Executor's run() as an elastic hvdrun job whose hosts and slots are a Dask
cluster's worker processes, and whose ranks live in them.

    client = distributed.Client("tcp://scheduler:8786")
    ex = hvd.Executor(min_workers=2, max_workers=4, client=client)     # builds a DaskElasticEngine per run()
    ex.start(); ex.run(train)                                           # train() uses hvd.elastic.run

Contract. The cluster is the discovery, as Ray's nodes are ElasticRayExecutor's: a membership thread asks the
scheduler every MEMBERSHIP_INTERVAL_S which worker processes may host a rank (hvd importable, resources fitting
cpus_per_worker/gpus_per_worker, no rank of another Executor: dask_engine.survey) and writes them, host by host
("HOST:SLOTS", a host being the address part of its workers' Dask addresses), to a file that the job's discovery
script prints. hvdrun's elastic driver does the rest as for any elastic job: it starts a rank per new slot,
re-forms the job when a worker joins or one dies, blacklists hosts that keep failing, ends the job below
--min-np after --elastic-timeout. Each rank is started through hvdrun's agent launcher (--launcher-agent) by
hvd.executor.dask_agent, which runs the rank's hvd-proxy as a task pinned to one free Dask worker process of the
rank's host: a Dask worker that leaves the cluster (retired, closed, killed) ends its rank, and the next
discovery no longer offers its slot; one that joins offers a new one.

The engine is HvdrunEngine otherwise (the same supervision, status and stop); stop() also ends the membership
thread and removes the discovery files. Errors: TypeError/ValueError for a client that is not a connected,
synchronous distributed.Client (before anything starts). A scheduler that stops answering keeps the last
membership (hvdrun then keeps its hosts), as a failing discovery script does.

Threading: the membership thread writes the file; everything else as HvdrunEngine.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import uuid
import weakref

from hvd.executor.dask_engine import REQUEST_TIMEOUT_S, _check_client, _host_key, survey
from hvd.executor.engine import HvdrunEngine

MEMBERSHIP_INTERVAL_S = 0.5


class DaskElasticEngine(HvdrunEngine):
    """An elastic hvdrun job on the Dask cluster of `client` (see the module docstring). elastic: HvdrunEngine's
    elastic plan without hosts (min_np, max_np, reset_limit, cooldown_range, elastic_timeout)."""

    def __init__(self, client, *, elastic: dict, cpus_per_worker: float = 1, gpus_per_worker: float = 0,
                 env: "dict[str, str] | None" = None, executable: "str | None" = None):
        _check_client(client)
        self._client = client
        self._cpus = cpus_per_worker
        self._gpus = gpus_per_worker or 0
        self._executor_id = uuid.uuid4().hex[:12]
        self._dir = tempfile.mkdtemp(prefix="hvd-dask-elastic-")
        self._hosts_file = os.path.join(self._dir, "hosts")
        script = os.path.join(self._dir, "discover.sh")
        with open(script, "w") as f:
            f.write(f"#!/bin/sh\nexec cat '{self._hosts_file}'\n")
        os.chmod(script, 0o700)
        self._remove_dir = weakref.finalize(self, shutil.rmtree, self._dir, True)
        self._write_hosts({})
        self._stop_membership = threading.Event()
        self._membership = None
        try:
            super().__init__(None, env=env, executable=executable, elastic=dict(elastic, discovery_script=script))
        except BaseException:
            self._remove_dir()
            raise

    # ----- membership

    def hosts(self) -> "dict[str, int]":
        """The cluster's eligible worker processes, as {host: slots}, asked now."""
        _, eligible, _ = survey(self._client, self._cpus, self._gpus, executor=self._executor_id)
        slots: "dict[str, int]" = {}
        for slot in eligible:
            slots[slot.host] = slots.get(slot.host, 0) + 1
        return slots

    def _write_hosts(self, slots: "dict[str, int]") -> None:
        text = "".join(f"{host}:{count}\n" for host, count in sorted(slots.items(), key=lambda i: _host_key(i[0])))
        temporary = self._hosts_file + ".new"
        with open(temporary, "w") as f:
            f.write(text)
        os.replace(temporary, self._hosts_file)

    def _follow(self) -> None:
        while not self._stop_membership.is_set():
            try:
                self._write_hosts(self.hosts())
            except Exception:
                pass  # the last membership stays, as a failing discovery script's hosts do
            self._stop_membership.wait(MEMBERSHIP_INTERVAL_S)

    # ----- Engine

    def command(self, settings) -> "list[str]":
        cmd = super().command(settings)
        worker_at = cmd.index(self._python)
        agent = f"{self._python} -m hvd.executor.dask_agent"
        return cmd[:worker_at] + ["--launcher-agent", agent] + cmd[worker_at:]

    def start(self, *, num_workers: int, driver_port: int, token: str, env: "dict[str, str]", settings) -> None:
        try:
            self._write_hosts(self.hosts())
        except Exception as e:
            sys.stderr.write(f"hvd.Executor: the Dask cluster did not answer ({e}); hvdrun waits for its workers\n")
        self._membership = threading.Thread(target=self._follow, name="hvd-dask-membership", daemon=True)
        self._membership.start()
        agent_env = {"HVD_DASK_SCHEDULER": self._client.scheduler.address, "HVD_DASK_EXECUTOR": self._executor_id,
                     "HVD_DASK_CPUS": repr(float(self._cpus)), "HVD_DASK_GPUS": repr(float(self._gpus))}
        super().start(num_workers=num_workers, driver_port=driver_port, token=token, env=dict(env, **agent_env),
                      settings=settings)

    def stop(self, timeout: float) -> None:
        try:
            super().stop(timeout)
        finally:
            self._stop_membership.set()
            if self._membership is not None:
                self._membership.join(REQUEST_TIMEOUT_S + 1)
            self._remove_dir()
