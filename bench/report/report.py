"""Turns one bench/compare run (results.json) into docs/PERFORMANCE.md and the charts in docs/perf/.

    /usr/bin/python3 bench/report/report.py docs/perf/results.json [OUT_DIR]   re-renders a run

finalize(data) adds the summaries (median and min-max of the per-round values), the derived bus
bandwidths, the ratios and the target verdicts to the results; write(data, out) renders them.
Hand-written analysis of missed targets lives in bench/report/findings.md, one '## <target id>'
section each, and is placed under that target's verdict.

Verdicts: MET or MISSED from the medians against the target's limit; NOT MEASURED when a figure is absent;
UNSURE when a verdict compares ours with a figure that is not what that subject does by itself. bench/compare
runs each peer that a one-host verdict rests on once more after the rounds, alone, and records it as
<metric>.alone; guard_peer_figures compares every figure a ratio verdict rests on with its standalone one and
flags a deviation beyond GUARD_LIMIT (1.5x) either way, naming the figure, both values and the ratio. A
flagged MET or MISSED becomes UNSURE (status_by_figures keeps what the figures alone say). A verdict whose
figure has no standalone run says "not cross-checked" and keeps its status.
"""
import functools
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
NP = 2  # ranks in the collective benchmarks
ALONE = ".alone"  # suffix of a metric measured in bench/compare's standalone run of a peer
GUARD_LIMIT = 1.5  # a peer figure further than this from its standalone one (either way) makes a verdict UNSURE

NAMES = {
    "hvdrun": "hvdrun (ours)", "hvd": "hvd (ours)", "hvd_bench": "hvd (ours, bench/allreduce)", "hydra": "MPICH Hydra", "mpich": "MPICH",
    "openmpi": "Open MPI", "openmpi_ob1": "Open MPI, --mca pml ob1", "gloo": "raw Gloo",
    "gloo_bench": "raw Gloo (bench/allreduce)", "torch": "torch.distributed gloo",
    "torchrun": "torchrun (default)", "torchrun_mi01": "torchrun --monitor_interval 0.1",
    "torch_tcpstore": "torch TCPStore",
    "ddp": "torch DDP (gloo)", "ddp_malloc": "torch DDP, hvdrun's malloc settings", "horovod": "Horovod",
    "hvd_tcp": "hvd over TCP (--no-shared-memory)", "hvd_bound": "hvd, --bind-to core",
    "openmpi_yield": "Open MPI, mpi_yield_when_idle 1",
    "hvd_hier": "hvd hierarchical", "hvd_flat": "hvd flat Gloo", "hvd_autotune": "hvd (ours), --autotune",
    "hvd_run": "hvd.run (ours, an hvdrun job per call)", "hvd_tune": "hvd.tune.run (ours)",
    "optuna_hvd_run": "Optuna n_jobs=2 + hvd.run per trial", "executor_dask": "hvd.Executor on Dask (ours)",
    "dask_submit": "Dask client.submit", "driver_floor": "the driver's imports alone",
    "script_plain": "the script with fit() replaced by the plain job",
    "trainer": "hvd.train.Trainer (ours)", "plain": "plain hvdrun job",
}
ALLREDUCE_SUBJECTS = ["hvd", "hvd_bench", "gloo_bench", "gloo", "openmpi", "mpich", "torch"]
LAUNCH_SUBJECTS = ["hvdrun", "hydra", "openmpi", "openmpi_ob1", "gloo", "torchrun", "torchrun_mi01"]
SWEEP_SUBJECTS = ["hvdrun", "hydra", "openmpi"]
TRAIN_SUBJECTS = ["hvd", "hvd_autotune", "ddp", "ddp_malloc", "horovod"]
TRAIN_MODELS = [("resnet18", "ResNet-18"), ("mlp", "wide MLP")]
TRAIN_FIGURES = [("samples_per_s", "samples/s, global (higher is better)", True),
                 ("step_ms", "step, ms", False),
                 ("comm_wait_ms", "waiting on communication per step, ms", False),
                 ("local_step_ms", "the same step on one rank without communication, ms", False)]
SHM_SUBJECTS = ["hvd", "hvd_bound", "hvd_tcp", "openmpi", "mpich"]  # np=2 allreduce and fusion
SHM_COLLECTIVE_SUBJECTS = ["hvd", "openmpi", "mpich"]           # np=2 allgather, broadcast, ...
SHM_NP4_SUBJECTS = ["hvd", "hvd_tcp", "openmpi_yield"]          # np=4 allreduce, oversubscribed
SHM_COLLECTIVES = ["allgather", "broadcast", "alltoall", "reducescatter"]
HIER_SUBJECTS = ["hvd_hier", "hvd_flat"]                         # 2 ssh hosts x 2 ranks allreduce
FUSION_VARIANTS = [("fused", "fused by the runtime (async, then wait)"), ("async", "all async, then wait"),
                   ("one_by_one", "one by one, synchronous"), ("manual_cat", "manual cat + 1 allreduce + copy back"),
                   ("single_400k", "one 400 KiB allreduce (lower bound)")]


def name(subject):
    return NAMES.get(subject, subject)


# ----------------------------------------------------------------------------------------------
# Statistics


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def summarize(rounds):
    vals = [v for v in rounds if v is not None]
    if not vals:
        return None
    return {"median": median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def busbw_gbps(nbytes, t_us):
    return 2 * (NP - 1) / NP * nbytes / (t_us * 1e-6) / 1e9


def finalize(data):
    """Adds derived metrics, summaries, ratios and target verdicts to data (in place). A verdict that rests on a
    peer figure is cross-checked against that peer's standalone run (guard_peer_figures): more than 1.5x off
    either way and it is UNSURE, without a standalone run it says "not cross-checked"."""
    metrics = data["metrics"]
    for key in [k for k in metrics if k.startswith("allreduce.")]:
        _, nbytes, subject = key.split(".", 2)
        if not nbytes.isdigit():
            continue
        metrics[f"busbw.{nbytes}.{subject}"] = {
            "unit": "GB/s",
            "rounds": [None if t is None else busbw_gbps(int(nbytes), t) for t in metrics[key]["rounds"]]}
    data["summary"] = {k: s for k, m in metrics.items() if (s := summarize(m["rounds"]))}
    data["targets"] = evaluate_targets(data)
    return data


def get(data, key):
    return data["summary"].get(key)


def why_absent(data, *subjects):
    for s in subjects:
        section = (s.split(":")[0] if s in ("rendezvous", "ssh", "hier")
                   or s.startswith(("train", "elastic", "executor")) else None)
        section = "shm" if s.startswith("shm") else section
        if section and section not in data.get("sections", [section]):
            return f"section `{section}` not selected in this run"
        st = data["status"].get(s)
        if st and st["status"] != "ok":
            return f"{s}: {st['status']} ({st['reason']})"
    return "not measured in this run"


def new_target(data, tid, issue, text, limit, unit, absent, *figures):
    """A target's record; when one of `figures` is missing, already NOT MEASURED, with why (from `absent`)."""
    t = {"id": tid, "issue": issue, "target": text, "limit": limit, "unit": unit}
    if not all(figures):
        t.update(status="NOT MEASURED", reason=why_absent(data, *absent))
    return t


def ratio_target(data, tid, issue, text, ours_key, peer_key, limit, higher_better, unit, absent):
    o, p = get(data, ours_key), get(data, peer_key)
    t = new_target(data, tid, issue, text, limit, unit, absent, o, p)
    if "status" in t:
        return t
    r = o["median"] / p["median"]
    met = r >= limit if higher_better else r <= limit
    t.update(status="MET" if met else "MISSED", ours=o, peer=p, ratio=r, peer_keys=[peer_key],
             measured=f"{cell(o)} vs {cell(p)} {unit} = {fmt_ratio(r)}")
    return t


def absolute_target(data, tid, issue, text, key, limit, higher_better, unit, absent):
    v = get(data, key)
    t = new_target(data, tid, issue, text, limit, unit, absent, v)
    if "status" in t:
        return t
    met = v["median"] >= limit if higher_better else v["median"] <= limit
    t.update(status="MET" if met else "MISSED", ours=v,
             measured=f"{fmt(v['median'])} {unit} [{fmt(v['min'])}-{fmt(v['max'])}]")
    return t


def faster_peer_target(data, tid, text, ours_key, peer_keys, limit, unit, absent):
    """ratio_target against whichever of peer_keys has the lower median (a latency: lower is better)."""
    measured = [k for k in peer_keys if get(data, k)]
    peer = min(measured, key=lambda k: get(data, k)["median"]) if measured else peer_keys[0]
    t = ratio_target(data, tid, None, text, ours_key, peer, limit, False, unit, absent)
    if t.get("measured"):
        t["measured"] += f" (the faster MPI here: {name(peer.rsplit('.', 1)[1])})"
        t["peer_keys"] = measured  # which peer is the faster rests on every one of them
    return t


def guard_peer_figures(data, t):
    """Cross-checks the figures a ratio verdict rests on (t["peer_keys"]) against their standalone runs
    (<key>.alone, recorded by bench/compare after the rounds). Sets t["peer_check"], the text shown next to the
    verdict: per figure "FLAGGED" (figure and standalone figure further apart than GUARD_LIMIT, either way) or
    "consistent", each with both values and the ratio in-the-rounds ÷ alone, and "not cross-checked" naming the
    figures without a standalone run. A flagged MET or MISSED becomes UNSURE; t["status_by_figures"] keeps the
    status the figures alone give. Verdicts without a peer figure, or not measured, are left as they are."""
    if t["status"] not in ("MET", "MISSED") or not t.get("peer_keys"):
        return t
    notes, unchecked, flagged = [], [], False
    for key in t["peer_keys"]:
        fig, alone = get(data, key), get(data, key + ALONE)
        if not fig:
            continue
        if not alone:
            unchecked.append(f"`{key}`")
            continue
        r = fig["median"] / alone["median"]
        off = r > GUARD_LIMIT or r < 1 / GUARD_LIMIT
        flagged |= off
        who = name(key.rsplit(".", 1)[1])
        notes.append(f"{'FLAGGED' if off else 'consistent'}: {who} `{key}` {fmt(fig['median'])} "
                     f"{t['unit']} in the rounds vs {fmt(alone['median'])} {t['unit']} run alone = {fmt_ratio(r)} "
                     f"({'beyond' if off else 'within'} {GUARD_LIMIT}x)")
    if unchecked:
        notes.append("not cross-checked: no standalone run of " + ", ".join(unchecked))
    t["peer_check"] = "; ".join(notes)
    t["peer_flagged"] = flagged
    if flagged:
        t["status_by_figures"], t["status"] = t["status"], "UNSURE"
    return t


def shm_targets(data):
    """Targets of the shm section (libhvd's shared-memory path, bench/compare section `shm`)."""
    absent = ["shm:hvd", "hvdrun", "openmpi"]
    ts = [ratio_target(data, f"shm-allreduce-{label}", None, f"np=2 on one host, {size_label(n)} allreduce "
                       f"(shared memory) latency <= {limit}x Open MPI", f"shm.np2.allreduce.{n}.hvd",
                       f"shm.np2.allreduce.{n}.openmpi", limit, False, "us", absent)
          for n, label, limit in ((4 << 10, "4k", 1.0), (1 << 20, "1m", 1.0), (64 << 20, "64m", 0.8))]
    ts.append(absolute_target(data, "shm-fusion-100x4k", None, "np=2 on one host, 100 x 4 KiB allreduces submitted "
                              "asynchronously then waited (shared memory): <= 0.2 ms", "shm.np2.fusion.fused.hvd",
                              200.0, False, "us", ["shm:hvd", "hvdrun"]))
    if get(data, "shm.np2.fusion.fused.hvd_bound"):  # the same batch with each rank on a core of its own
        ts[-1]["cross_check"] = f"{name('hvd_bound')}: {cell(get(data, 'shm.np2.fusion.fused.hvd_bound'))} us"
    for op in SHM_COLLECTIVES:
        for n, label in ((4 << 10, "4k"), (16 << 20, "16m")):
            ts.append(faster_peer_target(data, f"shm-{op}-{label}", f"np=2 on one host, {op} of {size_label(n)} per "
                                         "rank (shared memory) latency <= 1.0x the faster of Open MPI and MPICH",
                                         f"shm.np2.{op}.{n}.hvd", [f"shm.np2.{op}.{n}.openmpi", f"shm.np2.{op}.{n}.mpich"],
                                         1.0, "us", ["shm_collectives:hvd", "hvdrun", "collectives:openmpi",
                                                     "collectives:mpich", "openmpi", "mpich"]))
    np4 = data["params"].get("shm_np4", 4)
    for n, label in ((4 << 10, "4k"), (1 << 20, "1m"), (16 << 20, "16m")):
        ts.append(ratio_target(data, f"shm-np{np4}-{label}", None, f"np={np4} on {data['machine']['nproc']} cores "
                               f"(oversubscribed), {size_label(n)} allreduce: shared memory no slower than TCP "
                               "(<= 1.0x hvd --no-shared-memory)", f"shm.np{np4}.allreduce.{n}.hvd",
                               f"shm.np{np4}.allreduce.{n}.hvd_tcp", 1.0, False, "us",
                               ["shm_np4:hvd", "shm_np4:hvd_tcp", "hvdrun"]))
    return ts


def collective_pair(data):
    """(ours, raw Gloo) measured the same way: bench/allreduce's own pair when it has both, else
    the harness pair (bench/peers/hvd_allreduce.c vs bench/peers/gloo_allreduce.cc)."""
    has = lambda s: any(k.startswith("allreduce.") and k.endswith("." + s) for k in data["summary"])
    if has("hvd_bench") and has("gloo_bench"):
        return "hvd_bench", "gloo_bench"
    if has("hvd_bench") and not has("hvd"):
        return "hvd_bench", "gloo"
    return "hvd", "gloo"


def evaluate_targets(data):
    o, g = collective_pair(data)
    fused = next((f"fusion.{v}.{s}" for s in (o, "hvd", "hvd_bench") for v in ("fused", "async")
                  if get(data, f"fusion.{v}.{s}")), f"fusion.fused.{o}")
    ts = [
        ratio_target(data, "launch-vs-hydra", 3, "hvdrun -np 2 init+barrier+shutdown worker: wall time <= 1.0x "
                     "mpiexec.hydra -np 2 MPI_Init/Barrier/Finalize", "launch.np2_init.hvdrun",
                     "launch.np2_init.hydra", 1.0, False, "ms", ["hvdrun", "launch:hvdrun", "mpich"]),
        absolute_target(data, "launcher-rss", 3, "launcher peak RSS at -np 64 /bin/true <= 15 MiB",
                        "rss.true_np64.hvdrun", 15.0, False, "MiB", ["hvdrun"]),
        absolute_target(data, "rendezvous-load", 4, "rendezvous load: >= 50,000 requests/s",
                        "rendezvous.load_rps.hvd", 50000, True, "req/s", ["rendezvous"]),
        absolute_target(data, "rendezvous-scale", 4, "rendezvous scale: 1024 simulated workers (full mesh) "
                        "in <= 5 s", "rendezvous.scale.1024.seconds", 5.0, False, "s", ["rendezvous"]),
        absolute_target(data, "rendezvous-scale-4096", None, "rendezvous scale: 4096 simulated workers (PUT, two "
                        "sliced multi-key fetches, DELETE; ports shape, 8 to a host) in <= 3 s", "rendezvous.scale.4096.seconds", 3.0, False, "s",
                        ["rendezvous"]),
        absolute_target(data, "rendezvous-scale-4096-rss", None, "rendezvous scale: server peak RSS with 4096 "
                        "simulated workers <= 256 MiB", "rendezvous.scale.4096.rss", 256.0, False, "MiB",
                        ["rendezvous"]),
        absolute_target(data, "rendezvous-scale-16384", None, "rendezvous scale: 16384 simulated workers in <= 20 s",
                        "rendezvous.scale.16384.seconds", 20.0, False, "s", ["rendezvous"]),
        ratio_target(data, "busbw-64m", 5, "64 MiB allreduce bus bandwidth >= 1.0x raw Gloo ring",
                     f"busbw.{64 << 20}.{o}", f"busbw.{64 << 20}.{g}", 1.0, True, "GB/s",
                     ["allreduce:" + o, "hvdrun", "gloo"]),
        ratio_target(data, "latency-4k", 5, "4 KiB synchronous allreduce latency <= 1.5x raw Gloo",
                     f"allreduce.4096.{o}", f"allreduce.4096.{g}", 1.5, False, "us",
                     ["allreduce:" + o, "hvdrun", "gloo"]),
        absolute_target(data, "fusion-100x4k", 5, "100 x 4 KiB submitted asynchronously then waited: <= 1.0 ms",
                        fused, 1000.0, False, "us", ["allreduce:" + o, "hvdrun"]),
        ratio_target(data, "ssh-32x8", 6, "32 ranks on 8 ssh hosts, start to all joined: <= 2x one "
                     "`ssh host true` (OpenSSH); ours = hvdrun -np 32 of examples/hello_cpp, from hvdrun's start "
                     "until its rendezvous server has seen the last rank join (hvdrun --verbose)",
                     "ssh.hvdrun_all_joined", "ssh.openssh_true", 2.0, False, "ms", ["ssh"]),
        ratio_target(data, "train-resnet18-vs-ddp", None, "ResNet-18 (3x64x64, batch 16 per rank) data-parallel "
                     "training at np=2, hvd.torch DistributedOptimizer: samples/s >= 1.0x torch DDP (gloo)",
                     "train.resnet18.samples_per_s.hvd", "train.resnet18.samples_per_s.ddp", 1.0, True, "samples/s",
                     ["train:hvd", "hvdrun", "torch"]),
        ratio_target(data, "train-mlp-vs-ddp", None, "wide MLP (gradient exchange bound) data-parallel training at "
                     "np=2, hvd.torch DistributedOptimizer: samples/s >= 1.0x torch DDP (gloo)",
                     "train.mlp.samples_per_s.hvd", "train.mlp.samples_per_s.ddp", 1.0, True, "samples/s",
                     ["train:hvd", "hvdrun", "torch"]),
        ratio_target(data, "autotune-resnet18", None, "ResNet-18 training at np=2 under `hvdrun --autotune`, timed "
                     "after the tuner settled: samples/s >= 1.0x the same job with the defaults",
                     "train.resnet18.samples_per_s.hvd_autotune", "train.resnet18.samples_per_s.hvd", 1.0, True,
                     "samples/s", ["train:hvd_autotune", "train:hvd", "hvdrun"]),
        ratio_target(data, "autotune-mlp", None, "wide MLP training at np=2 under `hvdrun --autotune`, timed after "
                     "the tuner settled: samples/s >= 1.0x the same job with the defaults",
                     "train.mlp.samples_per_s.hvd_autotune", "train.mlp.samples_per_s.hvd", 1.0, True,
                     "samples/s", ["train:hvd_autotune", "train:hvd", "hvdrun"]),
        absolute_target(data, "pyfusion-100x4k", None, "100 x 4 KiB allreduce_async_ from Python (hvd.torch), then "
                        "synchronize each: <= 1.5 ms", "pyfusion.total.hvd", 1500.0, False, "us",
                        ["train:hvd", "hvdrun"]),
    ]
    ts += elastic_targets(data)
    ts += shm_targets(data)
    ts += executor_targets(data)
    ts += tune_targets(data)
    for t in ts:
        guard_peer_figures(data, t)
    # The same targets read from the other measurement of ours, as a cross-check (not the verdict).
    alt = {"hvd_bench": ("hvd", "gloo"), "hvd": ("hvd_bench", "gloo_bench")}[o]
    checks = {"busbw-64m": (f"busbw.{64 << 20}.{alt[0]}", f"busbw.{64 << 20}.{alt[1]}", "GB/s"),
              "latency-4k": (f"allreduce.4096.{alt[0]}", f"allreduce.4096.{alt[1]}", "us")}
    for t in ts:
        if t["id"] in checks:
            a, b, unit = checks[t["id"]]
            if get(data, a) and get(data, b):
                r = get(data, a)["median"] / get(data, b)["median"]
                t["cross_check"] = f"{name(alt[0])} vs {name(alt[1])}: {cell(get(data, a))} vs {cell(get(data, b))} {unit} = {fmt_ratio(r)}"
        if t["id"] == "fusion-100x4k" and get(data, f"fusion.fused.{alt[0]}"):
            t["cross_check"] = f"{name(alt[0])}: {cell(get(data, f'fusion.fused.{alt[0]}'))} us"
        if t["id"] == "pyfusion-100x4k" and get(data, "pyfusion.total.horovod"):
            h = get(data, "pyfusion.total.horovod")
            t["cross_check"] = (f"Horovod's Python layer, same run: {cell(h)} us"
                                + (f" = {fmt_ratio(t['ours']['median'] / h['median'])}" if t.get("ours") else ""))
        if t["id"].startswith("train-") and t.get("ours"):
            model = t["id"].split("-")[1]
            checks = []
            d = get(data, f"train.{model}.samples_per_s.ddp_malloc")
            if d:
                checks.append(f"like for like, DDP given hvdrun's malloc settings: {cell(d)} samples/s = "
                              f"{fmt_ratio(t['ours']['median'] / d['median'])}")
            h = get(data, f"train.{model}.samples_per_s.horovod")
            if h:
                checks.append(f"against Horovod, same run: {cell(h)} samples/s = "
                              f"{fmt_ratio(t['ours']['median'] / h['median'])}")
            if checks:
                t["cross_check"] = "; ".join(checks)
    return ts


# ----------------------------------------------------------------------------------------------
# Formatting


def fmt(v):
    if v is None:
        return "-"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def cell(s):
    if not s:
        return "-"
    if s["n"] == 1:
        return f"{fmt(s['median'])} (1 round)"
    return f"{fmt(s['median'])} [{fmt(s['min'])}-{fmt(s['max'])}]"


def size_label(nbytes):
    nbytes = int(nbytes)
    if nbytes >= 1 << 20:
        return f"{nbytes >> 20} MiB"
    return f"{nbytes >> 10} KiB"


def subject_cell(data, key, subject, owners, failed_key=None):
    """A table cell: the figure, or why it is absent (missing peer, component not built, a failed job:
    any failure of the subject, or exactly failed_key where given)."""
    s = get(data, key)
    if s:
        return cell(s)
    for o in owners:
        st = data["status"].get(o)
        if st and st["status"] != "ok":
            return st["status"]
    failed = (lambda k: k == failed_key) if failed_key else (lambda k: k.endswith("." + subject))
    return "failed" if any(failed(f["key"]) for f in data["failures"]) else "-"


def owners_of(subject):
    return {"hvd": ["allreduce:hvd", "hvdrun"], "hvdrun": ["launch:hvdrun", "hvdrun"],
            "hvd_bench": ["allreduce:hvd_bench"], "gloo_bench": ["allreduce:hvd_bench"], "hydra": ["mpich"], "openmpi_ob1": ["openmpi"],
            "torchrun": ["torch"], "torchrun_mi01": ["torch"]}.get(subject, [subject])


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c).replace("|", "/") for c in r) + " |" for r in rows]
    return "\n".join(out)


def ratio_str(o, p, higher_better):
    if not o or not p:
        return "-"
    r = o["median"] / p["median"]
    overlap = o["n"] > 1 and p["n"] > 1 and not (o["max"] < p["min"] or p["max"] < o["min"])
    word = ("faster" if r < 1 else "slower") if not higher_better else ("higher" if r > 1 else "lower")
    return f"{fmt_ratio(r)} ({word}{', ranges overlap' if overlap else ''})"


def fmt_ratio(r):
    return f"{r:.0f}x" if r >= 10 else (f"{r:.2f}x" if r >= 0.1 else f"{r:.3f}x")


# ----------------------------------------------------------------------------------------------
# Charts (gnuplot, pngcairo when present)


def gnuplot_terminal():
    try:
        out = subprocess.run(["gnuplot", "-e", "set terminal"], capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    text = out.stdout + out.stderr
    return "pngcairo" if "pngcairo" in text else ("png" if " png " in text else None)


def plot(script, data_rows, columns, png, extra):
    """Writes a data file (x, then median/min/max per column; '-' = missing) and runs a script."""
    term = gnuplot_terminal()
    if not term:
        return "gnuplot with a png terminal is missing (Debian: gnuplot-nox)"
    with tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False) as f:
        f.write("x " + " ".join(f'"{c}" "{c}_min" "{c}_max"' for c in columns) + "\n")
        for x, vals in data_rows:
            f.write(f"{x} " + " ".join("- - -" if v is None else f"{v['median']} {v['min']} {v['max']}"
                                       for v in vals) + "\n")
        dat = f.name
    xs = [x for x, _ in data_rows]
    cmd = ["gnuplot", "-e", f"term='{term}'; datafile='{dat}'; outfile='{png}'; ncols={len(columns)}; "
           f"xmin={min(xs)}.0; xmax={max(xs)}.0; {extra}",
           os.path.join(HERE, script)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    os.unlink(dat)
    return None if r.returncode == 0 else f"gnuplot failed: {r.stderr.strip()[-300:]}"


def charts(data, perf_dir):
    msgs = {}
    sizes = sorted({int(k.split(".")[1]) for k in data["summary"] if k.startswith("busbw.")})
    subs = [s for s in ALLREDUCE_SUBJECTS if any(get(data, f"busbw.{n}.{s}") for n in sizes)]
    xt = "set xtics (" + ", ".join(f'"{size_label(n)}" {n}' for n in sizes) + ")"
    if subs:
        rows = [(n, [get(data, f"busbw.{n}.{s}") for s in subs]) for n in sizes]
        ceil = get(data, "ceiling.tcp_bidir_1m")
        extra = xt + (f"; ceiling={ceil['median']}" if ceil else "; ceiling=0")
        msgs["busbw.png"] = plot("busbw.gp", rows, [name(s) for s in subs], os.path.join(perf_dir, "busbw.png"), extra)
        rows = [(n, [get(data, f"allreduce.{n}.{s}") for s in subs]) for n in sizes]
        msgs["latency.png"] = plot("latency.gp", rows, [name(s) for s in subs],
                                   os.path.join(perf_dir, "latency.png"), xt)
    nps = sorted({int(k.split(".")[1][len("true_np"):]) for k in data["summary"]
                  if k.startswith("launch.true_np")} - {64})
    subs = [s for s in SWEEP_SUBJECTS if any(get(data, f"launch.true_np{n}.{s}") for n in nps)]
    if subs:
        rows = [(n, [get(data, f"launch.true_np{n}.{s}") for s in subs]) for n in nps]
        xt = "set xtics (" + ", ".join(f'"{n}" {n}' for n in nps) + ")"
        msgs["launch_np.png"] = plot("launch_np.gp", rows, [name(s) for s in subs],
                                     os.path.join(perf_dir, "launch_np.png"), xt)
    return {k: v for k, v in msgs.items() if v}


# ----------------------------------------------------------------------------------------------
# Markdown


def findings():
    """Sections of bench/report/findings.md keyed by target id."""
    path = os.path.join(HERE, "findings.md")
    out, cur = {}, None
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            if line.startswith("## "):
                cur = line[3:].strip()
                out[cur] = []
            elif cur:
                out[cur].append(line.rstrip("\n"))
    return {k: "\n".join(v).strip() for k, v in out.items()}


def write(data, out_dir):
    perf_dir = os.path.join(out_dir, "perf")
    os.makedirs(perf_dir, exist_ok=True)
    chart_errors = charts(data, perf_dir)
    md = render(data, chart_errors)
    path = os.path.join(out_dir, "PERFORMANCE.md")
    with open(path, "w") as f:
        f.write(md)
    return path


def render(data, chart_errors):
    L = []
    m, v, load = data["machine"], data["versions"], data["load"]
    L += ["# hvdrun performance against its peers", "",
          "Generated by `bench/compare` (do not edit by hand: edit `bench/report/` and re-run). "
          "Every figure is the **median of the per-round medians, [min-max of the round medians]** "
          f"over {data['rounds']} rounds of one run; ratios compare figures from that same run.", "",
          "## How to reproduce", "",
          "```",
          "bench/compare            # full run, 3 rounds, ~15-25 min on 2 cores; writes this file,",
          "                         # docs/perf/*.png and docs/perf/results.json",
          "bench/compare --quick    # smoke run, 2 short rounds, ~3-5 min",
          "bench/compare --build-dir build --no-build --sections launch,allreduce --rounds 5",
          "/usr/bin/python3 bench/report/report.py docs/perf/results.json   # re-render this page",
          "```", "",
          "Peers needed: `packaging/install-deps.sh --bench` (openmpi-bin, mpich, python3-torch, gnuplot-nox, "
          "linux-perf). A peer that is not installed shows as *missing*; a component benchmark that is not "
          "in the tree or does not work yet shows as *not built*, with the reason below.", "",
          "## This run", "",
          f"- Date: {data['date']}; command: `{data['command']}`; mode: {data['mode']}, {data['rounds']} rounds, "
          f"{data['duration_s'] / 60:.1f} min.",
          f"- Load average before: {' / '.join(str(x) for x in load['before']['loadavg'])}, CPU busy "
          f"{load['before']['cpu_busy']:.0%} in the second before the run; after: "
          f"{' / '.join(str(x) for x in load['after']['loadavg'])}. Per round (load1, CPU busy just before it"
          + ("; during it: CPUs busy with other processes, hypervisor steal"
             if all("during" in s for s in load["rounds"]) else "") + "): "
          + ", ".join(f"{s['loadavg'][0]} / {s['cpu_busy']:.0%}"
                      + (f" ({s['during']['others']:.0%}, {s['during']['steal']:.0%})" if "during" in s else "")
                      for s in load["rounds"]) + ".",
          ]
    if data.get("shared_machine_note"):
        L.append(f"- {data['shared_machine_note']}")
    for n in data["notes"]:
        L.append(f"- Note: {n}")
    L += ["", "## Machine and versions", "",
          table(["", ""], [["CPU", f"{m['nproc']} x {m['cpu']}"], ["Memory", m["memory"]], ["Kernel", m["kernel"]],
                           ["OS", m["os"]]] + [[k, f"`{x}`" if x else "-"] for k, x in v.items()]), ""]

    # Targets
    L += ["## Targets", "",
          table(["target", "what it measures", "measured (ours vs peer)", "verdict",
                 "peer figure vs the peer run alone"],
                [[f"`{t['id']}`", t["target"], (t.get("measured") or t.get("reason", "-"))
                  + (f"; cross-check, {t['cross_check']}" if t.get("cross_check") else ""), verdict_cell(t),
                  t.get("peer_check") or "-"]
                 for t in data["targets"]]), "",
          "Allreduce verdicts use `bench/allreduce` (libhvd and raw Gloo interleaved in the same processes) "
          "when it ran; the cross-check is the same figure from the harness programs in `bench/peers/` "
          "(each started as its own job, like the MPI and torch peers).", ""]
    L += guard_md(data) + subject_status(data) + ceilings_md(data)
    L += launch_md(data, chart_errors) + allreduce_md(data, chart_errors)
    for section_md in (fusion_md, shm_md, rendezvous_md, ssh_md, hier_md, train_md, elastic_md, executor_md, tune_md,
                       missed_md, failures_md, method_md):
        L += section_md(data)
    return "\n".join(L) + "\n"


def verdict_cell(t):
    if t["status"] == "UNSURE":
        return f"**UNSURE** ({t['status_by_figures']} by the figures)"
    return f"**{t['status']}**"


def guard_md(data):
    """How the verdicts are reached, and every standalone peer figure of the run next to its figure in the rounds."""
    L = ["How to read the verdicts: **MET** / **MISSED** compare the medians with the target's limit; "
         "**NOT MEASURED** means a figure is absent (why in the measured column). A verdict that compares ours with "
         "a peer rests on that peer's figure from the rounds, where it ran back to back with the other subjects; "
         "after the rounds `bench/compare` runs each such peer of the one-host sections again alone (same program, "
         "launcher and sizes, fewer iterations, nothing else run by the harness meanwhile). When the figure in the "
         f"rounds and the standalone one differ by more than {GUARD_LIMIT}x either way, the last column flags it "
         "(which figure, both values, the ratio in the rounds ÷ alone) and the verdict is **UNSURE**, be the "
         "figures' reading MET or MISSED: the peer did not do in the rounds what it does by itself, so the ratio "
         "says little. \"not cross-checked\" marks a figure without a standalone run (peers of the other sections, "
         "raw Gloo inside `bench/allreduce`, figures of ours); such a verdict keeps its status.", ""]
    # busbw.* is derived from allreduce.* (the same jobs); sizes in numeric order
    keys = sorted((k[:-len(ALONE)] for k in data["summary"] if k.endswith(ALONE) and not k.startswith("busbw.")),
                  key=lambda k: [int(x) if x.isdigit() else x for x in k.split(".")])
    if not keys:
        return L
    rows = []
    for k in keys:
        fig, alone = get(data, k), get(data, k + ALONE)
        r = fig["median"] / alone["median"] if fig else None
        off = r is not None and (r > GUARD_LIMIT or r < 1 / GUARD_LIMIT)
        rows.append([f"`{k}`", cell(fig), cell(alone), fmt_ratio(r) if r else "-",
                     ("**FLAGGED**" if off else "consistent") if r else "-"])
    alone = data["params"].get("alone", {})
    return L + ["Peers run alone after the rounds "
                f"({alone.get('runs', '-')} job(s) of each program; figures in the metric's unit):", "",
                table(["figure", "in the rounds", "run alone", "rounds ÷ alone", f"within {GUARD_LIMIT}x"], rows), ""]


def subject_status(data):
    rows = [[name(k) if ":" not in k else k, st["status"], st["reason"] or "-"]
            for k, st in sorted(data["status"].items())]
    return ["## What was measured", "", table(["subject", "status", "reason"], rows), ""]


def ceilings_md(data):
    rows = [
        ("memcpy 64 MiB, 1 thread", "ceiling.memcpy_64m", "GB/s"),
        ("`a[i] += b[i]` float, 64 MiB (the reduction)", "ceiling.reduce_64m", "GB/s"),
        ("TCP loopback one-way, 1 MiB sends", "ceiling.tcp_oneway_1m", "GB/s"),
        ("TCP loopback one-way, 64 KiB sends", "ceiling.tcp_oneway_64k", "GB/s"),
        ("TCP loopback both directions at once, 1 MiB sends, per direction", "ceiling.tcp_bidir_1m", "GB/s"),
        ("4 KiB TCP ping-pong round trip, blocking", "ceiling.tcp_pingpong_4k", "us"),
        ("shared-memory allreduce np=2 (bench/ceilings/shm_allreduce.cc, chunked, polls then futex), 4 KiB",
         "ceiling.shm_allreduce_4k", "us"),
        ("the same, 1 MiB", "ceiling.shm_allreduce_1m", "us"),
        ("the same, 16 MiB", "ceiling.shm_allreduce_16m", "us"),
        ("the same, 64 MiB", "ceiling.shm_allreduce_64m", "us"),
        ("the same at 4 KiB, futex only (no polling)", "ceiling.shm_allreduce_4k_sleep", "us"),
        ("shared-memory broadcast np=2, 4 KiB (bench/ceilings/shm_broadcast.cc), per operation in a loop: "
         "MPICH's way, a ring of cells the root fills and returns", "ceiling.shm_broadcast_4k_cells", "us"),
        ("the same, libhvd's data round alone (root and reader wait for each other)",
         "ceiling.shm_broadcast_4k_round", "us"),
        ("the same, an announcement round, then the data round (libhvd's agreed operation)",
         "ceiling.shm_broadcast_4k_agreed_round", "us"),
        ("the same, an announcement round, then a root that returns without waiting for the reader",
         "ceiling.shm_broadcast_4k_agreed_eager", "us"),
        ("the same, the root's data written before it announces: one two-way exchange per operation",
         "ceiling.shm_broadcast_4k_agreed_prewritten", "us"),
    ]
    L = ["## Physical ceilings (same run)", "",
         table(["measure", "value", "unit"], [[a, cell(get(data, k)), u] for a, k, u in rows]), "",
         "How to read them: a 2-rank ring allreduce of B bytes sends and receives B/2 bytes in each direction "
         "at once and reduces B/2 floats, so its bus bandwidth cannot exceed the per-direction TCP figure "
         "(and not the reduce figure either). One blocking ping-pong is the floor of a small allreduce "
         "over TCP; MPI beats it because it busy-polls shared memory instead of sleeping in the kernel. The "
         "shared-memory rows are a probe of what an intra-host path could reach (libhvd's own, runtime/shm, is "
         "measured in the shared-memory section below): two "
         "processes on one memfd, each copying its input into the segment chunk by chunk and adding both "
         "chunks into its output, waiting for the other by polling 2000 times and then on a futex; "
         "the last allreduce row waits on the futex only. The broadcast rows are the floor that each way of "
         "synchronising a 4 KiB broadcast puts under it, with none of a runtime's submission and completion: "
         "any protocol in which both ranks agree on every operation pays at least one two-way exchange of cache "
         "lines per operation (the last row), where MPICH's cells pay none while the ring has room.", ""]
    return L


def launch_md(data, chart_errors):
    h = get(data, "launch.np2_init.hvdrun")
    rows = []
    for s in LAUNCH_SUBJECTS:
        k = f"launch.np2_init.{s}"
        rows.append([name(s), subject_cell(data, k, s, owners_of(s)),
                     ratio_str(h, get(data, k), False) if s != "hvdrun" else "-"])
    L = ["## Launch", "",
         "Whole-process wall time of a 2-process job whose workers initialise, run one barrier and exit "
         "(hvdrun: `hvdrun -np 2 -H localhost:2 W` with a C++ init+barrier+shutdown worker; MPI: "
         "`MPI_Init/MPI_Barrier/MPI_Finalize`; raw Gloo: 2 processes from `sh`, FileStore, connectFullMesh, "
         "barrier; torch: `torchrun --nproc_per_node 2` of init_process_group(gloo)+barrier). "
         f"{data['params']['launch_runs']} runs per round (torchrun {data['params']['torch_launch_runs']}), "
         "interleaved run by run.", "",
         table(["launcher", "wall ms", "hvdrun ÷ this"], rows), ""]
    nps = sorted({int(k.split(".")[1][len("true_np"):]) for k in data["summary"] if k.startswith("launch.true_np")})
    if nps:
        L += ["Launch time against the number of processes, `/bin/true` workers (launcher cost alone):", "",
              table(["np"] + [name(s) for s in SWEEP_SUBJECTS],
                    [[n] + [subject_cell(data, f"launch.true_np{n}.{s}", s, owners_of(s)) for s in SWEEP_SUBJECTS]
                     for n in nps]), ""]
    L += chart_md(chart_errors, "launch_np.png", "launch time vs np")
    L += ["Launcher peak RSS at `-np 64 /bin/true` (GNU time's `%M`: the kernel's `ru_maxrss` of the launcher "
          "and the descendants it reaped; for `/bin/true` workers the largest of these is the launcher itself, "
          "or for Hydra its `hydra_pmi_proxy`):", "",
          table(["launcher", "peak RSS MiB"],
                [[name(s), subject_cell(data, f"rss.true_np64.{s}", s, owners_of(s))] for s in SWEEP_SUBJECTS]), ""]
    return L


def chart_md(chart_errors, png, alt):
    if png in chart_errors:
        return [f"*Chart {png} not drawn: {chart_errors[png]}*", ""]
    return [f"![{alt}](perf/{png})", ""]


def allreduce_md(data, chart_errors):
    sizes = sorted({int(k.split(".")[1]) for k in data["summary"] if k.startswith("allreduce.")
                    and k.split(".")[1].isdigit()})
    if not sizes:
        return ["## Allreduce", "", "No allreduce figures in this run.", ""]
    subs = [s for s in ALLREDUCE_SUBJECTS if s == "hvd" or s in data["status"]
            or any(get(data, f"allreduce.{n}.{s}") for n in sizes)]
    it = data["params"]["allreduce_iters"]
    L = ["## Allreduce, float32 sum, np=2 on localhost", "",
         "Each operation is timed on both ranks and the slower rank's time taken per iteration (what a "
         "synchronous caller waits for); a round's figure is the median over its iterations "
         "(iterations per size: " + ", ".join(f"{size_label(k)} {v}" for k, v in sorted(it.items(), key=lambda x: int(x[0])))
         + "; 10 % warm-up). The result is checked before timing.", "",
         "Latency, µs:", "",
         table(["size"] + [name(s) for s in subs],
               [[size_label(n)] + [subject_cell(data, f"allreduce.{n}.{s}", s, owners_of(s)) for s in subs]
                for n in sizes]), "",
         "Bus bandwidth busbw = 2(n-1)/n · bytes / t, GB/s:", "",
         table(["size"] + [name(s) for s in subs],
               [[size_label(n)] + [subject_cell(data, f"busbw.{n}.{s}", s, owners_of(s)) for s in subs]
                for n in sizes]), ""]
    L += chart_md(chart_errors, "busbw.png", "bus bandwidth vs message size")
    L += chart_md(chart_errors, "latency.png", "allreduce latency vs message size")
    o, _ = collective_pair(data)
    peers = [s for s in subs if s not in ("hvd", "hvd_bench")]
    if not any(get(data, f"allreduce.{n}.{o}") for n in sizes):
        return L + ["Ours against each peer: no figures for hvd in this run ("
                    + why_absent(data, "allreduce:" + o, "hvdrun") + ").", ""]
    L += [f"{name(o)} against each peer (latency ratio ours ÷ peer; below 1 = we are faster):", "",
          table(["size"] + [name(s) for s in peers],
                [[size_label(n)] + [ratio_str(get(data, f"allreduce.{n}.{o}"), get(data, f"allreduce.{n}.{s}"), False)
                                    for s in peers] for n in sizes]), ""]
    return L


def fusion_md(data):
    subs = [s for s in ALLREDUCE_SUBJECTS if s == "hvd" or s in data["status"]
            or any(k.startswith("fusion.") and k.endswith("." + s) for k in data["summary"])]
    rows = []
    for v, label in FUSION_VARIANTS:
        r = [label] + [cell(get(data, f"fusion.{v}.{s}")) for s in subs]
        if v == "fused" and r[1] == "-" and subs[0] == "hvd":
            r[1] = subject_cell(data, "fusion.fused.hvd", "hvd", owners_of("hvd"))
        if any(c != "-" for c in r[1:]):
            rows.append(r)
    L = ["## Fusion: 100 x 4 KiB allreduces", "",
         f"Time for the whole batch of 100, µs ({data['params']['fusion_reps']} batches per round, slower rank). "
         "A dash means that peer has no such mode (Gloo has no asynchronous collectives; MPI has no fusion).", ""]
    if rows:
        L += [table(["mode"] + [name(s) for s in subs], rows), ""]
    else:
        L += ["No fusion figures in this run.", ""]
    return L


def shm_md(data):
    L = ["## Shared memory within a host", ""]
    if not any(k.startswith("shm.") for k in data["summary"]):
        return L + (section_absent(data, "shm", "shm:hvd") or ["No shared-memory figures in this run.", ""])
    np4 = data["params"].get("shm_np4", 4)
    # Runs before the np=2 shm figures had counts of their own took the allreduce section's.
    it = data["params"].get("shm_np2_iters", data["params"]["allreduce_iters"])
    owners = {"hvd": ["shm:hvd", "hvdrun"], "hvd_bound": ["shm:hvd_bound", "hvdrun"],
              "hvd_tcp": ["shm:hvd_tcp", "hvdrun"], "openmpi": ["openmpi"], "mpich": ["mpich"]}

    def row(label, prefix, what, keys, subjects, owners, ours="hvd"):
        """keys: subject -> metric key; figures, then ratios ours ÷ each other subject."""
        vals = [subject_cell(data, keys[s], s, owners[s], failed_key=f"{prefix}.{what}.*.{s}") for s in subjects]
        return [label] + vals + [ratio_str(get(data, keys[ours]), get(data, keys[s]), False)
                                 for s in subjects if s != ours]

    L += ["libhvd's data path between the ranks of one host (`runtime/shm`, on by default) against its TCP path "
          "(`hvdrun --no-shared-memory`, i.e. `HVD_SHARED_MEMORY=0`: Gloo over loopback, as between hosts) and the "
          "MPIs, all by the harness programs of `bench/peers/` (`hvd_allreduce.c` and `hvd_collectives.c` under "
          "`hvdrun`, `mpi_allreduce.c` and `mpi_collectives.c` under `mpirun.openmpi` and `mpiexec.hydra`), one job "
          "per subject, the subjects back to back in rotating order. Method as in the allreduce section: every "
          "iteration timed on every rank, the slower rank's time per iteration, a round's figure the median over "
          "its iterations (10 % warm-up, at least 3), the result checked before timing. Latency in µs; a ratio "
          "below 1 means hvd is faster.", "",
          "### np=2: allreduce, float32 sum", ""]
    # Runs before --bind-to core had no hvd_bound jobs.
    subs = [s for s in SHM_SUBJECTS if s != "hvd_bound" or "shm:hvd_bound" in data["status"]]
    rows = [row(size_label(n), "shm.np2", "allreduce", {s: f"shm.np2.allreduce.{n}.{s}" for s in subs}, subs, owners)
            for n in sorted({int(k.split(".")[3]) for k in data["summary"] if k.startswith("shm.np2.allreduce.")})]
    fused = {s: f"shm.np2.fusion.{'fused' if s.startswith('hvd') else 'async'}.{s}" for s in subs}
    rows.append(row("100 x 4 KiB submitted async, then waited", "shm.np2", "allreduce", fused, subs, owners))
    rows.append(row("100 x 4 KiB one by one", "shm.np2", "allreduce",
                    {s: f"shm.np2.fusion.one_by_one.{s}" for s in subs}, subs, owners))
    L += [table(["size"] + [name(s) for s in subs] + [f"hvd ÷ {name(s)}" for s in subs if s != "hvd"], rows), "",
          "Iterations per size: " + ", ".join(f"{size_label(k)} {v}" for k, v in sorted(it.items(), key=lambda x: int(x[0]))
                                              if any(k == k2.split(".")[3] for k2 in data["summary"]
                                                     if k2.startswith("shm.np2.allreduce."))) + "; "
          f"the 100 x 4 KiB batches: {data['params']['fusion_reps']} per round after 3 warm-up batches "
          "(hvd: `hvd_allreduce_async` x 100 then `hvd_wait` each, fused by the runtime; MPI: `MPI_Iallreduce` x 100 "
          "then `MPI_Waitall`, MPI having no fusion).", ""]
    subs = SHM_COLLECTIVE_SUBJECTS
    cowners = {"hvd": ["shm_collectives:hvd", "hvdrun"], "openmpi": ["openmpi", "collectives:openmpi"],
               "mpich": ["mpich", "collectives:mpich"]}
    rows = []
    for op in SHM_COLLECTIVES:
        for n in sorted({int(k.split(".")[3]) for k in data["summary"] if k.startswith(f"shm.np2.{op}.")}):
            keys = {s: f"shm.np2.{op}.{n}.{s}" for s in subs}
            r = row(f"{op} {size_label(n)}", "shm.np2", "collectives", keys, subs, cowners)
            mpis = [get(data, keys[s]) for s in ("openmpi", "mpich") if get(data, keys[s])]
            best = min(mpis, key=lambda v: v["median"]) if mpis else None
            rows.append(r + [ratio_str(get(data, keys["hvd"]), best, False)])
    L += ["### np=2: allgather, broadcast, alltoall, reducescatter, float32", "",
          "The size is every rank's input buffer: allgather, each rank contributes it and receives 2x; broadcast, "
          "rank 0 sends it in place; alltoall, each rank sends half of it to each rank (itself included) and "
          "receives as much; reducescatter (sum), each rank contributes it and receives its half. hvd: "
          "`hvd_allgather_async` / `hvd_broadcast_async` / `hvd_alltoall_async` / `hvd_reducescatter_async`, then "
          "`hvd_wait`, and `hvd_result` + `hvd_release` where libhvd keeps the result (inside the timed iteration: "
          "what a caller does to get it); MPI: `MPI_Allgather`, `MPI_Bcast`, `MPI_Alltoall`, "
          "`MPI_Reduce_scatter_block`. Iterations per size: "
          + ", ".join(f"{size_label(k)} {v}" for k, v in sorted(it.items(), key=lambda x: int(x[0]))
                      if any(k2.startswith("shm.np2.") and k2.split(".")[3] == k and k2.split(".")[2] in SHM_COLLECTIVES
                             for k2 in data["summary"]))
          + (". Small messages run longest: now and then the scheduler puts both ranks' polling threads on one "
             "CPU for 20-45 ms, which makes a 4 KiB operation 10-20x slower while it lasts, and a run of a few "
             "milliseconds could be all inside one such episode." if "shm_np2_iters" in data["params"] else "."),
          ""]
    if rows:
        L += [table(["operation"] + [name(s) for s in subs] + [f"hvd ÷ {name(s)}" for s in subs if s != "hvd"]
                    + ["hvd ÷ the faster MPI"], rows), ""]
    else:
        L += ["No figures in this run (" + why_absent(data, "shm_collectives:hvd", "hvdrun") + ").", ""]
    subs = SHM_NP4_SUBJECTS
    nowners = {"hvd": ["shm_np4:hvd", "hvdrun"], "hvd_tcp": ["shm_np4:hvd_tcp", "hvdrun"], "openmpi_yield": ["openmpi"]}
    pre = f"shm.np{np4}"
    rows = [row(size_label(n), pre, "allreduce", {s: f"{pre}.allreduce.{n}.{s}" for s in subs}, subs, nowners)
            for n in sorted({int(k.split(".")[3]) for k in data["summary"] if k.startswith(f"{pre}.allreduce.")})]
    n4 = data["params"].get("shm_np4_iters", {})
    L += [f"### np={np4} on {data['machine']['nproc']} cores (oversubscribed): allreduce, float32 sum", "",
          f"{np4} ranks on this host's cores, so a rank waiting for another often waits for one that is not running. "
          "Open MPI with `--oversubscribe --mca mpi_yield_when_idle 1` (it yields the core between polls instead of "
          "busy-polling); MPICH is left out (its shared-memory path busy-polls and has no such setting). "
          "Iterations per size: " + (", ".join(f"{size_label(k)} {v}" for k, v in sorted(n4.items(), key=lambda x: int(x[0])))
                                     or "-") + ".", ""]
    if rows:
        L += [table(["size"] + [name(s) for s in subs] + [f"hvd ÷ {name(s)}" for s in subs if s != "hvd"], rows), ""]
    else:
        L += ["No figures in this run (" + why_absent(data, "shm_np4:hvd", "hvdrun") + ").", ""]
    return L


def section_absent(data, section, subject):
    if section not in data.get("sections", [section]):
        return [f"*Not measured in this run* (section `{section}` not selected).", ""]
    st = data["status"].get(subject)
    if st and st["status"] != "ok":
        return [f"*{st['status']}*: {st['reason']}", ""]
    return None


def section(heading, name, subject, measured=(), intro=()):
    """Makes body(data, L) a section writer md(data). L starts with `heading` and the note on why the section is
    absent, if it is; an absent section ends there unless some of its figures are in this run (`measured`: a
    function of data, or prefixes of summary keys). A section that goes on has the lines of `intro` (how it
    was measured) next, then what body adds."""
    def wrap(body):
        @functools.wraps(body)
        def md(data):
            found = measured(data) if callable(measured) else any(k.startswith(tuple(measured))
                                                                  for k in data["summary"])
            absent = section_absent(data, name, subject)
            if absent and not found:
                return heading + absent
            return body(data, heading + (absent or []) + list(intro))
        return md
    return wrap


@section(["## Rendezvous server", ""], "rendezvous", "rendezvous",
         lambda data: get(data, "rendezvous.load_rps.torch_tcpstore"))
def rendezvous_md(data, L):
    subs = ["hvd", "torch_tcpstore"]
    load = [["requests/s"] + [cell(get(data, f"rendezvous.load_rps.{s}")) for s in subs],
            ["p99 latency of one request, ms"] + [cell(get(data, f"rendezvous.load_p99.{s}")) for s in subs]]
    L += ["Load: keep-alive clients alternating PUT and GET of their own keys. Ours: `bench/rendezvous/rendezvous_load`, "
          "32 connections driven by one epoll thread against an in-process server (one server thread). Peer: "
          "`bench/peers/torch_store_load.py`, torch.distributed's TCPStore (C++ server) with 8 Python client "
          "processes; more would starve its server on 2 cores, so its figure is a lower bound:", "",
          table(["measure", "hvd-rendezvous (ours)", "torch TCPStore"], load), ""]
    ns = sorted({int(k.split(".")[2]) for k in data["summary"] if k.startswith("rendezvous.scale.")})
    if ns:
        L += ["Scale: `bench/rendezvous/rendezvous_scale`, N simulated workers, 8 to a host, doing what "
              "Communicator::connect does (each PUTs its address list in the ports shape Debian's Gloo produces, "
              "fetches every rank's 20-byte header prefix (one answer for all, equal prefixes by reference) and "
              "its own column (built 64 ranks at a time), DELETEs) against a fresh hvd-rendezvous daemon per "
              "size, its clients in epoll processes on the same cores:", "",
              table(["workers", "seconds", "server peak RSS MiB"],
                    [[n, cell(get(data, f"rendezvous.scale.{n}.seconds")), cell(get(data, f"rendezvous.scale.{n}.rss"))]
                     for n in ns]), ""]
        L += extrapolation(data, ns)
    return L


def extrapolation(data, ns):
    pts = [(n, get(data, f"rendezvous.scale.{n}.seconds")) for n in ns]
    pts = [(n, s["median"]) for n, s in pts if s and s["median"] > 0]
    if len(pts) < 2:
        return []
    (n1, t1), (n2, t2) = pts[-2], pts[-1]
    k = math.log(t2 / t1) / math.log(n2 / n1)
    t10k = t2 * (10000 / n2) ** k
    return [f"Extrapolation to 10,000 workers from the two largest runs: time grows as N^{k:.2f}, "
            f"so about {fmt(t10k)} s (every worker receives a header prefix per host and a column entry per "
            f"rank: N² × (4 + 21/8) bytes in all).", ""]


@section(["## Remote launch over ssh", ""], "ssh", "ssh")
def ssh_md(data, L):
    labels = {"openssh_true": "one OpenSSH `ssh host true` (key exchange, login, remote shell)",
              "openssh_8x": "8 OpenSSH `ssh host true` at once, one per host (the floor here: 8 logins on 2 CPUs)",
              "openssh_32x": "32 OpenSSH `ssh host true` at once, 4 per host (what horovodrun starts)",
              "hvdrun_true": "hvdrun -np 32 on 8 hosts, /bin/true workers (preflight, reachability, 32 starts)",
              "hvdrun_8x1_true": "hvdrun -np 8, one /bin/true on each of the 8 hosts (the remote work of the 8 ssh above)",
              "hvdrun_joined": "hvdrun -np 32 on 8 hosts, examples/hello_cpp (all ranks join, allreduce, exit)",
              "hvdrun_all_joined": "the same runs: hvdrun start to the last of the 32 ranks joining the rendezvous"}
    base = get(data, "ssh.openssh_true")
    keys = [k for k in ("ssh.openssh_true", "ssh.openssh_8x", "ssh.openssh_32x", "ssh.hvdrun_8x1_true",
                        "ssh.hvdrun_true", "ssh.hvdrun_joined", "ssh.hvdrun_all_joined") if get(data, k)]
    L += ["`bench/ssh/bench_ssh_launch`: 8 network namespaces joined by a bridge, one sshd each, 4 slots per host; "
          "each round's figure is the median of that benchmark's own repetitions.", ""]
    return L + [table(["measure", "ms", "÷ one ssh"],
                      [[labels.get(k[4:], k[4:]), cell(get(data, k)), ratio_str(get(data, k), base, False)
                        if k != "ssh.openssh_true" else "-"] for k in keys]), ""]


@section(["## Hierarchical allreduce across hosts", "",
          "Target: 2 hosts x 2 ranks: hierarchical against flat Gloo at 64 KiB, 4 MiB, 64 MiB; the faster one "
          "becomes the default.", ""], "hier", "hier", ["hier.allreduce."])
def hier_md(data, L):
    sizes = sorted({int(k.split(".")[2]) for k in data["summary"] if k.startswith("hier.allreduce.")})
    it = data["params"]["allreduce_iters"]
    L += ["`bench/ssh/bench_hier_allreduce`: 2 network namespaces joined by a bridge, one sshd each, as the ssh "
          "hosts of `hvdrun -np 4 -H host1:2,host2:2`, running `bench/peers/hvd_allreduce.c` (float32 sum, method "
          "as in the allreduce section: the slower rank's time per iteration, a round's figure the median over its "
          "iterations). Hierarchical: `--hierarchical-allreduce`, reduce-scatter within each host over shared "
          "memory, allreduce of each rank's block across the hosts over Gloo, allgather within the host over "
          "shared memory. Flat: `--no-hierarchical-allreduce`, the 4 ranks in one Gloo context over TCP. The "
          "benchmark checks from the runtime's log that each job took its data path. One job per subject per "
          "round, the order rotating between rounds. Iterations per size: "
          + ", ".join(f"{size_label(n)} {it.get(str(n), '-')}" for n in sizes) + ". "
          f"Here all 4 ranks share this machine's {data['machine']['nproc']} cores, and the link between the "
          "hosts is a veth pair through a bridge in the same kernel (a memory copy, not a NIC), so the traffic "
          "between hosts that the hierarchical path saves is cheaper than on a real network. Latency in µs; a "
          "ratio below 1 means hierarchical is faster.", ""]
    owners = {s: ["hier", "hvdrun"] for s in HIER_SUBJECTS}
    rows, faster = [], {}
    for n in sizes:
        keys = {s: f"hier.allreduce.{n}.{s}" for s in HIER_SUBJECTS}
        h, f = get(data, keys["hvd_hier"]), get(data, keys["hvd_flat"])
        if h and f:
            faster[n] = "hierarchical" if h["median"] < f["median"] else "flat"
        pairs = zip(*(data["metrics"].get(keys[s], {"rounds": []})["rounds"] for s in HIER_SUBJECTS))
        r = summarize([a / b for a, b in pairs if a and b])
        same_round = f"{fmt_ratio(r['median'])} [{fmt_ratio(r['min'])}-{fmt_ratio(r['max'])}]" if r else "-"
        rows.append([size_label(n)] + [subject_cell(data, keys[s], s, owners[s], failed_key=f"hier.allreduce.*.{s}")
                                       for s in HIER_SUBJECTS]
                    + [ratio_str(h, f, False), same_round, faster.get(n, "-")])
    L += [table(["size"] + [name(s) for s in HIER_SUBJECTS] + ["hierarchical ÷ flat", "the same, round by round",
                                                                 "faster"], rows), ""]
    if faster:
        winners = set(faster.values())
        L += [(f"Faster at every size measured: **{winners.pop()}**." if len(winners) == 1 else
               "Faster by size: " + ", ".join(f"{size_label(n)} {w}" for n, w in faster.items())
               + ": no single winner.") + " By the medians over the rounds; the round-by-round ratios (hierarchical "
              "÷ flat of the same round, median [min-max]) show whether the order held in every round.", ""]
    return L


ELASTIC_TEXT = {
    "death": ("a worker SIGKILLed: time from the kill to the survivor's first step completed after it "
              "re-initialized", 1000.0),
    "add": ("a host added to the discovery output: time from that write to the first step completed at the new "
            "size", 2000.0),
}


def elastic_targets(data):
    ts = []
    for scenario, (text, limit) in ELASTIC_TEXT.items():
        ts.append(absolute_target(data, f"elastic-{scenario}", None, f"elastic, {text}: <= {limit / 1000:g} s "
                                  + ("(1 s plus the discovery interval)" if scenario == "add" else ""),
                                  f"elastic.{scenario}.hvd", limit, False, "ms", ["elastic:hvd", "hvdrun"]))
        ts.append(ratio_target(data, f"elastic-{scenario}-vs-horovod", None, f"elastic, {text}: <= 0.2x Horovod's "
                               "elastic driver (5x faster)", f"elastic.{scenario}.hvd", f"elastic.{scenario}.horovod",
                               0.2, False, "ms", ["elastic:hvd", "hvdrun", "horovod"]))
    return ts


@section(["## Elastic recovery", ""], "elastic", "elastic:hvd", ["elastic."], intro=[
    "`bench/elastic/recovery.py` on `bench/elastic/worker.py`, one script on Horovod's elastic API (a small "
    "Linear model, a DistributedOptimizer step and `state.commit()` each step, 20 ms sleep between steps). "
    "ours: `hvdrun --horovod-compat` (the script's `import horovod` is hvd); Horovod: its own "
    "`horovodrun --gloo`. Both: `--min-np 1 --max-np 2 --network-interface lo` and a discovery script listing "
    "`localhost` and `127.0.0.1`, two names of this machine, so that Horovod, which blacklists a whole host "
    "when a worker fails, can go on. death: 2 workers; after 20 steps each, the one on 127.0.0.1 is "
    "SIGKILLed. add: 1 worker on localhost; after 20 steps, `127.0.0.1:1` is added to the discovery output. "
    "Time in ms; re-initialized: to the first reset callback in the new membership.", ""])
def elastic_md(data, L):
    subs = ["hvd", "horovod"]
    owners = {"hvd": ["elastic:hvd", "hvdrun"], "horovod": ["horovod"]}
    rows = []
    for scenario, (text, _) in ELASTIC_TEXT.items():
        for fig, label in ((scenario, text), (f"{scenario}_reset", f"{scenario}: re-initialized")):
            keys = {x: f"elastic.{fig}.{x}" for x in subs}
            rows.append([label] + [subject_cell(data, keys[x], x, owners[x], failed_key=f"elastic.{scenario}.{x}")
                                   for x in subs] + [ratio_str(get(data, keys["hvd"]), get(data, keys["horovod"]), False)])
    return L + [table(["measure"] + [name(x) for x in subs] + ["ours ÷ Horovod"], rows), ""] + chaos_md(data)


CHAOS_KINDS = {
    "kill": "a worker SIGKILLed",
    "stop": "a worker SIGSTOPped for 5 s, then SIGCONT",
    "cut": "a host cut from the network for 3 s",
    "proxy": "a host's hvd-proxy SIGKILLed",
    "flood": "64 garbage, half-sent and silent connections at the rendezvous port",
}


def chaos_md(data):
    """The chaos soak's table (bench/compare --chaos-faults N, run once in the elastic section)."""
    raw = (data.get("raw") or {}).get("elastic.chaos")
    if not raw:
        return []
    report = raw[0]
    failed = [k for k, v in report["checks"].items() if not v]
    L = ["### Chaos soak", "",
         f"`tests/chaos/chaos_soak.py` (seed {report['seed']}, {report['steps']} steps): an elastic PyTorch job, "
         "np=4 over three ssh hosts in network namespaces (2, 1 and 1 slots), through faults injected one at a time "
         "at random steps, each once the job is back at 4 ranks. Recovery: from the fault to the first step completed "
         "beyond the last one before it; full size: to the first step at 4 ranks again; steps lost: steps trained "
         "again after the rollback to the last commit (commits every 4 steps). Seconds; median and max over the "
         "faults of each kind.", "",
         "Checks: " + ("all held (" if not failed else "FAILED: " + ", ".join(failed) + " (of ")
         + "; ".join(report["checks"]) + ").", ""]
    rows = []
    for kind, k in report["kinds"].items():
        rows.append([CHAOS_KINDS.get(kind, kind), str(k["count"]),
                     f"{k['recovery_median']:.2f} / {k['recovery_max']:.2f}",
                     f"{k['full_median']:.2f} / {k['full_max']:.2f}",
                     f"{k['steps_lost_median']:g} / {k['steps_lost_max']:g}"])
    return L + [table(["fault", "count", "recovery s (median / max)", "full size s (median / max)",
                       "steps lost (median / max)"], rows), ""]


def speedup_target(data, tid, text, ours_key, peer_key, limit, unit, absent):
    """A latency target read as a speed-up: peer ÷ ours >= limit (ours the faster)."""
    o, p = get(data, ours_key), get(data, peer_key)
    t = new_target(data, tid, None, text, limit, unit, absent, o, p)
    if "status" in t:
        return t
    r = p["median"] / o["median"]
    t.update(status="MET" if r >= limit else "MISSED", ours=o, peer=p, ratio=r, peer_keys=[peer_key],
             measured=f"{cell(o)} vs {cell(p)} {unit}: {fmt_ratio(r)} faster")
    return t


def executor_targets(data):
    """Targets of the executor section (hvd.Executor and hvd.train, bench/compare section `executor`)."""
    absent = ["executor:executor", "executor", "hvdrun"]
    return [
        absolute_target(data, "executor-noop", None, "Executor.run(noop) round trip on 4 started workers (localhost): "
                        "<= 20 ms", "executor.noop.executor", 20.0, False, "ms", absent),
        speedup_target(data, "executor-noop-vs-hvd-run", "Executor.run(noop) on 4 started workers: >= 20x faster than "
                       "hvd.run(noop, num_proc=4), an hvdrun job per call", "executor.noop.executor",
                       "executor.noop.hvd_run", 20.0, "ms", absent + ["executor:hvd_run"]),
        quickstart_target(data),
        absolute_target(data, "trainer-own-cost", None, "examples/python/train_quickstart.py under hvd.train.Trainer "
                        "minus the same script with fit() replaced by the plain `hvdrun -np 3 ... --plain` job (the "
                        "Trainer's own cost, beside the driver's imports): <= 0.25 s", "executor.quickstart.trainer_own",
                        0.25, False, "s", ["executor:trainer", "executor:script_plain", "executor", "hvdrun"]),
    ]


def tune_targets(data):
    """Targets of the tune section (hvd.tune, bench/compare section `tune`)."""
    absent = ["tune:tune", "tune", "hvdrun"]
    return [
        absolute_target(data, "tune-wall-vs-ideal", None, "hvd.tune.run of 20 trials of a 1-second 2-rank train_fn on "
                        "4 slots: wall time <= 1.3x the ideal (10 s plus one job start)", "tune.ratio_to_ideal", 1.3,
                        False, "x", absent),
        absolute_target(data, "tune-overhead-per-trial", None, "hvd.tune: scheduling cost per trial beyond the job's "
                        "own start <= 100 ms", "tune.overhead_per_trial", 100.0, False, "ms", absent),
    ]


@section(["## Hyperparameter search: hvd.tune", ""], "tune", "tune", ["tune."], intro=[
    "`bench/tune/tune_bench.py`, each subject a fresh driver process: 20 trials of a train_fn that initialises "
    "hvd.numpy on 2 ranks, allreduces once, sleeps 1 s and reports, on 4 slots of this host (2 trials at a "
    "time). hvd.tune.run reuses a finished trial's started workers for the next trial on its slots (Tune's "
    "reuse_actors); the alternative, Optuna's `study.optimize(objective, n_trials=20, n_jobs=2)` whose "
    "objective calls `hvd.run(fn, np=2)`, starts an hvdrun job per trial. Ideal: 10 s plus one job start "
    "(hvd.run of the same init and allreduce, median of 3). Scheduling cost per trial: the median, over the "
    "trials after the first two, of the wait after the trial before it on its slots ended plus its "
    "driver-side time beyond the sleep.", ""])
def tune_md(data, L):
    owners = {"hvd_tune": ["tune:tune", "tune"], "optuna_hvd_run": ["tune:optuna_hvd_run", "tune"]}
    rows = [[name(s), subject_cell(data, f"tune.wall.{s}", s, owners[s], failed_key=f"tune.wall.{s}")]
            for s in owners]
    rows.append(["hvd.tune ÷ the ideal (10 s + one job start)", cell(get(data, "tune.ratio_to_ideal"))])
    rows.append(["hvd.tune's scheduling cost per trial, ms", cell(get(data, "tune.overhead_per_trial"))])
    rows.append(["one 2-rank job's start (hvd.run), s", cell(get(data, "tune.job_start"))])
    L += [table(["measure", "value"], rows), ""]
    L += [f"hvd.tune ÷ Optuna with hvd.run: {ratio_str(get(data, 'tune.wall.hvd_tune'), get(data, 'tune.wall.optuna_hvd_run'), False)}", ""]
    return L


def quickstart_target(data):
    """Trainer against the plain job; the cross-check adds the driver's floor to the plain job (what any Python
    driver that imports torch costs before it starts a worker)."""
    t = ratio_target(data, "trainer-quickstart-vs-plain", None, "examples/python/train_quickstart.py under "
                     "hvd.train.Trainer (3 workers, 3 epochs, a checkpoint each): wall time <= 1.2x the same loop as a "
                     "plain `hvdrun -np 3 ... --plain` job", "executor.quickstart.trainer", "executor.quickstart.plain",
                     1.2, False, "s", ["executor:trainer", "executor:plain", "executor", "hvdrun"])
    d = get(data, "executor.quickstart.driver_floor")
    if t.get("ours") and d:
        t["cross_check"] = (f"against the plain job plus the driver's floor (`python -c 'import torch, hvd.torch, "
                            f"hvd.train'`, {cell(d)} s): "
                            f"{fmt_ratio(t['ours']['median'] / (t['peer']['median'] + d['median']))}")
    return t


@section(["## Persistent workers: hvd.Executor and hvd.train", ""], "executor", "executor", ["executor."])
def executor_md(data, L):
    ex = data["params"].get("executor", {})
    np_ = ex.get("np", 4)
    L += [f"`bench/executor/executor_bench.py`, each subject a fresh driver process (hvd imported before the clock "
          f"starts), {np_} ranks on this host. run(noop): the median of {ex.get('calls', '-')} calls after 10 "
          f"warm-up calls on workers started once; hvd.run(noop, num_proc={np_}) starts an hvdrun job per call, "
          f"median of {ex.get('hvd_run_jobs', '-')} calls after the first. Start: `Executor(num_workers={np_})."
          "start()` until the first run(noop) returned, against hvd.run's first call in its process. Dask: a "
          f"`LocalCluster(n_workers={np_}, processes=True, threads_per_worker=1)` started by the benchmark; "
          "`client.submit(noop).result()` and `Executor(num_workers=..., client=client).run(noop)` back to back on it "
          "(the order alternating between rounds). Milliseconds; a ratio is the subject's median ÷ the other's.", ""]
    owners = {"executor": ["executor:executor", "executor"], "hvd_run": ["executor:hvd_run", "executor"],
              "executor_dask": ["executor:dask", "executor"], "dask_submit": ["executor:dask", "executor"],
              "trainer": ["executor:trainer", "executor"], "plain": ["executor:plain", "executor"],
              "driver_floor": ["executor:driver_floor", "executor"],
              "script_plain": ["executor:script_plain", "executor"]}

    def row(label, fig, a, b, failed_key=None):
        ka, kb = f"executor.{fig}.{a}", f"executor.{fig}.{b}"
        return [label, subject_cell(data, ka, a, owners[a], failed_key=ka),
                subject_cell(data, kb, b, owners[b], failed_key=kb), ratio_str(get(data, ka), get(data, kb), False)]

    # "executor" is also the section's status key, so the subject's label is not in NAMES.
    L += [table(["measure", "hvd.Executor (ours)", name("hvd_run"), "Executor ÷ hvd.run"],
                [row("run(noop) round trip, ms", "noop", "executor", "hvd_run"),
                 row(f"start of {np_} workers to the first run returned (hvd.run: its first call), ms", "start",
                     "executor", "hvd_run")]), ""]
    L += [table(["measure", name("executor_dask"), name("dask_submit"), "Executor ÷ Dask"],
                [row("run(noop) / submit(noop).result() round trip, ms", "noop", "executor_dask", "dask_submit"),
                 [f"start of {np_} Dask-hosted ranks to the first run returned, ms",
                  subject_cell(data, "executor.start.executor_dask", "executor_dask", owners["executor_dask"],
                               failed_key="executor.start.executor_dask"), "-", "-"]]), ""]
    L += [f"Quickstart: `examples/python/train_quickstart.py` ({ex.get('quickstart_np', 3)} workers, a 1-15-1 MLP, "
          "3 epochs, rank 0 reporting a checkpoint each epoch) as its user runs it, `python train_quickstart.py` "
          "(hvd.train.Trainer: the driver imports torch, starts an Executor, persists each checkpoint), against the "
          "same training function as a plain job, `hvdrun -np 3 ... train_quickstart.py --plain`, and the floor of "
          "the Trainer's driver: a Python that imports torch, hvd.torch and hvd.train and exits, and the quickstart "
          "with fit() replaced by the plain job (the script's imports and definitions, then that job started from "
          f"it); {ex.get('quickstart_runs', '-')} runs of each per round, interleaved run by run, wall time from "
          "spawn to exit in seconds. The last rows are differences of each round's medians: Trainer - plain - driver "
          "floor, and Trainer - the script with the plain job, the Trainer's own cost beside the driver's imports.", ""]
    keys = {s: f"executor.quickstart.{s}" for s in ("trainer", "plain", "driver_floor", "script_plain")}
    plain = get(data, keys["plain"])
    rows = [[name(s), subject_cell(data, k, s, owners[s], failed_key=k),
             ratio_str(get(data, k), plain, False) if s != "plain" else "-"] for s, k in keys.items()]
    rounds = [data["metrics"].get(keys[k], {"rounds": []})["rounds"] for k in ("trainer", "plain", "driver_floor")]
    rest = summarize([t - p - d for t, p, d in zip(*rounds) if None not in (t, p, d)])
    rows.append(["Trainer - plain - driver floor, same round", cell(rest), "-"])
    rows.append(["Trainer - the script with the plain job, same round (the Trainer's own cost)",
                 cell(get(data, "executor.quickstart.trainer_own")), "-"])
    return L + [table(["measure", "s", "÷ plain"], rows), ""]


@section(["## Training from Python, np=2 on localhost", ""], "train", "train:hvd", ["train.", "pyfusion."])
def train_md(data, L):
    params = data["params"].get("train_steps", {})
    batch = data["params"].get("train_batch", {})
    steps = ", ".join(f"{label} {params[m][0]} warm-up + {params[m][1]} timed"
                      for m, label in TRAIN_MODELS if m in params)
    L += ["`bench/train/train_bench.py`, one job per subject and model, interleaved in each round: the same model, "
          "initial weights and synthetic batches in each framework, SGD with momentum, `torch.set_num_threads(1)` in "
          "each of the 2 ranks. ResNet-18 is torchvision's (random weights) on 3x64x64 images, batch "
          f"{batch.get('resnet18', '-')} per rank; the wide MLP is 4 Linear(2048, 2048) layers and a 10-way head "
          f"(16.8 M parameters, 67 MB of gradients a step), batch {batch.get('mlp', '-')} per rank, so that its "
          "step is mostly gradient exchange (Linear runs on the BLAS named above). "
          f"Steps per job: {steps or '-'}. ours: `hvd.torch.DistributedOptimizer` under `hvdrun`; "
          "torch DDP: `DistributedDataParallel` (default buckets) over gloo under `torchrun`; torch DDP, hvdrun's "
          "malloc settings: the same under `torchrun` with the `GLIBC_TUNABLES` hvdrun gives its workers (read from "
          "`hvdrun --dry-run`; docs/launcher.md, Worker memory), so that the comparison with ours is like for like "
          "below the launcher; Horovod: `horovod.torch.DistributedOptimizer` under its own `horovodrun --gloo`. "
          "hvd, --autotune: ours under `hvdrun --autotune --autotune-warmup-samples 1 --autotune-steps-per-sample 2 "
          "--autotune-bayes-opt-max-samples 10`, with 24 more warm-up steps, in which the tuner settles; the timed "
          "steps run what it kept.", ""]
    subs = [s for s in TRAIN_SUBJECTS if s in ("hvd", "ddp") or any(
        k.startswith("train.") and k.endswith("." + s) for k in data["summary"]) or s in data["status"]]
    owners = {"hvd": ["train:hvd", "hvdrun"], "hvd_autotune": ["train:hvd_autotune", "hvdrun"], "ddp": ["torch"],
              "ddp_malloc": ["torch"], "horovod": ["horovod"]}
    rows = []
    for model, label in TRAIN_MODELS:
        for fig, text, higher in TRAIN_FIGURES:
            keys = {s: f"train.{model}.{fig}.{s}" for s in subs}
            if not any(get(data, k) for k in keys.values()):
                continue
            ours = get(data, keys["hvd"])
            rows.append([label, text] + [subject_cell(data, keys[s], s, owners[s]) for s in subs]
                        + [ratio_str(ours, get(data, keys[s]), higher) for s in subs if s != "hvd"])
    if rows:
        L += [table(["model", "figure"] + [name(s) for s in subs] + [f"hvd ÷ {name(s)}" for s in subs if s != "hvd"],
                    rows), ""]
    L += ["How each figure is taken: samples/s is the global batch times the timed steps over the slower rank's wall "
          "time of the timed loop; a step is zero_grad, forward, backward, the exchange and the optimizer step (median, "
          "slower rank). Waiting on communication: for hvd and Horovod, the wall time of `optimizer.synchronize()` "
          "called explicitly after `backward()` (the hooks started every allreduce during backward; this is the wait "
          "for their handles), then `step()` under `skip_synchronize()`; for DDP, which waits for its buckets inside "
          "`backward()`, the backward time minus the backward time of the same batches under `no_sync()` (median of "
          "the per-step differences). The last row runs the same steps on a copy of the bare model in the same job: "
          "the compute alone.", ""]
    lat = [("total", "100 x 4 KiB `allreduce_async_` (named, Sum), then `synchronize` each, µs"),
           ("submit", "of which submitting the 100, µs")]
    psubs = [s for s in ("hvd", "horovod") if s == "hvd" or s in data["status"]]
    lrows = [[text] + [subject_cell(data, f"pyfusion.{k}.{s}", s, owners[s]) for s in psubs]
             + [ratio_str(get(data, f"pyfusion.{k}.hvd"), get(data, f"pyfusion.{k}.{s}"), False)
                for s in psubs if s != "hvd"] for k, text in lat]
    c = next((get(data, k) for k in ("fusion.fused.hvd_bench", "fusion.fused.hvd") if get(data, k)), None)
    if c:
        lrows.append(["the same batch from C (libhvd's C API, fusion section of this run), µs", cell(c)]
                     + ["-"] * (len(psubs) - 1) * 2)
    L += ["Small operations from Python: 100 tensors of 1024 float32 submitted one by one, then each handle "
          f"synchronized ({data['params'].get('pyfusion_reps', '-')} batches per job after 5 warm-up batches, slower "
          "rank per batch, median):", "",
          table(["measure"] + [f"{name(s)}" for s in psubs] + [f"hvd ÷ {name(s)}" for s in psubs if s != "hvd"],
                lrows), ""]
    return L


def missed_md(data):
    notes = findings()
    prof = data.get("profiles", {})
    L = ["## Missed, unsure and unmeasured targets: causes and what would close the gap", ""]
    any_ = False
    for t in data["targets"]:
        if t["status"] == "MET":
            continue
        any_ = True
        L += [f"### {t['id']}: {t['status']}", "",
              f"Target: {t['target']}. "
              + (f"Measured: {t['measured']}." if t.get("measured") else f"Reason: {t.get('reason')}.")
              + (f" Peer figure against the peer run alone: {t['peer_check']}." if t.get("peer_check") else ""), ""]
        if t["id"] in prof:
            p = prof[t["id"]]
            L += [f"Profile (`{p['command']}`):", "", "```", p["text"].rstrip(), "```", ""]
        L += [notes.get(t["id"], "*Cause not yet analysed: LEAD TO FILL (component owner's profile).*"), ""]
    if not any_:
        L += ["Every target was met in this run.", ""]
    return L


def failures_md(data):
    if not data["failures"]:
        return ["## Failed runs", "", "None.", ""]
    rows = [[f["key"], f["round"] + 1, f["rc"], f["detail"][-200:].replace("|", "/")] for f in data["failures"]]
    return ["## Failed runs", "", "Runs that exited non-zero are left out of the medians and listed here:", "",
            table(["what", "round", "exit", "last output"], rows), ""]


def method_md(data):
    return ["## Method", "",
            "- One run, R rounds; in each round every section measures ours and each peer back to back, the order "
            "rotating between rounds; launch cases are interleaved run by run. Machine load is recorded before each "
            "round, and over the whole round the share of the CPUs other processes used (CPU time from "
            "`/proc/stat` less what the harness and the jobs it reaped used) and the hypervisor's steal: the MPIs "
            "busy-poll, so they lose more to either than ours does.",
            "- Wall times are taken by `bench/compare` around `posix_spawn` ... `wait4`; peak RSS is read under "
            "`/usr/bin/time -f %M` (a child of the Python harness would inherit the interpreter's RSS as its "
            "high-water mark at exec).",
            "- Peers are built at bench time from `bench/peers/` (`mpicc.openmpi`, `mpicc.mpich`, `g++ -lgloo`) and run "
            "exactly as their users run them: `mpirun.openmpi --allow-run-as-root`, `mpiexec.hydra`, two raw Gloo "
            "processes from `sh`, and `bench/peers/torchrun_py311.py` (torchrun with the Python 3.11 `Std.from_str` "
            "fix) under `/usr/bin/python3`.",
            "- After the rounds, each peer a one-host verdict rests on (shm: Open MPI's allreduce, both MPIs' "
            "collectives; allreduce: raw Gloo's `bench/peers/gloo_allreduce.cc`) runs alone, recorded as "
            f"`<metric>.alone`; a peer figure more than {GUARD_LIMIT}x off its standalone one makes the verdict "
            "UNSURE (see the Targets section).",
            "- Ceilings come from `bench/ceilings/` (two processes over 127.0.0.1 for TCP).",
            "- Raw machine-readable results of this run: `docs/perf/results.json` (per-round values of every metric, "
            "statuses, failures, load), so later runs can be compared.", ""]


def main(argv):
    if len(argv) < 2:
        sys.exit("usage: report.py RESULTS_JSON [OUT_DIR]")
    with open(argv[1]) as f:
        data = json.load(f)
    finalize(data)
    out = argv[2] if len(argv) > 2 else os.path.dirname(os.path.dirname(os.path.abspath(argv[1])))
    print(write(data, out))


if __name__ == "__main__":
    main(sys.argv)
