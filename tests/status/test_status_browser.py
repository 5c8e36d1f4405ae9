"""The status page in a real browser (headless Chromium) against hvd-rendezvous fed with real reports: the
DOM after the page's script ran (every rank's row, the stuck rank highlighted with what it holds up, the
waits, the chart; hostile names inert), a screenshot kept under $HVD_BUILD_DIR/test-artifacts/, and the
way in for another user: the overview, then /?token= and its cookie.

Exits 77 (skipped) only when no chromium is installed (packaging/install-deps.sh installs it)."""

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import (BUILD_DIR, CHROMIUM_MISSING, HVDRUN, Dom, artifact, chromium, chromium_path, job_reports,
                      png_size, put_report, request, require_root, wait_for_rank_2)

# Without chromium every test here is skipped, and the session exits 77 (conftest.py) for ctest to show SKIPPED.
pytestmark = pytest.mark.skipif(not chromium_path(), reason=CHROMIUM_MISSING)

WORKER = BUILD_DIR / "tests" / "status" / "status_worker"
HOSTILE_TENSOR = "grad.3<img src=x onerror=\"document.title='pwned'\">"
HOSTILE_HOST = "node-3<script>document.title='pwned'</script>"


def reports():
    """A 4-rank job: rank 0 waits for rank 2 in two allreduces (one with a hostile name); rank 3 shut down."""
    return job_reports(HOSTILE_HOST, lambda rank: {
        "pid": 7000 + rank, "uptime_s": 30.0,
        "collectives": {"allreduce": {"count": 100 + rank, "bytes": (rank + 1) << 22}},
        "rss_bytes": 300 << 20, "peak_rss_bytes": (400 + rank) << 20,
        "waits": [wait_for_rank_2("grad.3", 12.0), wait_for_rank_2(HOSTILE_TENSOR, 2.0)] if rank == 0 else [],
    })


def rows(dom):
    return {int(e["attrs"]["data-rank"]): e for e in dom.by_class("worker", "tr")}


def check_full_dom(dom, sent):
    """What the page must show of the reports in `sent`, whoever rendered it."""
    assert dom.tags("body")[0]["attrs"]["data-access"] == "full"
    by_rank = rows(dom)
    assert sorted(by_rank) == [r["rank"] for r in sent]
    for r in sent:
        row = by_rank[r["rank"]]
        assert row["attrs"]["data-state"] == "running"
        assert dom.inside(row, "host")[0]["text"] == r["host"]
        assert dom.inside(row, "pid")[0]["text"] == str(r["pid"])
        assert dom.inside(row, "collectives")[0]["attrs"]["data-count"] == str(r["collectives"]["allreduce"]["count"])
        assert dom.inside(row, "bytes")[0]["attrs"]["data-bytes"] == str(r["collectives"]["allreduce"]["bytes"])
        assert "data-exit-code" not in row["attrs"]  # hvd-rendezvous never sees a process exit
    stuck = by_rank[2]
    assert stuck["attrs"]["data-stuck"] == "true"
    assert "stuck" in stuck["attrs"]["class"].split()
    holdups = [e["text"] for e in dom.inside(stuck, "holdup")]
    assert len(holdups) == 2, holdups
    m = re.fullmatch(r"allreduce 'grad\.3' waits for this rank for (\d+) s", holdups[0])
    assert m and int(m.group(1)) >= 12, holdups
    assert holdups[1].startswith(f"allreduce '{HOSTILE_TENSOR}' waits for this rank for ")
    for rank in (0, 1, 3):
        assert by_rank[rank]["attrs"]["data-stuck"] == "false"
        assert not dom.inside(by_rank[rank], "holdup")
    assert dom.inside(by_rank[3], "state-text")[0]["text"] == "running (shut down)"
    waits = dom.by_id("waits")
    assert waits["attrs"]["data-count"] == "2"
    assert [w["attrs"]["data-name"] for w in dom.inside(waits, "wait")] == ["grad.3", HOSTILE_TENSOR]
    assert [w["attrs"]["data-missing"] for w in dom.inside(waits, "wait")] == ["2", "2"]
    assert dom.by_id("chart")["tag"] == "svg"
    assert int(dom.by_id("chart-allreduce")["attrs"]["data-n"]) >= 1
    assert int(dom.by_id("chart-collectives")["attrs"]["data-n"]) >= 1
    counts = {e["attrs"]["data-state"]: e["attrs"]["data-count"] for e in dom.by_class("count")}
    assert counts == {"starting": "0", "joined": "0", "running": "4", "exited": "0", "stuck": "1"}
    # The hostile names are text: no element of theirs exists and their scripts never ran.
    assert not dom.tags("img")
    assert len(dom.tags("script")) == 1
    assert "pwned" not in dom.tags("title")[0]["text"]


def test_page_in_chromium_after_its_script_ran(daemon):
    d = daemon()
    sent = reports()
    for r in sent:
        assert put_report(d, r) == 200
    url = f"http://127.0.0.1:{d.status_port}/"

    # As served (no script): already right.
    status, _, body = request(d.status_port, "GET", "/")
    assert status == 200
    served = Dom(body.decode())
    check_full_dom(served, sent)
    assert served.by_id("live")["attrs"]["data-live"] == "false"

    # In the browser, once the script has fetched /status.json and drawn the page again.
    home = Path(tempfile.mkdtemp(prefix="hvd-chromium-"))
    try:
        dom = Dom(chromium(url, dump_dom=True, home=home))
        assert dom.by_id("live")["attrs"]["data-live"] == "true", dom.by_id("live")
        assert dom.by_id("live")["text"].startswith("live · updated ")
        check_full_dom(dom, sent)

        shot = artifact("status_page_rendezvous.png")
        shot.unlink(missing_ok=True)
        chromium(url, screenshot=shot, window=(1400, 1000), home=home)
        assert png_size(shot) == (1400, 1000)
        assert shot.stat().st_size > 20000  # a drawn page, not a blank one
        print(f"screenshot: {shot}")
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_another_user_sees_the_overview_until_the_token_link(daemon):
    require_root()
    d = daemon()
    sent = reports()
    for r in sent:
        assert put_report(d, r) == 200
    # A profile nobody can write, outside root's private temporary directories.
    home = Path(tempfile.mkdtemp(prefix="hvd-chromium-nobody-"))
    os.chown(home, 65534, 65534)
    try:
        base = f"http://127.0.0.1:{d.status_port}"
        dom = Dom(chromium(base + "/", dump_dom=True, as_nobody=True, home=home))
        assert dom.tags("body")[0]["attrs"]["data-access"] == "overview"
        assert dom.by_id("live")["attrs"]["data-live"] == "true"  # its script reads the overview JSON
        assert not rows(dom)
        assert dom.by_id("access-note") is not None
        assert dom.by_id("waits") is None and dom.by_id("chart") is None
        assert {e["attrs"]["data-state"]: e["attrs"]["data-count"] for e in dom.by_class("count")} == {
            "starting": "0", "joined": "0", "running": "4", "exited": "0"}

        # The token link: 303 to / with the cookie, which the browser then sends with every request.
        dom = Dom(chromium(f"{base}/?token={d.token}", dump_dom=True, as_nobody=True, home=home))
        check_full_dom(dom, sent)
        assert dom.by_id("live")["attrs"]["data-live"] == "true"

        # A wrong token: the browser shows the one-line refusal.
        text = chromium(f"{base}/?token=wrong", dump_dom=True, as_nobody=True, home=home)
        assert "status port: wrong token in /?token=" in text
    finally:
        shutil.rmtree(home, ignore_errors=True)


class HvdrunJob:
    """hvdrun -np 4 --status-port 0 of status_worker; its stderr read on a thread for the status page's line."""

    def __init__(self, tmp_path):
        self.dir = tmp_path
        env = dict(os.environ, STATUS_TEST_DIR=str(tmp_path))
        # Started as ./train, which the page shows as the job's name.
        (tmp_path / "train").symlink_to(WORKER)
        self.proc = subprocess.Popen(
            [str(HVDRUN), "-np", "4", "-H", "localhost:4", "--status-port", "0", "./train"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(tmp_path))
        self.stdout, self.stderr = [], []
        self.port = None
        self._found = threading.Event()
        threading.Thread(target=self._read, args=(self.proc.stdout, self.stdout), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr), daemon=True).start()
        assert self._found.wait(30), f"no status page line from hvdrun:\n{self.output()}"

    def _read(self, stream, lines):
        for line in stream:
            lines.append(line)
            m = re.fullmatch(r"hvdrun: status page at http://127\.0\.0\.1:(\d+)/\n", line)
            if m:
                self.port = int(m.group(1))
                self._found.set()

    def output(self):
        return "--- stdout\n" + "".join(self.stdout) + "--- stderr\n" + "".join(self.stderr)

    def touch(self, name):
        (self.dir / name).write_text("")

    def status(self):
        status, _, body = request(self.port, "GET", "/status.json")
        assert status == 200
        return json.loads(body)

    def wait_for(self, what, predicate, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"hvdrun ended ({self.proc.returncode}) waiting for {what}\n{self.output()}"
            s = self.status()
            if predicate(s):
                return s
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}: {json.dumps(self.status())[:3000]}\n{self.output()}")

    def close(self):
        self.touch("go")
        self.touch("end")
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


def test_hvdrun_job_in_chromium(tmp_path):
    """A real 4-rank job: rank 2 holds up an allreduce (stuck), then rank 3 exits while the others still run."""
    job = HvdrunJob(tmp_path)
    home = Path(tempfile.mkdtemp(prefix="hvd-chromium-"))
    try:
        url = f"http://127.0.0.1:{job.port}/"

        def stuck(s):
            return (s["counts"]["running"] == 4 and [w["rank"] for w in s["workers"] if w["stuck"]] == [2]
                    and any("warmed up" in line for line in s["workers"][1]["tail"])
                    and sum(p["allreduce_bytes_per_s"] for p in s["history"]) > 0)

        job.wait_for("rank 2 stuck", stuck)
        dom = Dom(chromium(url, dump_dom=True, home=home))
        assert dom.by_id("job-name")["text"] == "./train"
        assert dom.by_id("size")["attrs"]["data-size"] == "4"
        assert dom.by_id("live")["attrs"]["data-live"] == "true"
        by_rank = rows(dom)
        assert sorted(by_rank) == [0, 1, 2, 3]
        for rank, row in by_rank.items():
            assert row["attrs"]["data-state"] == "running"
            assert row["attrs"]["data-stuck"] == ("true" if rank == 2 else "false")
            assert dom.inside(row, "host")[0]["text"] in ("localhost", socket.gethostname())
            assert int(dom.inside(row, "collectives")[0]["attrs"]["data-count"]) >= 40
            assert int(dom.inside(row, "bytes")[0]["attrs"]["data-bytes"]) >= 40 * 1024 * 1024
        holdup = [e["text"] for e in dom.inside(by_rank[2], "holdup")]
        assert len(holdup) == 1 and re.fullmatch(r"allreduce 'grad\.3' waits for this rank for \d+ s", holdup[0])
        waits = dom.inside(dom.by_id("waits"), "wait")
        assert [(w["attrs"]["data-op"], w["attrs"]["data-name"], w["attrs"]["data-missing"]) for w in waits] == [
            ("allreduce", "grad.3", "2")]
        lines = [e["text"] for e in dom.inside(by_rank[1], "line")]
        assert "<script>document.title='pwned'</script><b>loss</b> 0.25 & falling" in lines
        assert "pwned" not in dom.tags("title")[0]["text"] and not dom.tags("b")
        assert int(dom.by_id("chart-allreduce")["attrs"]["data-n"]) >= 1
        assert float(dom.by_id("chart-allreduce")["attrs"]["data-max"]) > 0
        shot = artifact("status_page_hvdrun_stuck.png")
        shot.unlink(missing_ok=True)
        chromium(url, screenshot=shot, window=(1400, 1050), home=home)
        assert png_size(shot) == (1400, 1050)
        if os.environ.get("HVD_UPDATE_DOCS_SCREENSHOT") == "1":  # docs/status.md's picture, refreshed by hand
            shutil.copyfile(shot, Path(__file__).resolve().parents[2] / "docs" / "images" / "status_page.png")

        # Rank 2 goes on: grad.3 completes, everyone shuts down, rank 3 exits and the others stay.
        job.touch("go")

        def exited(s):
            states = {w["rank"]: (w["state"], w["exit_code"]) for w in s["workers"]}
            return states == {0: ("running", None), 1: ("running", None), 2: ("running", None), 3: ("exited", 0)} and \
                all(w["report"] and w["report"]["state"] == "shutdown" for w in s["workers"][:3])

        job.wait_for("rank 3 exited", exited)
        dom = Dom(chromium(url, dump_dom=True, home=home))
        by_rank = rows(dom)
        assert by_rank[3]["attrs"]["data-state"] == "exited"
        assert by_rank[3]["attrs"]["data-exit-code"] == "0"
        assert dom.inside(by_rank[3], "state-text")[0]["text"] == "exited 0"
        assert "rank 3 finished" in [e["text"] for e in dom.inside(by_rank[3], "line")]
        for rank in (0, 1, 2):
            assert by_rank[rank]["attrs"]["data-state"] == "running"
            assert "data-exit-code" not in by_rank[rank]["attrs"]
            assert by_rank[rank]["attrs"]["data-stuck"] == "false"
            assert dom.inside(by_rank[rank], "state-text")[0]["text"] == "running (shut down)"
        assert dom.by_id("waits")["attrs"]["data-count"] == "0"
        counts = {e["attrs"]["data-state"]: e["attrs"]["data-count"] for e in dom.by_class("count")}
        assert counts == {"starting": "0", "joined": "0", "running": "3", "exited": "1", "stuck": "0"}
        shot = artifact("status_page_hvdrun_exited.png")
        shot.unlink(missing_ok=True)
        chromium(url, screenshot=shot, window=(1400, 1050), home=home)
        assert png_size(shot) == (1400, 1050)
        print(f"screenshots: {artifact('status_page_hvdrun_stuck.png')} {shot}")
    finally:
        code = job.close()
        shutil.rmtree(home, ignore_errors=True)
    assert code == 0, job.output()
