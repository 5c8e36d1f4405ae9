"""bench/ceilings/shm_broadcast.cc, built and run as bench/compare does: every protocol delivers every operation's
message to the reader (the program checks each one's stamps and fails otherwise), prints its one JSON line, and
refuses a bad flag with one line naming it."""
import json
import os
import subprocess

import pytest

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "ceilings", "shm_broadcast.cc")
PROTOCOLS = ("cells", "round", "agreed-round", "agreed-eager", "agreed-prewritten")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    exe = str(tmp_path_factory.mktemp("ceiling") / "shm_broadcast")
    subprocess.run(["g++", "-O2", "-std=c++17", "-Wall", "-Werror", SOURCE, "-o", exe], check=True, timeout=120)
    return exe


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("size", [8, 4096, 65536 + 8])
def test_every_protocol_delivers_every_message(program, protocol, size):
    r = subprocess.run([program, "--protocol", protocol, "--bytes", str(size), "--iters", "2000"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout)
    assert row["op"] == "shm_broadcast" and row["protocol"] == protocol and row["bytes"] == size
    assert row["iters"] == 2000
    assert 0 < row["min_us"] <= row["median_us"]
    assert row["median_us"] == max(row["root_us"], row["reader_us"])


@pytest.mark.parametrize("argv,named", [
    (["--protocol", "ring"], "'ring'"),
    (["--bytes", "4"], "'4'"),
    (["--iters", "10"], "'10'"),
    (["--size", "8"], "'--size'"),
    (["--bytes"], "--bytes"),
])
def test_a_bad_flag_is_refused_with_one_line_naming_it(program, argv, named):
    r = subprocess.run([program] + argv, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert r.stdout == ""
    first = r.stderr.splitlines()[0]
    assert first.startswith("shm_broadcast: ") and named in first
