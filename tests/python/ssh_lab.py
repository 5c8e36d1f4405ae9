"""Real ssh hosts on this machine, for the tests: one network namespace per host, each with its own sshd, its own
hostname (a UTS namespace of its own) and an address on one bridge (in a namespace of its own); the test process
(the driver, where hvdrun runs) joins that bridge through a veth pair. Keys, configs and logs live in a temporary
directory; the lab leaves nothing behind (processes, namespaces, links, files), also when its start fails.

    with SshLab(hosts=2) as lab:
        Executor(num_workers=4, hosts=lab.hosts(2),               # 'h1:2,h2:2'
                 settings=Executor.create_settings(ssh_identity_file=lab.key), env=lab.env())
        lab.processes(2)        # (pid, command line) of what runs in host 2's namespace, its sshd listener excepted
        lab.host_of(pid)        # which host's namespace a process is in (0: none of them)

Host i is named h<i>, has the address SUBNET.(i + 1) and runs `sshd -D` on port 22; the driver's end of the bridge
has SUBNET.254. SUBNET is 10.212.K, K chosen under a file lock so that no address of this machine's namespace (an
earlier or concurrent lab's included) is in it. Every host reaches the bridge through an interface of the same
name as the driver's end of the veth pair, so the one interface name hvdrun picks (HOROVOD_GLOO_IFACE) is valid on
every host, as on a real cluster.

The driver's ssh client configuration is a HOME of the lab's own (lab.env() sets HOME to it and drops
SSH_AUTH_SOCK): ~/.ssh/config maps h<i> to its address (HostName), ~/.ssh/known_hosts holds every host's key, and
the user key (lab.key, accepted by every sshd as root) is NOT at a default path, so a login works only with
--ssh-identity-file. The root account's ~/.ssh is never read or written.
"""

import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import time

from executor_common import alive
from lab_common import (Lab, add_bridge, add_bridged_namespace, delete_namespaces, die_with_parent, free_subnet,
                        sh, stop)
from proc_table import cmdline, pids

_TOOLS = ("ip", "unshare", "ssh-keygen", "hostname")
_SSHD = "/usr/sbin/sshd"
_LOCK = "/tmp/hvd-ssh-lab.lock"


def unavailable() -> "str | None":
    """Why the lab cannot run here, or None."""
    if os.geteuid() != 0:
        return "not root (network namespaces need CAP_SYS_ADMIN)"
    for tool in _TOOLS:
        if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
            return f"{tool} not installed"
    if not os.access(_SSHD, os.X_OK):
        return f"{_SSHD} not installed (openssh-server)"
    probe = f"hvdxprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return "ip netns add is not permitted: " + r.stderr.strip()
    try:
        r = subprocess.run(["ip", "netns", "exec", probe, "ip", "link", "add", "br0", "type", "bridge"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return "cannot create a bridge in a network namespace: " + r.stderr.strip()
        r = subprocess.run(["unshare", "--uts", "true"], capture_output=True, text=True)
        if r.returncode != 0:
            return "unshare --uts is not permitted: " + r.stderr.strip()
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _namespace_id(path: str) -> "tuple[int, int] | None":
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class SshLab(Lab):
    """See the module docstring. hosts: how many ssh hosts (h1..hN)."""

    def __init__(self, hosts: int = 2):
        if isinstance(hosts, bool) or not isinstance(hosts, int) or not 1 <= hosts <= 50:
            raise ValueError(f"hosts must be an int from 1 to 50, got {hosts!r}")
        self.n = hosts
        tag = str(os.getpid())
        self.hub = "hvdXB" + tag
        self.host_ns = [f"hvdXH{tag}_{i}" for i in range(1, hosts + 1)]
        # The driver's end of the veth pair, and every host's interface to the bridge.
        self.interface = f"hvx{os.getpid() % 10000000}"
        self.dir = tempfile.mkdtemp(prefix="hvd-ssh-lab-")
        self.home = os.path.join(self.dir, "home")
        self.key = os.path.join(self.dir, "id_ed25519")
        self.known_hosts = os.path.join(self.home, ".ssh", "known_hosts")
        self.sshds = []  # (Popen, log path), host i at index i - 1
        self.subnet = None
        self._made = []  # namespaces created, in order
        self._link = False
        self._closed = False

    # ----- addresses and names

    def name(self, i: int) -> str:
        """Host i's name (hosts are numbered from 1), its alias in the driver's ssh config and its hostname."""
        return f"h{i}"

    def address(self, i: int) -> str:
        return f"{self.subnet}.{i + 1}"

    @property
    def driver_address(self) -> str:
        """The test process's address on the lab's bridge."""
        return f"{self.subnet}.254"

    def hosts(self, slots: int) -> str:
        """hvdrun's -H for every host with `slots` slots: 'h1:2,h2:2'."""
        return ",".join(f"{self.name(i)}:{slots}" for i in range(1, self.n + 1))

    def env(self, base: "dict[str, str] | None" = None) -> "dict[str, str]":
        """The driver's environment for hvdrun: base (default os.environ) with HOME the lab's ssh client
        configuration and no ssh-agent."""
        env = dict(os.environ if base is None else base)
        env.pop("SSH_AUTH_SOCK", None)
        env["HOME"] = self.home
        return env

    # ----- set-up

    def _setup(self):
        self._keys()
        self._network()
        self._client_config()
        for i in range(1, self.n + 1):
            self._start_sshd(i)

    def _keys(self):
        os.makedirs(os.path.join(self.home, ".ssh"), mode=0o700)
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "hvd-ssh-lab", "-f", self.key)
        shutil.copy(self.key + ".pub", os.path.join(self.dir, "authorized_keys"))

    def _network(self):
        # Listed once made (close() deletes them): a name that already existed is not this lab's.
        add_bridge(self.hub, made=self._made)
        for i, ns in enumerate(self.host_ns, 1):
            add_bridged_namespace(self.hub, ns, f"vx{i}", interface=self.interface, made=self._made)
        # The driver's end. The subnet is chosen and taken under a lock: two labs starting at once must not
        # pick the same one.
        sh("ip", "link", "add", self.interface, "type", "veth", "peer", "name", "vdriver", "netns", self.hub)
        self._link = True
        sh("ip", "netns", "exec", self.hub, "ip", "link", "set", "vdriver", "master", "br0")
        sh("ip", "netns", "exec", self.hub, "ip", "link", "set", "vdriver", "up")
        with open(_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.subnet = free_subnet("10.212", 250, "ssh lab")
            sh("ip", "addr", "add", self.driver_address + "/24", "dev", self.interface)
        sh("ip", "link", "set", self.interface, "up")
        for i, ns in enumerate(self.host_ns, 1):
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", self.address(i) + "/24", "dev", self.interface)

    def _client_config(self):
        lines = []
        for i in range(1, self.n + 1):
            lines += [f"Host {self.name(i)}", f"    HostName {self.address(i)}", "    User root", ""]
        with open(os.path.join(self.home, ".ssh", "config"), "w") as f:
            f.write("\n".join(lines))

    def _start_sshd(self, i: int):
        d = os.path.join(self.dir, self.name(i))
        os.makedirs(d)
        host_key = os.path.join(d, "ssh_host_ed25519_key")
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key)
        config = os.path.join(d, "sshd_config")
        with open(config, "w") as f:
            f.write("\n".join([
                "Port 22", f"ListenAddress {self.address(i)}", f"HostKey {host_key}", f"PidFile {d}/sshd.pid",
                f"AuthorizedKeysFile {self.dir}/authorized_keys", "PasswordAuthentication no",
                "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password", "UsePAM no",
                "StrictModes no", "UseDNS no",
                # bash reads ~/.bashrc for a command sent over ssh only at SHLVL 0: root's ~/.bashrc may run
                # `pyenv rehash`, which takes a lock file that a worker killed while its shell starts leaves
                # behind, and every later login then waits for it. The tests are about hvd, not dotfiles.
                "SetEnv SHLVL=1", ""]))
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        os.chmod("/run/sshd", 0o755)
        sh(_SSHD, "-t", "-f", config)
        with open(host_key + ".pub") as f:
            kind, key = f.read().split()[:2]
        with open(self.known_hosts, "a") as f:
            f.write(f"{self.address(i)} {kind} {key}\n")
        log = os.path.join(d, "sshd.log")
        with open(log, "wb") as out:
            # Its own UTS namespace: the host's hostname; `ip netns exec` enters the network namespace.
            proc = subprocess.Popen(
                ["unshare", "--uts", "sh", "-c",
                 f"hostname {self.name(i)} && exec ip netns exec {self.host_ns[i - 1]} {_SSHD} -D -e -f {config}"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        self.sshds.append((proc, log))
        deadline = time.monotonic() + 15
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd of {self.name(i)} exited with {proc.returncode}:\n{_tail(log)}")
            try:
                socket.create_connection((self.address(i), 22), timeout=0.5).close()
                return
            except OSError as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd of {self.name(i)} does not accept connections on "
                                       f"{self.address(i)}:22 after 15 s ({e}):\n{_tail(log)}") from None
            time.sleep(0.02)

    # ----- use

    def namespace_id(self, i: int) -> "tuple[int, int] | None":
        """(device, inode) of host i's network namespace."""
        return _namespace_id(f"/run/netns/{self.host_ns[i - 1]}")

    def host_of(self, pid: int) -> int:
        """The host whose network namespace process pid is in; 0 when none of them (or when it has gone)."""
        mine = _namespace_id(f"/proc/{pid}/ns/net")
        for i in range(1, self.n + 1):
            if mine is not None and mine == self.namespace_id(i):
                return i
        return 0

    def processes(self, i: int) -> "list[tuple[int, str]]":
        """(pid, command line) of every live process in host i's network namespace, its sshd listener excepted
        (found by scanning /proc and comparing network namespaces)."""
        target = self.namespace_id(i)
        listener = self.sshds[i - 1][0].pid if len(self.sshds) >= i else None
        found = []
        for pid in pids():
            if pid == listener:
                continue
            if _namespace_id(f"/proc/{pid}/ns/net") == target and alive(pid):
                found.append((pid, cmdline(pid)))
        return sorted(found)

    def leftovers(self) -> "dict[int, list[tuple[int, str]]]":
        """{host: its processes} for the hosts where anything but the sshd listener runs."""
        return {i: procs for i in range(1, self.n + 1) if (procs := self.processes(i))}

    def wait_empty(self, timeout: float) -> "dict[int, list[tuple[int, str]]]":
        """Waits up to timeout seconds until nothing but the sshd listeners runs on the hosts; what is left."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.leftovers()
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)

    def logs(self) -> str:
        return "\n".join(f"--- {os.path.relpath(log, self.dir)}\n{_tail(log)}" for _, log in self.sshds)

    # ----- tear-down

    def close(self) -> None:
        """Stops the sshds, kills whatever still runs in the hosts' namespaces, deletes the namespaces, the
        driver's link and the directory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        stop([proc for proc, _ in self.sshds])
        delete_namespaces(reversed(self._made))
        if self._link:
            # Deleting the bridge's namespace deleted the driver's veth peer, and with it this end; make sure.
            subprocess.run(["ip", "link", "del", self.interface], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def _tail(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-3000:]
    except OSError:
        return "(no log)"
