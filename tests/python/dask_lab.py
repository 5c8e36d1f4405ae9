"""A real Dask cluster on this machine, for the tests: `dask scheduler` in a network namespace of its own and
`dask worker` processes in one namespace per host, every namespace on one bridge (in a namespace of its
own), and the test process (the driver) joined to that bridge through a veth pair, so that it reaches the
scheduler and every worker and the workers reach it. Logs live in a temporary directory; the lab leaves
nothing behind (processes, namespaces, links), also when its start fails.

    with DaskLab(hosts=2, workers_per_host=2, resources="CPU=2") as lab:
        client = distributed.Client(lab.scheduler_address)     # tcp://10.211.K.1:8786
        lab.worker_pids(1)            # pids of the Dask worker processes of host 1
        lab.processes(1)              # command lines of everything running in host 1's namespace
        lab.wait_for_workers(4)       # until the scheduler knows 4 workers

Host i's namespace has the address SUBNET.(i + 1), the scheduler's SUBNET.1, the driver's end of the
bridge SUBNET.254. SUBNET is 10.211.K with K chosen so that no address of this machine's own namespace is
in it (several labs may run at once: each has its own bridge and K). The workers run /usr/bin/python3 with
PYTHONPATH=<build>/python, so they import hvd from the build tree. With nanny=True (dask worker's
default) every worker process has a nanny that restarts it when it dies; nanny=False starts one
`dask worker --no-nanny` process per worker, and a worker that dies stays gone.
"""

import os
import shutil
import subprocess
import tempfile
import time

from lab_common import (Lab, add_bridge, add_bridged_namespace, delete_namespaces, die_with_parent, free_subnet,
                        netns_unavailable, sh, stop)
from proc_table import parent

PYTHON = "/usr/bin/python3"


def unavailable():
    """Why the lab cannot run here, or None."""
    if os.geteuid() != 0:
        return "not root (network namespaces need CAP_SYS_ADMIN)"
    for tool in ("ip",):
        if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
            return f"{tool} not installed"
    r = subprocess.run([PYTHON, "-c", "import distributed"], capture_output=True, text=True)
    if r.returncode != 0:
        return "distributed (Dask) is not installed for /usr/bin/python3: " + r.stderr.strip().splitlines()[-1]
    return netns_unavailable(f"hvddprobe{os.getpid()}")


class DaskLab(Lab):
    def __init__(self, hosts=2, workers_per_host=2, nanny=True, resources=None, build_dir=None):
        self.n = hosts
        self.workers_per_host = workers_per_host
        self.nanny = nanny
        self.resources = resources
        build = build_dir or os.environ.get("HVD_BUILD_DIR") or os.path.join(
            os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "build")
        self.package_dir = os.path.join(os.path.abspath(build), "python")
        tag = str(os.getpid())
        self.hub = "hvdDB" + tag
        self.sched_ns = "hvdDS" + tag
        self.host_ns = [f"hvdDH{tag}_{i}" for i in range(1, hosts + 1)]
        self.root_link = f"vdr{os.getpid() % 1000000}"
        self.dir = tempfile.mkdtemp(prefix="hvd-dask-lab-")
        self.procs = []  # (Popen, log path)
        self.subnet = None

    # ----- addresses

    def address(self, i):
        """Host i's address (hosts are numbered from 1)."""
        return f"{self.subnet}.{i + 1}"

    @property
    def scheduler_host(self):
        return f"{self.subnet}.1"

    @property
    def scheduler_address(self):
        return f"tcp://{self.scheduler_host}:8786"

    @property
    def driver_host(self):
        """The test process's address on the lab's bridge."""
        return f"{self.subnet}.254"

    # ----- set-up

    def _setup(self):
        self._network()
        self._start()

    def _network(self):
        self.subnet = free_subnet("10.211", 200, "Dask lab")
        add_bridge(self.hub)
        # The driver's end: a veth pair between this namespace and the bridge.
        sh("ip", "link", "add", self.root_link, "type", "veth", "peer", "name", "vdriver", "netns", self.hub)
        sh("ip", "netns", "exec", self.hub, "ip", "link", "set", "vdriver", "master", "br0")
        sh("ip", "netns", "exec", self.hub, "ip", "link", "set", "vdriver", "up")
        sh("ip", "addr", "add", self.driver_host + "/24", "dev", self.root_link)
        sh("ip", "link", "set", self.root_link, "up")
        for k, (ns, addr) in enumerate([(self.sched_ns, self.scheduler_host)] +
                                       [(self.host_ns[i - 1], self.address(i)) for i in range(1, self.n + 1)]):
            add_bridged_namespace(self.hub, ns, f"vd{k}", addr)

    def _spawn(self, ns, name, argv, with_hvd=True):
        log = os.path.join(self.dir, name + ".log")
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        env.pop("PYTHONPATH", None)
        if with_hvd:
            env["PYTHONPATH"] = self.package_dir
        with open(log, "wb") as out:
            proc = subprocess.Popen(["ip", "netns", "exec", ns, PYTHON, *argv], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.dir,
                                    preexec_fn=die_with_parent)
        self.procs.append((proc, log))
        return proc

    def _start(self):
        self._spawn(self.sched_ns, "scheduler",
                    ["-m", "distributed.cli.dask_scheduler", "--host", self.scheduler_host, "--port", "8786",
                     "--no-dashboard"])
        for i in range(1, self.n + 1):
            self.start_workers(i, self.workers_per_host)
        self.wait_for_workers(self.n * self.workers_per_host, timeout=90)

    def start_workers(self, i, count, nanny=None, resources=None, with_hvd=True):
        """Starts `count` more Dask worker processes on host i (one `dask worker` command with a nanny, else
        one command per worker); returns the commands' Popen objects. with_hvd=False: without the build tree
        on their PYTHONPATH, so they cannot import hvd."""
        nanny = self.nanny if nanny is None else nanny
        resources = self.resources if resources is None else resources
        common = ["-m", "distributed.cli.dask_worker", self.scheduler_address, "--host", self.address(i),
                  "--nthreads", "1", "--no-dashboard", "--death-timeout", "60", "--memory-limit", "0",
                  "--local-directory", os.path.join(self.dir, "space")]
        if resources:
            common += ["--resources", resources]
        tag = f"{len(self.procs)}"
        if nanny:
            return [self._spawn(self.host_ns[i - 1], f"workers{i}_{tag}",
                                common + ["--nworkers", str(count), "--nanny"], with_hvd)]
        return [self._spawn(self.host_ns[i - 1], f"worker{i}_{tag}_{w}", common + ["--no-nanny"], with_hvd)
                for w in range(count)]

    def logs(self):
        text = []
        for _, log in self.procs:
            try:
                with open(log, errors="replace") as f:
                    text.append(f"--- {os.path.basename(log)}\n{f.read()[-3000:]}")
            except OSError:
                pass
        return "\n".join(text)

    # ----- use

    def workers(self):
        """The scheduler's view: {worker address: info} (a short-lived client of the test process)."""
        import distributed
        with distributed.Client(self.scheduler_address, timeout=10, set_as_default=False) as client:
            return client.scheduler_info()["workers"]

    def wait_for_workers(self, count, timeout=60):
        """Waits until the scheduler knows exactly `count` workers; returns their addresses."""
        deadline = time.time() + timeout
        known = {}
        while time.time() < deadline:
            scheduler = self.procs[0][0]
            if scheduler.poll() is not None:
                raise RuntimeError(f"the Dask scheduler exited with {scheduler.returncode}:\n{self.logs()}")
            try:
                known = self.workers()
            except OSError:
                known = {}
            if len(known) == count:
                return sorted(known)
            time.sleep(0.2)
        raise TimeoutError(f"the Dask lab has {len(known)} workers, not {count}, after {timeout} s:\n"
                           f"{self.logs()}")

    def pids(self, ns):
        return [int(p) for p in sh("ip", "netns", "pids", ns).split()]

    def processes(self, i):
        """(pid, command line) of every process in host i's namespace."""
        out = []
        for pid in self.pids(self.host_ns[i - 1]):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            out.append((pid, cmd))
        return out

    def worker_pids(self, i):
        """Pids of the Dask worker processes (not the nannies, not the `dask worker` commands) of host i:
        with a nanny, the workers are the children of the command's process."""
        procs = self.processes(i)
        commands = {pid for pid, cmd in procs if "distributed.cli.dask_worker" in cmd}
        if not self.nanny:
            return sorted(commands)
        return sorted(pid for pid, cmd in procs if pid not in commands and parent(pid) in commands and
                      "spawn_main" in cmd)

    # ----- tear-down

    def close(self):
        # The workers first, the scheduler once they are gone: a worker (or nanny) told to stop while the scheduler
        # runs says goodbye and exits within a second; without a scheduler it keeps trying to reach it for
        # seconds, past stop()'s grace, and its SIGKILL leaves the named semaphores of the worker processes'
        # multiprocessing behind in /dev/shm.
        procs = [proc for proc, _ in self.procs]  # the scheduler first (_start)
        stop(procs[:0:-1])
        stop(procs[:1])
        delete_namespaces(self.host_ns + [self.sched_ns, self.hub])
        # Deleting the bridge's namespace deleted the driver's veth peer, and with it this end; make sure.
        subprocess.run(["ip", "link", "del", self.root_link], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
