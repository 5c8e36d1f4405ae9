"""bench/report/report.py's guard on peer figures, fed synthetic results (no benchmark run): a verdict resting on
a peer figure is cross-checked against that peer's standalone run (<metric>.alone); more than 1.5x off either
way makes it UNSURE with the figure, both values and the ratio named, and without a standalone run it says
"not cross-checked" and keeps its status."""
import os
import sys

import pytest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "report"))
import report  # noqa: E402

KIB, MIB = 1024, 1024 * 1024


def results(metrics):
    """A results.json as bench/compare writes it, one round, with only the given metrics ({key: value})."""
    return {
        "schema": 1, "date": "2026-01-01T00:00:00Z", "command": "bench/compare --quick", "mode": "quick",
        "rounds": 1, "sections": ["shm", "allreduce"], "duration_s": 60.0,
        "machine": {"nproc": 2, "cpu": "test", "memory": "1 GiB", "kernel": "-", "os": "-", "hostname": "-"},
        "versions": {}, "build_dir": "/nonexistent",
        "load": {"before": {"loadavg": [0, 0, 0], "cpu_busy": 0.0}, "rounds": [{"loadavg": [0, 0, 0], "cpu_busy": 0.0}],
                 "after": {"loadavg": [0, 0, 0], "cpu_busy": 0.0}},
        "status": {"hvdrun": {"status": "ok", "reason": ""}, "openmpi": {"status": "ok", "reason": ""},
                   "mpich": {"status": "ok", "reason": ""}, "gloo": {"status": "ok", "reason": ""}},
        "metrics": {k: {"unit": "us", "rounds": [v]} for k, v in metrics.items()},
        "failures": [], "notes": [], "raw": {}, "profiles": {},
        "params": {"allreduce_iters": {str(4 * KIB): 100}, "launch_runs": 4, "torch_launch_runs": 1, "sweep_runs": 2,
                   "fusion_reps": 10, "train_steps": {"resnet18": [2, 6], "mlp": [2, 8]}, "train_batch": 16,
                   "pyfusion_reps": 30, "shm_np4": 4, "shm_np4_iters": {}, "hier_sizes": [64 * KIB],
                   "executor": {"np": 4, "calls": 50, "hvd_run_jobs": 3, "quickstart_runs": 1, "quickstart_np": 3},
                   "alone": {"runs": 1, "iters": {str(4 * KIB): 50}}},
    }


def verdicts(metrics):
    data = report.finalize(results(metrics))
    return data, {t["id"]: t for t in data["targets"]}


def test_consistent_peer_figure_keeps_met():
    _, t = verdicts({f"shm.np2.allreduce.{4 * KIB}.hvd": 10.0, f"shm.np2.allreduce.{4 * KIB}.openmpi": 12.0,
                     f"shm.np2.allreduce.{4 * KIB}.openmpi.alone": 11.0})
    v = t["shm-allreduce-4k"]
    assert v["status"] == "MET"
    assert v["peer_check"].startswith("consistent: Open MPI")
    assert "within 1.5x" in v["peer_check"] and "not cross-checked" not in v["peer_check"]
    assert not v["peer_flagged"]


@pytest.mark.parametrize("hvd, by_figures", [(300.0, "MET"), (900.0, "MISSED")])
def test_peer_figure_2x_off_is_unsure(hvd, by_figures):
    # Open MPI in the rounds 800 us, alone 400 us: its figure is 2x off, the verdict (ours vs 800) unreliable
    key = f"shm.np2.allreduce.{1 * MIB}.openmpi"
    data, t = verdicts({f"shm.np2.allreduce.{1 * MIB}.hvd": hvd, key: 800.0, key + ".alone": 400.0})
    v = t["shm-allreduce-1m"]
    assert v["status"] == "UNSURE"
    assert v["status_by_figures"] == by_figures
    assert v["peer_check"] == (f"FLAGGED: Open MPI `{key}` 800 us in the rounds vs 400 us run alone = 2.00x "
                               "(beyond 1.5x)")
    md = report.render(data, {})
    assert f"**UNSURE** ({by_figures} by the figures)" in md
    row = next(line for line in md.splitlines() if line.startswith("| `shm-allreduce-1m`"))
    assert "FLAGGED: Open MPI" in row and "2.00x" in row
    assert f"| `{key}` | 800 (1 round) | 400 (1 round) | 2.00x | **FLAGGED** |" in md


def test_peer_figure_2x_faster_than_alone_is_unsure_too():
    key = f"shm.np2.allreduce.{64 * MIB}.openmpi"
    _, t = verdicts({f"shm.np2.allreduce.{64 * MIB}.hvd": 20000.0, key: 20000.0, key + ".alone": 40000.0})
    assert t["shm-allreduce-64m"]["status"] == "UNSURE"
    assert "20,000 us in the rounds vs 40,000 us run alone = 0.50x (beyond 1.5x)" \
        in t["shm-allreduce-64m"]["peer_check"]


def test_no_standalone_figure_is_not_cross_checked():
    data, t = verdicts({f"shm.np2.allreduce.{4 * KIB}.hvd": 10.0, f"shm.np2.allreduce.{4 * KIB}.openmpi": 12.0,
                        f"shm.np2.allreduce.{1 * MIB}.hvd": 500.0, f"shm.np2.allreduce.{1 * MIB}.openmpi": 100.0})
    assert t["shm-allreduce-4k"]["status"] == "MET"
    assert t["shm-allreduce-1m"]["status"] == "MISSED"
    for tid in ("shm-allreduce-4k", "shm-allreduce-1m"):
        assert t[tid]["peer_check"].startswith("not cross-checked: no standalone run of `shm.np2.allreduce.")
        assert not t[tid]["peer_flagged"]
    # The targets table says so in the rows themselves, not only in the guard's introduction.
    page = report.render(data, {}).splitlines()
    for tid in ("shm-allreduce-4k", "shm-allreduce-1m"):
        rows = [line for line in page if line.startswith(f"| `{tid}` |")]
        assert len(rows) == 1 and "not cross-checked" in rows[0], rows


def test_faster_peer_verdict_checks_every_peer():
    # hvd beats Open MPI (the faster here) and MPICH; MPICH's figure is 3x its standalone one
    n = 4 * KIB
    _, t = verdicts({f"shm.np2.allgather.{n}.hvd": 10.0, f"shm.np2.allgather.{n}.openmpi": 12.0,
                     f"shm.np2.allgather.{n}.openmpi.alone": 12.0, f"shm.np2.allgather.{n}.mpich": 30.0,
                     f"shm.np2.allgather.{n}.mpich.alone": 10.0})
    v = t["shm-allgather-4k"]
    assert v["status"] == "UNSURE" and v["status_by_figures"] == "MET"
    assert f"consistent: Open MPI `shm.np2.allgather.{n}.openmpi`" in v["peer_check"]
    assert f"FLAGGED: MPICH `shm.np2.allgather.{n}.mpich` 30.0 us in the rounds vs 10.0 us run alone = 3.00x" \
        in v["peer_check"]


def test_allreduce_section_bus_bandwidth_uses_the_standalone_gloo_run():
    n = 64 * MIB
    _, t = verdicts({f"allreduce.{n}.hvd": 40000.0, f"allreduce.{n}.gloo": 50000.0,
                     f"allreduce.{n}.gloo.alone": 48000.0, f"allreduce.{4 * KIB}.hvd": 100.0,
                     f"allreduce.{4 * KIB}.gloo": 100.0, f"allreduce.{4 * KIB}.gloo.alone": 300.0})
    assert t["busbw-64m"]["status"] == "MET"
    assert t["busbw-64m"]["peer_check"].startswith(f"consistent: raw Gloo `busbw.{n}.gloo`")
    assert t["latency-4k"]["status"] == "UNSURE" and t["latency-4k"]["status_by_figures"] == "MET"


def test_verdict_without_peer_and_unmeasured_verdict_are_untouched():
    _, t = verdicts({"shm.np2.fusion.fused.hvd": 150.0})
    assert t["shm-fusion-100x4k"]["status"] == "MET" and "peer_check" not in t["shm-fusion-100x4k"]
    assert t["shm-allreduce-4k"]["status"] == "NOT MEASURED" and "peer_check" not in t["shm-allreduce-4k"]
