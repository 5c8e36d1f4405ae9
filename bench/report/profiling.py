"""Profiling helpers used by bench/compare for missed targets (perf and the runtime timeline).

This VM exposes no hardware counters (`perf stat -e cycles` is "not supported"), so profiles use
the cpu-clock software event and scheduler counts (context switches, migrations), which is what
explains most small-message time here: the cost of sleeping and waking, not of computing.
"""
import json
import os
import shutil
import subprocess
import tempfile


def have_perf():
    return shutil.which("perf") is not None


def perf_record(argv, env=None, timeout_s=300, percent_limit=1.5, lines=28):
    """perf record -g (cpu-clock, children included) of argv; returns the top of a flat report
    sorted by process, object and symbol."""
    if not have_perf():
        return "perf is not installed (Debian: linux-perf)"
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "perf.data")
        rec = subprocess.run(["perf", "record", "-q", "-F", "4000", "-e", "cpu-clock", "-o", data, "--"] + argv,
                             env=_env(env), capture_output=True, text=True, timeout=timeout_s)
        if not os.path.exists(data):
            return f"perf record failed: {(rec.stderr or rec.stdout)[-300:]}"
        rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "comm,dso,sym",
                              "--percent-limit", str(percent_limit)], capture_output=True, text=True, timeout=120)
    body = [l for l in rep.stdout.splitlines() if l.strip() and not l.startswith("#")]
    head = "exit status %d of the profiled command" % rec.returncode
    return "\n".join([head] + body[:lines])


def perf_stat(argv, env=None, timeout_s=300):
    """Software counters of argv and its children: task-clock, context switches, migrations, faults."""
    if not have_perf():
        return "perf is not installed (Debian: linux-perf)"
    r = subprocess.run(["perf", "stat", "-e", "task-clock,context-switches,cpu-migrations,page-faults", "--"] + argv,
                       env=_env(env), capture_output=True, text=True, timeout=timeout_s)
    keep = [l.strip() for l in r.stderr.splitlines()
            if any(w in l for w in ("task-clock", "context-switches", "cpu-migrations", "page-faults", "elapsed"))]
    return "\n".join(keep) if keep else f"perf stat failed: {r.stderr[-300:]}"


def timeline_summary(path, top=15):
    """Totals per activity of a Chrome-trace timeline (HOROVOD_TIMELINE): complete ('X') events and
    begin/end pairs per (pid, name). In Horovod's format every tensor is a pid, and the tensors of one
    fused operation carry the same span: identical (name, start, end) spans are counted once."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError as e:
        return f"no timeline at {path}: {e}"
    if text.startswith("[") and not text.endswith("]"):
        text = text.rstrip(",\n ") + "]"  # Horovod-style timelines are written without the closing ]
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        return f"timeline {path} is not JSON: {e}"
    events = doc.get("traceEvents", doc) if isinstance(doc, dict) else doc
    spans, open_ = set(), {}
    for e in events:
        if not isinstance(e, dict):
            continue
        ph, nm, pid = e.get("ph"), e.get("name"), e.get("pid")
        ts = float(e.get("ts", 0))
        if ph == "X" and float(e.get("dur", 0)) > 0:
            spans.add((nm, ts, ts + float(e["dur"])))
        elif ph == "B":
            open_.setdefault(pid, []).append((nm, ts))
        elif ph == "E" and open_.get(pid):
            bname, start = open_[pid].pop()  # Horovod's E events carry no name: close the latest B
            spans.add((nm or bname, start, ts))
    if not spans:
        return f"timeline {path} has no duration events"
    totals, counts = {}, {}
    for nm, a, b in spans:
        totals[nm] = totals.get(nm, 0.0) + (b - a)
        counts[nm] = counts.get(nm, 0) + 1
    rows = sorted(totals.items(), key=lambda kv: -kv[1])[:top]
    width = max(len(str(k)) for k, _ in rows)
    return "\n".join([f"{'activity':<{width}}  {'total ms':>10}  {'spans':>6}  {'us each':>9}"] +
                     [f"{str(k):<{width}}  {v / 1e3:10.3f}  {counts[k]:6d}  {v / counts[k]:9.1f}" for k, v in rows])


def _env(extra):
    env = dict(os.environ)
    env.update(extra or {})
    return env
