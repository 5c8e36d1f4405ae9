"""hvd.Executor over ssh: its hvdrun job logs in to two real ssh hosts (ssh_lab.py: one network namespace, hostname
and sshd per host, on one bridge with this process) and starts two ranks on each through hvd-proxy; the ranks
connect back to this process across the bridge. Placement, collectives across hosts, persistence, stateful
execute, a rank SIGKILLed on a host, a SIGKILLed driver, shutdown, and a login that cannot succeed. Every check
of what is left looks at the hosts' namespaces themselves. Skips with the reason where the lab cannot run (not
root, no network namespaces, no sshd, no hvd-proxy in the build tree)."""

import json
import os
import queue
import re
import signal
import subprocess
import textwrap
import threading
import time

import pytest

from conftest import BUILD_DIR, PACKAGE_DIR, PYTHON, driver_report
from executor_common import Accumulator, alive, wait_gone
from executor_common import allreduce_for as _allreduce_for
from executor_common import noop as _noop
from proc_table import cmdline, parent
from ssh_lab import SshLab, unavailable

from hvd.executor import Executor, ExecutorError

# Incremented by _identity in the workers, which import this module once and keep it.
_CALLS = 0


@pytest.fixture(scope="module")
def lab():
    why = unavailable()
    if why is None and not os.access(BUILD_DIR / "hvd-proxy", os.X_OK):
        why = f"{BUILD_DIR / 'hvd-proxy'} is not built"
    if why is not None:
        pytest.skip(f"no ssh lab: {why}")
    with SshLab(hosts=2) as lab:
        yield lab


@pytest.fixture
def hosts(lab):
    """The lab with nothing but the sshd listeners running on its hosts (an earlier test's workers gone)."""
    left = lab.wait_empty(15)
    assert not left, f"processes left on the hosts by an earlier test: {left}"
    return lab


def make_executor(lab, **settings) -> Executor:
    return Executor(num_workers=4, hosts=lab.hosts(2),
                    settings=Executor.create_settings(ssh_identity_file=lab.key, **settings), env=lab.env())


# ----- functions that run on the ranks

def _identity():
    import socket

    import numpy as np

    import hvd.numpy as hn

    global _CALLS
    _CALLS += 1
    hn.init()
    total = hn.allreduce(np.array([float(hn.rank() + 1)]), op=hn.Sum)
    from_3 = hn.broadcast(np.array([hn.rank() * 10]), root_rank=3)
    return {"rank": hn.rank(), "size": hn.size(), "local_rank": hn.local_rank(), "local_size": hn.local_size(),
            "cross_rank": hn.cross_rank(), "hostname": socket.gethostname(), "planned": os.environ["HOROVOD_HOSTNAME"],
            "pid": os.getpid(), "total": float(total[0]), "from_3": int(from_3[0]), "calls": _CALLS}


def hvdrun_pid(executor) -> int:
    return executor._session.engine._proc.pid


def proxies(lab, i) -> "list[int]":
    return [pid for pid, cmd in lab.processes(i) if cmd.split()[0].endswith("/hvd-proxy")]


def workers(lab, i) -> "list[int]":
    return [pid for pid, cmd in lab.processes(i) if "-m hvd.executor.worker" in cmd]


def check_placement(lab, ranks):
    """Two ranks per host, host by host, each in its host's namespace, started by that host's one hvd-proxy."""
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert {r["size"] for r in ranks} == {4}
    assert [r["hostname"] for r in ranks] == ["h1", "h1", "h2", "h2"]
    assert [r["planned"] for r in ranks] == ["h1", "h1", "h2", "h2"]
    assert [(r["local_rank"], r["local_size"], r["cross_rank"]) for r in ranks] == \
        [(0, 2, 0), (1, 2, 0), (0, 2, 1), (1, 2, 1)]
    assert [lab.host_of(r["pid"]) for r in ranks] == [1, 1, 2, 2]
    for i, pair in ((1, ranks[:2]), (2, ranks[2:])):
        proxy = proxies(lab, i)
        assert len(proxy) == 1, lab.processes(i)
        assert [parent(r["pid"]) for r in pair] == proxy * 2, lab.processes(i)
        assert sorted(workers(lab, i)) == sorted(r["pid"] for r in pair), lab.processes(i)


# ----- tests

def test_run_places_two_ranks_per_ssh_host_and_keeps_them(hosts):
    lab = hosts
    with open(lab.known_hosts) as f:
        known = f.read()
    ex = make_executor(lab)
    ex.start()
    try:
        # hvdrun logs in with the key of the settings (the lab's key is at no default path of its HOME).
        assert f"--ssh-identity-file {lab.key}" in cmdline(hvdrun_pid(ex))
        first = ex.run(_identity)
        check_placement(lab, first)
        assert [r["total"] for r in first] == [10.0] * 4
        assert [r["from_3"] for r in first] == [30] * 4
        assert [r["calls"] for r in first] == [1] * 4
        second = ex.run(_identity)
        # The same processes, with their module state: no new start, no new login.
        assert [r["pid"] for r in second] == [r["pid"] for r in first]
        assert [r["calls"] for r in second] == [2] * 4
        assert [r["total"] for r in second] == [10.0] * 4
    finally:
        ex.shutdown()
    # The hosts' keys were checked against the lab's known_hosts, none accepted as new.
    with open(lab.known_hosts) as f:
        assert f.read() == known


def test_execute_keeps_each_ranks_instance_across_hosts(hosts):
    with make_executor(hosts) as ex:
        ex.start(executable_cls=Accumulator, executable_args=[100.0])
        pids = [r["pid"] for r in ex.run(_identity)]
        assert ex.execute(lambda w: w.step()) == [104.0] * 4
        assert ex.execute(lambda w: w.step()) == [108.0] * 4
        assert ex.execute(lambda w: (w.rank, w.host, w.steps, w.value, os.getpid())) == \
            [(r, "h1" if r < 2 else "h2", 2, 108.0, pids[r]) for r in range(4)]
        assert ex.execute_single(lambda w: (w.rank, w.value)) == (0, 108.0)


def test_a_rank_killed_on_a_host_fails_the_executor_within_2_s_and_leaves_nothing(hosts):
    lab = hosts
    ex = make_executor(lab, timeout_s=5)
    ex.start()
    try:
        ranks = ex.run(_identity)
        pids = [r["pid"] for r in ranks]
        hvdrun = hvdrun_pid(ex)
        assert lab.host_of(pids[3]) == 2
        killed = []

        def kill_rank_3():
            killed.append(time.monotonic())
            os.kill(pids[3], signal.SIGKILL)

        # Rank 3 dies while every rank is in a loop of allreduces across the hosts.
        killer = threading.Timer(1.0, kill_rank_3)
        killer.start()
        try:
            with pytest.raises(ExecutorError) as info:
                ex.run(_allreduce_for, args=(60,))
        finally:
            killer.cancel()
        assert killed, "run() ended before rank 3 was killed"
        elapsed = time.monotonic() - killed[0]
        text = str(info.value)
        assert elapsed < 2.0, (elapsed, text)
        # How rank 3 ended, as hvd-proxy reported it to hvdrun over ssh.
        assert "rank 3 on h2 was killed by signal 9" in text, text
        # hvdrun's account leads; the first connection the driver saw end follows: rank 3's, normally; on a
        # loaded machine the reader of a rank that hvdrun terminated a moment later can run first. Whichever,
        # it is named right.
        assert text.startswith("hvd.Executor: hvdrun exited"), text
        lead = re.search(r"rank (\d) \(pid (\d+) on (h\d)\) closed its connection", text)
        assert lead, text
        rank = int(lead.group(1))
        assert (int(lead.group(2)), lead.group(3)) == (pids[rank], ranks[rank]["hostname"]), text
        assert "start a new Executor" in text, text
        t0 = time.monotonic()
        with pytest.raises(ExecutorError, match="rank 3"):
            ex.run(_noop)
        assert time.monotonic() - t0 < 0.5
        # Without shutdown(): the dead executor tears its workers down by itself, on every host.
        assert lab.wait_empty(10) == {}
        assert wait_gone(pids + [hvdrun], 5) == []
    finally:
        ex.shutdown()


_DRIVER = """
import json, os, sys, time
sys.path.insert(0, {package!r})
from hvd.executor import Executor

def identity():
    import hvd.numpy as hn
    hn.init()
    return os.getpid()

lab = json.loads(sys.argv[1])
ex = Executor(num_workers=4, hosts=lab["hosts"], env=lab["env"],
              settings=Executor.create_settings(ssh_identity_file=lab["key"]))
ex.start()
print(json.dumps({{"pids": ex.run(identity), "hvdrun": ex._session.engine._proc.pid}}), flush=True)
ex.run(time.sleep, args=(60,))
"""


def test_a_killed_driver_ends_every_rank_on_every_host_within_5_s(hosts, tmp_path):
    lab = hosts
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(_DRIVER.format(package=str(PACKAGE_DIR))))
    config = json.dumps({"hosts": lab.hosts(2), "key": lab.key, "env": lab.env()})
    driver = subprocess.Popen([PYTHON, str(script), config], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=tmp_path)
    lines = queue.SimpleQueue()
    threading.Thread(target=lambda: lines.put(driver.stdout.readline()), daemon=True).start()
    try:
        info = driver_report(driver, lines, 90)
        pids = info["pids"]
        assert [lab.host_of(p) for p in pids] == [1, 1, 2, 2]
        assert [len(proxies(lab, i)) for i in (1, 2)] == [1, 1]
        time.sleep(0.5)  # the sleep call is running on the ranks
        assert all(alive(p) for p in pids + [info["hvdrun"]])
        driver.kill()
        killed = time.monotonic()
        assert wait_gone(pids, 5) == [], f"ranks left {time.monotonic() - killed:.1f} s after the driver's SIGKILL"
        # No rank and no hvd-proxy on any host within 5 s of the SIGKILL.
        while True:
            left = {i: workers(lab, i) + proxies(lab, i) for i in (1, 2)}
            if left == {1: [], 2: []} or time.monotonic() - killed > 5:
                break
            time.sleep(0.05)
        assert left == {1: [], 2: []}, (time.monotonic() - killed, lab.leftovers())
        assert driver.wait(timeout=5) == -signal.SIGKILL
        assert wait_gone([info["hvdrun"]], 5) == []
        # The ssh sessions end too: nothing but the sshd listeners is left on the hosts.
        assert lab.wait_empty(10) == {}
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def test_shutdown_leaves_nothing_on_any_host(hosts):
    lab = hosts
    ex = make_executor(lab)
    ex.start()
    try:
        ranks = ex.run(_identity)
        check_placement(lab, ranks)
        hvdrun = hvdrun_pid(ex)
        # Running now: per host its ranks, its hvd-proxy and the ssh session that carries it.
        assert sorted(lab.leftovers()) == [1, 2]
    finally:
        started = time.monotonic()
        ex.shutdown()
    assert time.monotonic() - started < 10
    assert wait_gone([r["pid"] for r in ranks] + [hvdrun], 5) == []
    assert lab.wait_empty(10) == {}


def test_a_login_that_cannot_succeed_fails_start_naming_the_hosts(hosts):
    lab = hosts
    # No identity file: the lab's HOME has no key at a default path and no agent, so both hosts refuse.
    ex = Executor(num_workers=4, hosts=lab.hosts(2), env=lab.env())
    started = time.monotonic()
    with pytest.raises(ExecutorError) as info:
        ex.start()
    text = str(info.value)
    assert time.monotonic() - started < 20, text
    for i in (1, 2):
        assert f"ssh root@{lab.address(i)}:22 ({lab.name(i)}): authentication failed for user root" in text, text
    assert "\n" not in text, text
    assert lab.wait_empty(10) == {}
    with pytest.raises(RuntimeError, match="call start"):
        ex.run(_noop)
