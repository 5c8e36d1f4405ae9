"""hvd-rendezvous --status-port against real reports: /metrics through prometheus_client's parser value by
value, /status.json, the access rules for this user, another user (nobody, through setpriv) and the token,
bad requests answered with 4xx while the server keeps serving, and the daemon's new flags."""

import json
import re
import socket
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import DAEMON, client, job_reports, put_report, request, require_root, wait_for_rank_2

HOSTILE_HOST = 'node-"3"\\\n<b>'


def reports():
    """Reports of a 4-rank job: rank 0 waits for rank 2 in allreduce 'grad.3'; rank 3 has shut down."""
    return job_reports(HOSTILE_HOST, lambda rank: {
        "pid": 4000 + rank, "uptime_s": 5.0 + rank,
        "collectives": {"allreduce": {"count": 10 * (rank + 1), "bytes": 4096 * (rank + 1)},
                        "broadcast": {"count": rank, "bytes": 8 * rank}},
        "rss_bytes": (100 + rank) << 20, "peak_rss_bytes": (200 + rank) << 20,
        "waits": [wait_for_rank_2("grad.3", 3.5)] if rank == 0 else [],
        "stall_warnings": 2 if rank == 0 else 0,
    })


def metrics_of(text):
    """{(sample name, frozenset of labels): value} and the families, from prometheus_client's parser."""
    samples = {}
    families = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in samples, f"duplicate sample {key}"
            samples[key] = s.value
    return samples, families


def value(samples, name, **labels):
    key = (name, frozenset((k, str(v)) for k, v in labels.items()))
    assert key in samples, f"no sample {name}{labels}; have {sorted(k for k in samples if k[0] == name)}"
    return samples[key]


def test_metrics_value_by_value(daemon):
    d = daemon()
    sent = reports()
    for r in sent:
        assert put_report(d, r) == 200
    # Requests of every kind, counted by method and status (the reports above are 4 x PUT 200).
    token = {"X-Hvd-Token": d.token}
    assert request(d.port, "PUT", "/global/0", token, b"addr")[0] == 200
    assert request(d.port, "GET", "/global/0", token)[0] == 200
    assert request(d.port, "GET", "/global/9", token)[0] == 404
    assert request(d.port, "GET", "/global/8?wait_ms=50", token)[0] == 404  # a long poll
    assert put_report(d, b"{not json", rank=1) == 400
    assert request(d.port, "GET", "/global/0", {"X-Hvd-Token": "wrong"})[0] == 403

    status, headers, body = request(d.status_port, "GET", "/metrics", {"Authorization": f"Bearer {d.token}"})
    assert status == 200
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = body.decode("utf-8")
    samples, families = metrics_of(text)

    # Every family has HELP and TYPE lines.
    for name in re.findall(r"^# TYPE (\S+) ", text, re.M):
        assert f"# HELP {name} " in text
    assert families["hvd_rendezvous_request_duration_seconds"].type == "histogram"
    assert families["hvd_collectives"].type == "counter"  # the parser drops _total from a counter's name

    assert value(samples, "hvd_job_size") == 0  # hvd-rendezvous knows no plan
    assert value(samples, "hvd_workers", state="running") == 4
    for state in ("starting", "joined", "exited"):
        assert value(samples, "hvd_workers", state=state) == 0
    for r in sent:
        rank = r["rank"]
        ids = {"rank": rank, "worker": rank}
        assert value(samples, "hvd_worker_up", host=r["host"], **ids) == 1  # the hostile host parses back whole
        for op, c in r["collectives"].items():
            assert value(samples, "hvd_collectives_total", op=op, **ids) == c["count"]
            assert value(samples, "hvd_collective_bytes_total", op=op, **ids) == c["bytes"]
        assert value(samples, "hvd_worker_rss_bytes", **ids) == r["rss_bytes"]
        assert value(samples, "hvd_worker_peak_rss_bytes", **ids) == r["peak_rss_bytes"]
        assert value(samples, "hvd_worker_stuck", **ids) == (1 if rank == 2 else 0)
        assert value(samples, "hvd_worker_run_seconds", **ids) >= r["uptime_s"]
    assert not [k for k in samples if k[0] in ("hvd_worker_exit_code", "hvd_worker_exit_signal")]
    assert value(samples, "hvd_stalled_workers") == 1
    assert value(samples, "hvd_collective_waits") == 1
    assert value(samples, "hvd_collective_wait_seconds") >= 3.5
    assert value(samples, "hvd_stall_warnings_total") == 2
    assert value(samples, "hvd_worker_restarts_total") == 0
    assert value(samples, "hvd_elastic_rounds_total") == 0
    assert not [k for k in samples if k[0] == "hvd_elastic_round"]

    expected_requests = {("PUT", "200"): 5, ("GET", "200"): 1, ("GET", "404"): 2, ("PUT", "400"): 1,
                         ("GET", "403"): 1}
    got_requests = {(dict(k[1])["method"], dict(k[1])["code"]): v for k, v in samples.items()
                    if k[0] == "hvd_rendezvous_requests_total"}
    assert got_requests == expected_requests
    assert value(samples, "hvd_rendezvous_long_polls_total") == 1
    answered = sum(expected_requests.values()) - 1  # all but the long poll are in the histogram
    assert value(samples, "hvd_rendezvous_request_duration_seconds_count") == answered
    assert value(samples, "hvd_rendezvous_request_duration_seconds_bucket", le="+Inf") == answered
    buckets = sorted((float(dict(k[1])["le"]), v) for k, v in samples.items()
                     if k[0] == "hvd_rendezvous_request_duration_seconds_bucket")
    assert [le for le, _ in buckets] == [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1, float("inf")]
    counts = [v for _, v in buckets]
    assert counts == sorted(counts), f"buckets not cumulative: {buckets}"
    assert 0 < value(samples, "hvd_rendezvous_request_duration_seconds_sum") < answered * 1.0


def test_status_json_holds_what_was_reported(daemon):
    d = daemon()
    sent = reports()
    for r in sent:
        assert put_report(d, r) == 200
    status, headers, body = request(d.status_port, "GET", "/status.json", {"X-Hvd-Token": d.token})
    assert status == 200
    assert headers["content-type"] == "application/json"
    s = json.loads(body)
    assert s["access"] == "full"
    assert s["name"] == "hvd-rendezvous"
    assert s["counts"] == {"starting": 0, "joined": 0, "running": 4, "exited": 0}
    assert [w["rank"] for w in s["workers"]] == [0, 1, 2, 3]
    for w, r in zip(s["workers"], sent):
        assert w["host"] == r["host"]
        assert w["pid"] == r["pid"]
        assert w["state"] == "running"
        assert w["collectives"] == r["collectives"]
        assert w["collectives_total"] == sum(c["count"] for c in r["collectives"].values())
        assert w["bytes_total"] == sum(c["bytes"] for c in r["collectives"].values())
        assert w["report"]["state"] == r["state"]
        assert w["stuck"] == (r["rank"] == 2)
    assert s["workers"][3]["state_text"] == "running (shut down)"
    assert s["workers"][2]["holding_up"][0]["name"] == "grad.3"
    assert [(w["name"], w["op"], w["submitted"], w["missing"]) for w in s["waits"]] == [
        ("grad.3", "allreduce", [0, 1, 3], [2])]
    assert s["waits"][0]["seconds"] >= 3.5
    assert s["stuck"] == 1
    assert sum(p["collectives_per_s"] for p in s["history"]) == sum(
        sum(c["count"] for c in r["collectives"].values()) for r in sent)


def test_access_by_user_and_token(daemon):
    require_root()
    d = daemon()
    for r in reports():
        assert put_report(d, r) == 200
    port = d.status_port

    def overview_page(body):
        return 'data-access="overview"' in body and 'class="worker' not in body and "node-1" not in body

    def full_page(body):
        return 'data-access="full"' in body and body.count('<tr class="worker') == 4

    # This user, no token: everything (the connection's socket belongs to the server's user).
    status, _, body = client(port, "/")
    assert status == 200 and full_page(body)
    assert json.loads(client(port, "/status.json")[2])["access"] == "full"
    assert client(port, "/metrics")[0] == 200

    # Another user, no token: the overview only; /metrics 401.
    status, _, body = client(port, "/", as_nobody=True)
    assert status == 200 and overview_page(body), body[:2000]
    assert "/?token=TOKEN" in body
    overview = json.loads(client(port, "/status.json", as_nobody=True)[2])
    assert overview["access"] == "overview"
    assert overview["counts"]["running"] == 4
    assert set(overview) == {"access", "name", "uptime_s", "size", "counts", "now_unix_s"}
    status, headers, _ = client(port, "/metrics", as_nobody=True)
    assert status == 401 and headers["www-authenticate"].startswith("Bearer")

    # Another user with the token, each way: everything.
    for headers in ({"X-Hvd-Token": d.token}, {"Authorization": f"Bearer {d.token}"}):
        status, _, body = client(port, "/", headers, as_nobody=True)
        assert status == 200 and full_page(body)
        assert client(port, "/metrics", headers, as_nobody=True)[0] == 200
        assert json.loads(client(port, "/status.json", headers, as_nobody=True)[2])["access"] == "full"
    status, headers, _ = client(port, f"/?token={d.token}", as_nobody=True)
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie.split("; ") and "SameSite=Strict" in cookie.split("; ")
    jar = {"Cookie": cookie.split(";")[0]}
    status, _, body = client(port, "/", jar, as_nobody=True)
    assert status == 200 and full_page(body)
    assert client(port, "/metrics", jar, as_nobody=True)[0] == 200

    # A wrong token: 403 everywhere, for anyone; a stale cookie locks out others only.
    for as_nobody in (True, False):
        for path in ("/", "/status.json", "/metrics"):
            status, _, body = client(port, path, {"X-Hvd-Token": "wrong"}, as_nobody=as_nobody)
            assert status == 403 and body == "status port: wrong X-Hvd-Token\n"
    assert client(port, "/?token=wrong", as_nobody=True)[0] == 403
    assert client(port, "/", {"Cookie": "hvd_token=stale"}, as_nobody=True)[0] == 403
    status, _, body = client(port, "/", {"Cookie": "hvd_token=stale"})
    assert status == 200 and full_page(body)


def test_open_server_shows_everything_to_anyone(daemon):
    require_root()
    d = daemon(token=None)
    for r in reports():
        assert put_report(d, r) == 200
    status, _, body = client(d.status_port, "/", as_nobody=True)
    assert status == 200 and body.count('<tr class="worker') == 4
    assert client(d.status_port, "/metrics", as_nobody=True)[0] == 200


def raw(port, data, shutdown=False):
    """Raw bytes to the port; the first response's status line and body (or '' when none came)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        if shutdown:
            s.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            chunks.append(chunk)
            text = b"".join(chunks)
            head, sep, body = text.partition(b"\r\n\r\n")
            m = re.search(rb"\r\nContent-Length: (\d+)", head)
            if sep and m and len(body) >= int(m.group(1)):
                break
        text = b"".join(chunks).decode("utf-8", "replace")
        return text.split("\r\n", 1)[0], text.partition("\r\n\r\n")[2]


def test_bad_requests_get_4xx_and_the_server_keeps_serving(daemon):
    d = daemon()
    assert put_report(d, reports()[0]) == 200
    port = d.status_port
    ok = {"X-Hvd-Token": d.token}
    for method in ("POST", "PUT", "DELETE", "OPTIONS", "PATCH"):
        status, headers, body = request(port, method, "/", ok, b"x" if method != "OPTIONS" else None)
        assert status == 405, method
        assert headers["allow"] == "GET, HEAD"
        assert body.decode() == f"status port: method '{method}' not allowed; use GET or HEAD\n"
    status, _, body = request(port, "GET", "/admin", ok)
    assert (status, body) == (404, b"status port: no page '/admin'; there are /, /status.json and /metrics\n")
    status, _, body = request(port, "GET", "/" + "a" * 3000, ok)
    assert status == 414 and body.startswith(b"status port: request target of 3001 bytes exceeds")
    assert request(port, "GET", "/?token=%zz", ok)[0] == 400
    status, headers, body = request(port, "HEAD", "/metrics", ok)
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0
    # Malformed bytes: the parser's 400 and 431, a request cut off, a connection that just closes.
    assert raw(port, b"NONSENSE\r\n\r\n")[0].startswith("HTTP/1.1 400")
    assert raw(port, b"GET / HTTP/1.1\r\nX: " + b"y" * 20000 + b"\r\n\r\n")[0].startswith("HTTP/1.1 431")
    raw(port, b"GET /metr", shutdown=True)
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    # Still serving, both ports.
    status, _, body = request(port, "GET", "/status.json", ok)
    assert status == 200 and json.loads(body)["counts"]["running"] == 1
    assert put_report(d, reports()[1]) == 200
    assert json.loads(request(port, "GET", "/status.json", ok)[2])["counts"]["running"] == 2


def run_daemon(*args, timeout=10):
    return subprocess.run([str(DAEMON), *args], capture_output=True, text=True, timeout=timeout)


def test_daemon_status_flags():
    bad = run_daemon("--no-token", "--status-port", "70000")
    assert bad.returncode == 2
    assert bad.stderr == ("hvd-rendezvous: invalid --status-port '70000': expected 0..65535 (0: an ephemeral port)"
                          " (see --help)\n")
    lone = run_daemon("--no-token", "--status-address", "127.0.0.2")
    assert lone.returncode == 2
    assert lone.stderr == "hvd-rendezvous: --status-address '127.0.0.2' needs --status-port (see --help)\n"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy_port = taken.getsockname()[1]
        busy = run_daemon("--no-token", "--status-port", str(busy_port))
        assert busy.returncode == 1
        assert busy.stderr.startswith(f"hvd-rendezvous: status port: cannot listen on 127.0.0.1:{busy_port}: bind")
        assert busy.stderr.count("\n") == 1
    assert "--status-port" in run_daemon("--help").stdout


def test_detach_tells_where_the_page_is_on_stderr(tmp_path):
    # The server keeps stderr (for its failures), so it goes to a file rather than a pipe read to its end.
    err = tmp_path / "stderr"
    with open(err, "w") as stderr:
        done = subprocess.run([str(DAEMON), "--detach", "--status-port", "0", "--status-address", "127.0.0.1"],
                              stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=10)
    assert done.returncode == 0, err.read_text()
    pid = int(re.search(r"^export HVD_RENDEZVOUS_PID=(\d+)$", done.stdout, re.M).group(1))
    try:
        assert all(line.startswith("export ") for line in done.stdout.splitlines())  # stdout stays eval-able
        m = re.fullmatch(r"hvd-rendezvous status page on http://127\.0\.0\.1:(\d+)/\n", err.read_text())
        assert m, err.read_text()
        status, _, body = request(int(m.group(1)), "GET", "/status.json")
        assert status == 200 and json.loads(body)["access"] == "full"  # this user
    finally:
        subprocess.run(["kill", str(pid)], check=True)
