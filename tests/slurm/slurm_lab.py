"""A real Slurm cluster on this machine, for the tests: slurmctld and one slurmd per node, every node a
network namespace of its own (own address, own hostname, own /etc/hosts) on one bridge, and munge
authentication with a key generated for the lab. Config, state, spool and logs live in a temporary
directory; the lab leaves nothing behind (daemons, namespaces, /etc/netns entries).

    with SlurmLab(nodes=3, cpus=4) as lab:
        job = lab.sbatch(["--nodes=2", "--ntasks-per-node=2"], "hvdrun ./train")
        lab.wait(job)                   # until the job left the queue
        lab.output(job)                 # its stdout+stderr
        lab.processes(1)                # command lines of what runs in node 1's namespace

Nodes are named node1..nodeN (NodeAddr 10.97.0.2..), the controller's namespace has 10.97.0.1. Commands
that talk to Slurm run in the controller's namespace with SLURM_CONF set (lab.run).
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))

from lab_common import Lab, add_bridge, add_bridged_namespace, delete_namespaces, netns_unavailable  # noqa: E402

SUBNET = "10.97.0"
BUILD = os.environ.get("HVD_BUILD_DIR", "")


def hvd_env():
    """What a batch script needs to run the build tree's hvdrun (and hvdrun its hvd-proxy) on the nodes."""
    return {"PATH": f"{BUILD}:/usr/sbin:/usr/bin:/sbin:/bin", "HVD_BIN": BUILD}


def unavailable():
    """Why the lab cannot run here, or None."""
    if os.geteuid() != 0:
        return "not root"
    for tool in ("slurmctld", "slurmd", "munged", "srun", "sbatch", "unshare", "nsenter", "ip"):
        if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
            return f"{tool} not installed (packaging/install-deps.sh installs slurm-wlm and munge)"
    return netns_unavailable(f"hvdslprobe{os.getpid()}")


def sh(*args, **kw):
    return subprocess.run(list(args), check=True, capture_output=True, text=True, **kw)


class SlurmLab(Lab):
    def __init__(self, nodes=3, cpus=4):
        self.n = nodes
        self.cpus = cpus
        tag = str(os.getpid())
        self.hub = "hvdSB" + tag
        self.ctl = "hvdSC" + tag
        self.node_ns = [f"hvdSN{tag}_{i}" for i in range(1, nodes + 1)]
        self.dir = tempfile.mkdtemp(prefix="hvd-slurm-")
        os.chmod(self.dir, 0o755)
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self.daemons = []

    def node(self, i):
        return f"node{i}"

    def address(self, i):
        return f"{SUBNET}.{i + 1}"

    # ----- set-up

    def _setup(self):
        self._network()
        self._munge()
        self._config()
        self._start()

    def _network(self):
        add_bridge(self.hub)
        hosts = ["127.0.0.1 localhost", f"{SUBNET}.1 slurmctl"]
        hosts += [f"{self.address(i)} {self.node(i)}" for i in range(1, self.n + 1)]
        self.hosts_file = os.path.join(self.dir, "hosts")
        with open(self.hosts_file, "w") as f:
            f.write("\n".join(hosts) + "\n")
        for k, (ns, addr) in enumerate([(self.ctl, f"{SUBNET}.1")] +
                                       [(self.node_ns[i - 1], self.address(i)) for i in range(1, self.n + 1)]):
            add_bridged_namespace(self.hub, ns, f"vs{os.getpid() % 100000}_{k}"[:15], addr)
            # `ip netns exec` puts this over /etc/hosts for commands run in the namespace.
            os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
            shutil.copy(self.hosts_file, f"/etc/netns/{ns}/hosts")

    def _munge(self):
        d = os.path.join(self.dir, "munge")
        os.makedirs(d, mode=0o700)
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self.munge_socket = os.path.join(d, "munge.sock")
        sh("munged", f"--key-file={key}", f"--socket={self.munge_socket}", f"--pid-file={d}/munged.pid",
           f"--log-file={d}/munged.log", f"--seed-file={d}/seed", "--force")
        self.daemons.append(f"{d}/munged.pid")

    def _config(self):
        d = self.dir
        for sub in ("state", "log", "spool"):
            os.makedirs(os.path.join(d, sub))
        host = os.uname().nodename
        lines = [
            "ClusterName=hvdlab",
            f"SlurmctldHost={host}({SUBNET}.1)",
            "SlurmctldPort=6817", "SlurmdPort=6818",
            "AuthType=auth/munge", f"AuthInfo=socket={self.munge_socket}", "CredType=cred/munge",
            "SlurmUser=root", "SlurmdUser=root",
            f"StateSaveLocation={d}/state", f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldPidFile={d}/slurmctld.pid", f"SlurmdPidFile={d}/spool/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/log/slurmctld.log", f"SlurmdLogFile={d}/log/slurmd-%n.log",
            # No cgroups needed: process tracking by parentage, binding by sched_setaffinity.
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/affinity",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            "MpiDefault=none", "ReturnToService=2", "SlurmdParameters=config_overrides",
            "SchedulerType=sched/builtin", "JobCompType=jobcomp/none",
            "AccountingStorageType=accounting_storage/none", "MailProg=/bin/true",
            "InactiveLimit=0", "KillWait=3", "MessageTimeout=10", "SlurmdTimeout=60",
        ]
        for i in range(1, self.n + 1):
            lines.append(f"NodeName={self.node(i)} NodeAddr={self.address(i)} CPUs={self.cpus} State=UNKNOWN")
        lines.append(f"PartitionName=lab Nodes=node[1-{self.n}] Default=YES MaxTime=INFINITE State=UP")
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _start(self):
        sh("ip", "netns", "exec", self.ctl, "slurmctld", "-i", "-f", self.conf, env=self.env)
        self.daemons.append(os.path.join(self.dir, "slurmctld.pid"))
        for i in range(1, self.n + 1):
            os.makedirs(os.path.join(self.dir, "spool", self.node(i)))
            # Its own mount and UTS namespaces: the node's hostname and /etc/hosts; the network namespace
            # entered with nsenter, which (unlike `ip netns exec`) keeps this machine's /sys and its cgroups.
            ns = self.node_ns[i - 1]
            sh("unshare", "-m", "-u", "sh", "-c",
               f"hostname {self.node(i)} && mount --bind {self.hosts_file} /etc/hosts && "
               f"exec nsenter --net=/run/netns/{ns} slurmd -N {self.node(i)} -f {self.conf}", env=self.env)
            self.daemons.append(os.path.join(self.dir, "spool", f"slurmd-{self.node(i)}.pid"))
        deadline = time.time() + 30
        while time.time() < deadline:
            r = self.run(["sinfo", "-h", "-o", "%T %D"], check=False)
            if r.returncode == 0 and r.stdout.split() == ["idle", str(self.n)]:
                return
            time.sleep(0.2)
        raise RuntimeError("the Slurm lab's nodes did not come up: " + self.run(["sinfo"], check=False).stdout +
                           self.log("slurmctld.log")[-2000:])

    # ----- use

    def run(self, argv, check=True, timeout=120, env=None):
        """A command in the controller's namespace with the lab's SLURM_CONF."""
        return subprocess.run(["ip", "netns", "exec", self.ctl] + argv, capture_output=True, text=True,
                              env=dict(self.env, **(env or {})), timeout=timeout, check=check)

    def sbatch(self, options, script, env=None):
        """Submits `script` (a shell script body) with sbatch `options`; returns the job id."""
        path = os.path.join(self.dir, f"job{time.monotonic_ns()}.sh")
        with open(path, "w") as f:
            f.write("#!/bin/bash\n" + script + "\n")
        os.chmod(path, 0o755)
        r = self.run(["sbatch", "--parsable", f"--output={self.dir}/slurm-%j.out", f"--chdir={os.getcwd()}"] +
                     options + [path], env=env)
        return r.stdout.strip().split(";")[0]

    def state(self, job):
        r = self.run(["scontrol", "-o", "show", "job", job], check=False)
        for field in r.stdout.split():
            if field.startswith("JobState="):
                return field.split("=", 1)[1]
        return "GONE"

    def wait(self, job, timeout=90):
        """Waits until the job ended; returns its final state."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = self.state(job)
            if s not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"):
                return s
            time.sleep(0.1)
        raise TimeoutError(f"job {job} still {self.state(job)} after {timeout} s:\n" + self.output(job))

    def wait_for_output(self, job, text, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if text in self.output(job):
                return
            time.sleep(0.1)
        raise TimeoutError(f"job {job} never printed {text!r}:\n" + self.output(job))

    def output(self, job):
        try:
            with open(os.path.join(self.dir, f"slurm-{job}.out"), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def log(self, name):
        try:
            with open(os.path.join(self.dir, "log", name), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def processes(self, i):
        """Command lines of every process in node i's network namespace, its slurmd excepted."""
        ns = self.node_ns[i - 1]
        pids = sh("ip", "netns", "pids", ns).stdout.split()
        out = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            if cmd.startswith("slurmd ") or cmd.startswith("/usr/sbin/slurmd"):
                continue
            out.append(cmd)
        return out

    def leftovers(self, pattern):
        """{node: command lines in its namespace matching the regex pattern}."""
        return {i: [c for c in self.processes(i) if re.search(pattern, c)] for i in range(1, self.n + 1)}

    def wait_clean(self, pattern, timeout=15):
        """Waits up to timeout s until no node runs a process matching pattern; returns what is left."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            left = self.leftovers(pattern)
            if not any(left.values()):
                return left
            time.sleep(0.1)
        return self.leftovers(pattern)

    # ----- tear-down

    def close(self):
        for pidfile in reversed(self.daemons):
            try:
                with open(pidfile) as f:
                    os.kill(int(f.read().strip()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        time.sleep(0.3)
        namespaces = self.node_ns + [self.ctl, self.hub]
        delete_namespaces(namespaces)
        for ns in namespaces:
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        for pidfile in self.daemons:
            try:
                with open(pidfile) as f:
                    os.kill(int(f.read().strip()), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
