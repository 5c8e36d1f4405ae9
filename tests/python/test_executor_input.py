"""hvd.Executor's argument checks: every bad argument is a one-line ValueError or TypeError naming the value,
raised before any process starts (no child process appears, and it takes well under a second)."""

import os
import time

import pytest

from hvd.executor import Executor, ExecutorSettings
from test_executor import children


# ---- bad input: errors before anything starts ------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, error, text", [
    (dict(num_workers=2, num_hosts=2), ValueError, "num_workers=2 and num_hosts=2"),
    (dict(num_workers=2, min_workers=1), ValueError, "min_workers=1"),
    (dict(max_workers=4), ValueError, "max_workers=4 without min_workers"),
    (dict(num_hosts=2, min_workers=1), ValueError, "num_hosts=2 and min_workers=1"),
    (dict(min_workers=5, max_workers=4), ValueError, "min_workers=5 is greater than max_workers=4"),
    (dict(num_workers=0), ValueError, "num_workers must be an int >= 1, got 0"),
    (dict(num_workers=True), ValueError, "got True"),
    (dict(num_workers=2, hosts="a:1", hostfile="f"), ValueError, "hosts='a:1' and hostfile='f'"),
    (dict(num_workers=5, hosts="h1:2,h2:2"), ValueError, "num_workers=5 is more than the 4 slot(s)"),
    (dict(num_hosts=3, hosts="h1:2,h2:2"), ValueError, "num_hosts=3 but hosts='h1:2,h2:2' lists 2"),
    (dict(num_hosts=2, num_workers_per_host=3, hosts="h1:4,h2:2"), ValueError, "h2:2"),
    (dict(num_workers=2, hosts="h1:0"), ValueError, "'h1:0'"),
    (dict(num_workers=2, client="tcp://sched:8786"), TypeError, "tcp://sched:8786"),
    (dict(num_workers=2, gpus_per_worker=1), ValueError, "gpus_per_worker=1 without use_gpu"),
    (dict(num_workers=2, cpus_per_worker=0), ValueError, "cpus_per_worker must be a number >= 1, got 0"),
    (dict(num_workers=2, settings="fast"), TypeError, "'fast'"),
    (dict(num_workers=2, env={"A": 1}), TypeError, "'A': 1"),
    (dict(num_workers=2, reset_limit=3), ValueError, "reset_limit=3"),
    (dict(num_workers=2, engine=object()), TypeError, "engine must be"),
    (dict(num_workers=1, output="/nonexistent/dir/x.log"), ValueError,
     "output='/nonexistent/dir/x.log': the folder /nonexistent/dir does not exist"),
    (dict(num_workers=1, output="/tmp"), ValueError, "output='/tmp': /tmp is a directory"),
    (dict(num_workers=1, executable=5), TypeError, "executable must be the path of a Python interpreter, got int"),
    (dict(), ValueError, "num_workers=None"),
])
def test_bad_arguments_fail_before_anything_starts(kwargs, error, text, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    before = children(os.getpid())
    t0 = time.monotonic()
    with pytest.raises(error) as info:
        Executor(**kwargs)
    assert time.monotonic() - t0 < 0.5
    assert text in str(info.value), str(info.value)
    assert "\n" not in str(info.value)
    assert children(os.getpid()) == before


def test_bad_hostfile_and_settings(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two hosts\nh1 slots=2\nh2 slots=two\n")
    with pytest.raises(ValueError, match=r"hosts:3: 'slots=two'"):
        Executor(num_workers=2, hostfile=hostfile)
    hostfile.write_text("h1 slots=2\nh2 slots=1\n")
    with pytest.raises(ValueError, match="num_workers=4 is more than the 3 slot"):
        Executor(num_workers=4, hostfile=hostfile)
    with pytest.raises(ValueError, match="cannot be read"):
        Executor(num_workers=1, hostfile=tmp_path / "missing")
    with pytest.raises(ValueError, match="ssh_str=<a private key's text, not shown>.*ssh_identity_file"):
        Executor.create_settings(ssh_str="-----BEGIN OPENSSH PRIVATE KEY-----")
    with pytest.raises(ValueError, match="timeout_s must be a number >= 1, got -1"):
        ExecutorSettings(timeout_s=-1)
    with pytest.raises(ValueError, match=r"start_timeout_s=inf is more than 1e\+09 \(about 31 years"):
        ExecutorSettings(start_timeout_s=float("inf"))
    with pytest.raises(ValueError, match=r"elastic_timeout=1e\+30 is more than 1e\+09"):
        Executor(min_workers=1, hosts="localhost:2", elastic_timeout=1e30)
    with pytest.raises(ValueError, match="ssh_port must be a port number"):
        ExecutorSettings(ssh_port=70000)
    with pytest.raises(ValueError, match="nics must be"):
        ExecutorSettings(nics=[1])
    assert ExecutorSettings(nics={"eth1", "eth0"}).nics == ["eth0", "eth1"]
    assert Executor.create_settings(nics=["lo"]).nics == ["lo"]
