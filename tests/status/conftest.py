"""Shared helpers for the status port's tests: a real hvd-rendezvous with --status-port, real reports over
PUT /_hvd/report/<rank>, HTTP clients as this user or as nobody (setpriv), and headless Chromium.

Environment (set by ctest, see tests/status/CMakeLists.txt): HVD_BUILD_DIR, the build tree holding
hvd-rendezvous and hvdrun.
"""

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

BUILD_DIR = Path(os.environ.get("HVD_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
DAEMON = BUILD_DIR / "hvd-rendezvous"
HVDRUN = BUILD_DIR / "hvdrun"
PYTHON = "/usr/bin/python3"
ARTIFACTS = BUILD_DIR / "test-artifacts"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


class Daemon:
    """hvd-rendezvous with a status port; stopped with SIGTERM at the end of the test."""

    def __init__(self, args, tmp_path):
        self.token = None
        argv = [str(DAEMON), "--status-port", "0", *args]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        listening = self.proc.stdout.readline()
        status = self.proc.stdout.readline()
        m = re.fullmatch(r"hvd-rendezvous listening on 127\.0\.0\.1:(\d+)\n", listening)
        s = re.fullmatch(r"hvd-rendezvous status page on http://127\.0\.0\.1:(\d+)/\n", status)
        if not m or not s:
            self.stop()
            raise AssertionError(f"unexpected start lines {listening!r} {status!r}: {self.proc.stderr.read()}")
        self.port = int(m.group(1))
        self.status_port = int(s.group(1))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def daemon(tmp_path):
    """daemon(token="...") or daemon(token=None) (--no-token): a running hvd-rendezvous with a status port."""
    started = []

    def start(token="status-test-token-0123456789abcdef", extra=()):
        if token is None:
            args = ["--no-token"]
        else:
            token_file = tmp_path / f"token{len(started)}"
            token_file.write_text(token + "\n")
            args = ["--token-file", str(token_file)]
        d = Daemon([*args, *extra], tmp_path)
        d.token = token
        started.append(d)
        return d

    yield start
    for d in started:
        assert d.stop() == 0, "hvd-rendezvous did not stop cleanly on SIGTERM"


def request(port, method, path, headers=None, body=None):
    """One HTTP request from this process: (status, headers as a dict of lower-case names, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        conn.close()


def put_report(daemon, report, token=None, rank=None):
    headers = {"Content-Type": "application/json"}
    token = daemon.token if token is None else token
    if token:
        headers["X-Hvd-Token"] = token
    body = report if isinstance(report, (bytes, str)) else json.dumps(report)
    return request(daemon.port, "PUT", f"/_hvd/report/{report['rank'] if rank is None else rank}", headers, body)[0]


def job_reports(hostile_host, fields):
    """The reports of a 4-rank job on node-0 to node-2 and `hostile_host`, whose rank 3 has shut down; each
    report with the fields that fields(rank) adds (pid, counters, waits)."""
    return [{"rank": rank, "size": 4, "local_rank": rank, "host": hostile_host if rank == 3 else f"node-{rank}",
             "state": "shutdown" if rank == 3 else "running", **fields(rank)} for rank in range(4)]


def wait_for_rank_2(name, seconds):
    """A wait in rank 0's report: ranks 0, 1 and 3 submitted the allreduce `name`, rank 2 has not."""
    return {"name": name, "op": "allreduce", "process_set": 0, "submitted": [0, 1, 3], "missing": [2],
            "seconds": seconds}


# A client that runs in another process, possibly as another user: argv[1] port, argv[2] method, argv[3]
# path, argv[4] headers as JSON; prints {"status", "headers", "body"} as JSON.
_CLIENT = textwrap.dedent("""
    import http.client, json, sys
    conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
    conn.request(sys.argv[2], sys.argv[3], headers=json.loads(sys.argv[4]))
    r = conn.getresponse()
    print(json.dumps({"status": r.status, "headers": {k.lower(): v for k, v in r.getheaders()},
                      "body": r.read().decode("utf-8", "replace")}))
""")


def client(port, path, headers=None, as_nobody=False, method="GET"):
    """The request from a separate process, as this user or as nobody: (status, headers, body text)."""
    cmd = [*(NOBODY if as_nobody else []), PYTHON, "-c", _CLIENT, str(port), method, path, json.dumps(headers or {})]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd="/")
    assert done.returncode == 0, f"{cmd[:5]} failed: {done.stderr}"
    answer = json.loads(done.stdout)
    return answer["status"], answer["headers"], answer["body"]


def require_root():
    if os.geteuid() != 0:
        pytest.skip("running a client as nobody (setpriv --reuid=65534) needs root")


class Dom(HTMLParser):
    """The elements of an HTML document with their attributes and text, for checks by id and class."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.elements = []  # dicts: tag, attrs, text, parent index
        self._stack = []
        self.feed(text)

    _VOID = {"meta", "link", "br", "img", "input", "hr", "rect", "polyline", "path", "circle", "line"}

    def handle_starttag(self, tag, attrs):
        e = {"tag": tag, "attrs": dict(attrs), "text": "", "parent": self._stack[-1] if self._stack else None}
        self.elements.append(e)
        if tag not in self._VOID:
            self._stack.append(len(self.elements) - 1)

    def handle_startendtag(self, tag, attrs):
        self.elements.append({"tag": tag, "attrs": dict(attrs), "text": "",
                              "parent": self._stack[-1] if self._stack else None})

    def handle_endtag(self, tag):
        for i in range(len(self._stack) - 1, -1, -1):
            if self.elements[self._stack[i]]["tag"] == tag:
                del self._stack[i:]
                return

    def handle_data(self, data):
        for i in self._stack:
            self.elements[i]["text"] += data

    def by_id(self, ident):
        found = [e for e in self.elements if e["attrs"].get("id") == ident]
        return found[0] if found else None

    def by_class(self, cls, tag=None):
        return [e for e in self.elements
                if cls in (e["attrs"].get("class") or "").split() and (tag is None or e["tag"] == tag)]

    def inside(self, ancestor, cls):
        """Elements of class cls below the element `ancestor`."""
        index = self.elements.index(ancestor)
        out = []
        for e in self.by_class(cls):
            p = e["parent"]
            while p is not None and p != index:
                p = self.elements[p]["parent"]
            if p == index:
                out.append(e)
        return out

    def tags(self, tag):
        return [e for e in self.elements if e["tag"] == tag]


CHROMIUM_MISSING = "chromium is not installed (packaging/install-deps.sh installs it)"
_outcomes = {"chromium_skips": 0, "other": 0}


def pytest_runtest_logreport(report):
    if report.skipped and CHROMIUM_MISSING in str(report.longrepr):
        _outcomes["chromium_skips"] += 1
    elif report.when == "call" or report.failed:
        _outcomes["other"] += 1


def pytest_sessionfinish(session, exitstatus):
    """Every test skipped for want of chromium: exit 77, which ctest shows as skipped (SKIP_RETURN_CODE)."""
    if _outcomes["chromium_skips"] and not _outcomes["other"]:
        session.exitstatus = 77


def chromium_path():
    return shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(url, *, dump_dom=False, screenshot=None, window=(1400, 1000), as_nobody=False, home=None,
             budget_ms=3000):
    """Headless Chromium on url: the DOM after scripts ran (dump_dom) or a screenshot. Returns stdout."""
    browser = chromium_path()
    assert browser, "chromium is not installed (packaging/install-deps.sh installs it)"
    args = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--hide-scrollbars", f"--window-size={window[0]},{window[1]}", f"--virtual-time-budget={budget_ms}"]
    env = dict(os.environ)
    if home:
        env["HOME"] = str(home)
        env["XDG_CONFIG_HOME"] = str(home / ".config")
        env["XDG_CACHE_HOME"] = str(home / ".cache")
        args.append(f"--user-data-dir={home / 'profile'}")
    if dump_dom:
        args.append("--dump-dom")
    if screenshot:
        args.append(f"--screenshot={screenshot}")
    args.append(url)
    cmd = [*(NOBODY if as_nobody else []), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=str(home or "/"))
    assert done.returncode == 0, f"chromium exited {done.returncode}: {done.stderr[-3000:]}"
    return done.stdout


def png_size(path):
    """(width, height) from a PNG's IHDR; fails for anything that is not a PNG."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def artifact(name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / name
