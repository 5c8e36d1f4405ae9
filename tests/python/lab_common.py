"""What the labs share (dask_lab, ssh_lab and postgres_lab here, slurm_lab in tests/slurm): a set-up that
tears down what it made when it fails, network namespaces on one bridge, the stop of a lab's daemons, and the
removal of its namespaces with whatever still runs in them."""

import ctypes
import os
import signal
import subprocess
import time

_PR_SET_PDEATHSIG = 1


def sh(*args):
    """Runs a command; its stdout. RuntimeError naming the command and its stderr when it fails."""
    r = subprocess.run(list(args), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def netns_unavailable(probe):
    """Why this process may not make a network namespace (tried with one named `probe`), or None."""
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return "ip netns add is not permitted: " + r.stderr.strip()
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def free_subnet(prefix, count, lab):
    """A /24 `prefix`.K (K from 1 to count) that no address or route of this machine's namespace uses; the
    search starts at a place chosen by this process's id. `lab` names the lab in the error when none is free."""
    used = sh("ip", "-4", "-o", "addr", "show") + sh("ip", "-4", "route", "show")
    start = os.getpid() % count
    for k in range(count):
        subnet = f"{prefix}.{(start + k) % count + 1}"
        if subnet + "." not in used:
            return subnet
    raise RuntimeError(f"no free {prefix}.K.0/24 subnet for the {lab} in this machine's namespace")


def die_with_parent():
    """A preexec_fn: the lab's daemons end with the test process even when it is SIGKILLed (`ip netns exec`,
    unshare and sh exec what they start, so the setting reaches the daemon)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def add_bridge(hub, made=None):
    """A namespace `hub` holding the bridge br0 that the lab's namespaces join. `made`, when given, gets hub
    appended once the namespace exists (and only if this call created it)."""
    sh("ip", "netns", "add", hub)
    if made is not None:
        made.append(hub)
    sh("ip", "netns", "exec", hub, "ip", "link", "set", "lo", "up")
    sh("ip", "netns", "exec", hub, "ip", "link", "add", "br0", "type", "bridge")
    sh("ip", "netns", "exec", hub, "ip", "link", "set", "br0", "up")


def add_bridged_namespace(hub, ns, port, address=None, interface="eth0", made=None):
    """A namespace `ns` whose `interface` is one end of a veth pair; the other end, `port`, is on hub's bridge.
    `address` (a.b.c.d, /24), when given, is set on `interface`. `made` as for add_bridge."""
    sh("ip", "netns", "add", ns)
    if made is not None:
        made.append(ns)
    sh("ip", "link", "add", port, "netns", hub, "type", "veth", "peer", "name", interface, "netns", ns)
    sh("ip", "netns", "exec", hub, "ip", "link", "set", port, "master", "br0")
    sh("ip", "netns", "exec", hub, "ip", "link", "set", port, "up")
    sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
    if address is not None:
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", address + "/24", "dev", interface)
    sh("ip", "netns", "exec", ns, "ip", "link", "set", interface, "up")


class Lab:
    """A context manager: entering runs _setup(), and close() when that raises (close() tears down whatever was
    made, so it must cope with a half-made lab); leaving runs close()."""

    def _setup(self):
        raise NotImplementedError

    def close(self):
        raise NotImplementedError

    def __enter__(self):
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()


def stop(procs, grace=2.0):
    """SIGTERM to each of `procs` (Popen) still running, in order, then SIGKILL to those still running after
    `grace` seconds: a graceful stop first (a Dask worker tells the scheduler it leaves)."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def delete_namespaces(names):
    """Kills whatever still runs in each network namespace (a leaked worker, a process a test started there, a
    process a nanny restarted), then deletes it; a namespace that does not exist is passed over."""
    for ns in names:
        subprocess.run(f"ip netns pids {ns} 2>/dev/null | xargs -r kill -9; ip netns del {ns}", shell=True,
                       capture_output=True)
