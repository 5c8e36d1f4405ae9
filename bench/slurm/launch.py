#!/usr/bin/python3
"""bench/slurm/launch.py: launch through srun inside one Slurm allocation, hvdrun against plain srun and the MPIs.

    /usr/bin/python3 bench/slurm/launch.py                       # 5 rounds, writes bench/slurm/results.json
    /usr/bin/python3 bench/slurm/launch.py --rounds 9 --out /tmp/slurm-launch.json --build-dir build

Makes a Slurm lab on this machine (tests/slurm/slurm_lab.py: slurmctld, one slurmd per network namespace,
munge; root needed) with 4 nodes of 4 CPUs and submits ONE batch job, --nodes=4 --ntasks=8
--ntasks-per-node=2, whose script runs every subject, so that all of them share the same allocation and the
same moment. Subjects, each started from the batch script (on node1) and timed from start to exit with
bash's $EPOCHREALTIME (no fork around the clock):

    srun           srun -N4 -n8 /bin/true                            the baseline: one step of 8 tasks
    hvdrun         hvdrun -np 8 --verbose <build>/examples/hello_c   libhvd init + one allreduce per rank;
                   also its "all 8 ranks joined the rendezvous M ms after hvdrun started"
    hvdrun_true    hvdrun -np 8 /bin/true                            the same launch without libhvd
    mpirun         Open MPI's mpirun --allow-run-as-root -np 8 /bin/true   (plm slurm: srun starts orted)
    hydra          mpiexec.hydra -n 8 -launcher slurm /bin/true      (srun starts hydra_pmi_proxy)

Before the timed rounds the script checks once, from their verbose output, that Open MPI selected its
slurm plm and that Hydra's launch command is srun; a subject that cannot run is recorded with the reason,
never replaced. Then W warm-up rounds (not counted) and R rounds; in each round every subject runs once,
the order rotating from round to round. Each command runs under `timeout`, the same for all. Last, a few
untimed probe runs of srun and of hvdrun whose tasks are wrapped in bash printing $EPOCHREALTIME at start and
exit (all lab nodes share this machine's clock) break the wall time down: launcher start to the first task's
start, to the last task's start, to the last task's exit, to the launcher's exit.

Prints a table (median [min-max] ms per subject, ratios to plain srun) and writes the results as JSON.
Exit 0 when every available subject ran, 1 when a run failed, 77 (and a line starting SKIPPED) when the
Slurm lab cannot run here.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.join(ROOT, "tests", "slurm"))
from slurm_lab import SlurmLab, unavailable  # noqa: E402

NODES, CPUS, NTASKS, PER_NODE = 4, 4, 8, 2
TARGET = 1.5  # hvdrun wall time to exit <= 1.5x plain srun
JOINED = re.compile(r"all (\d+) ranks joined the rendezvous (\d+) ms after hvdrun started")


def subjects(build):
    """(name, what, argv) in the order of round 1; hello_c is a real libhvd worker."""
    hvdrun = os.path.join(build, "hvdrun")
    return [
        ("srun", "plain srun, one step of 8 tasks", ["srun", f"-N{NODES}", f"-n{NTASKS}", "/bin/true"]),
        ("hvdrun", "hvdrun, examples/hello_c (libhvd init + allreduce)",
         [hvdrun, "-np", str(NTASKS), "--verbose", os.path.join(build, "examples", "hello_c")]),
        ("hvdrun_true", "hvdrun, /bin/true workers", [hvdrun, "-np", str(NTASKS), "/bin/true"]),
        ("mpirun", "Open MPI mpirun (plm slurm)", ["mpirun", "--allow-run-as-root", "-np", str(NTASKS), "/bin/true"]),
        ("hydra", "MPICH mpiexec.hydra -launcher slurm",
         ["mpiexec.hydra", "-n", str(NTASKS), "-launcher", "slurm", "/bin/true"]),
    ]


def missing(build):
    """subject -> why it cannot run here (a tool or a build product absent)."""
    why = {}
    for name in ("hvdrun", "hvd-proxy"):
        if not os.access(os.path.join(build, name), os.X_OK):
            why["hvdrun"] = why["hvdrun_true"] = f"{build}/{name} was not built"
    if not os.access(os.path.join(build, "examples", "hello_c"), os.X_OK):
        why.setdefault("hvdrun", f"{build}/examples/hello_c was not built")
    for name, tool, pkg in (("mpirun", "mpirun", "openmpi-bin"), ("hydra", "mpiexec.hydra", "mpich")):
        if not shutil.which(tool):
            why[name] = f"{tool} not installed ({pkg})"
    return why


def probes(build):
    """Untimed runs for the breakdown: every task prints its start and exit time ($EPOCHREALTIME; all nodes of
    the lab share this machine's clock). The bash around each task costs a few ms: not the timed runs."""
    stamp = 't0=$EPOCHREALTIME; "$0"; rc=$?; echo "SLBW $t0 $EPOCHREALTIME"; exit $rc'
    return [("srun_probe", ["srun", f"-N{NODES}", f"-n{NTASKS}", "bash", "-c", stamp, "/bin/true"]),
            ("hvdrun_probe", [os.path.join(build, "hvdrun"), "-np", str(NTASKS), "bash", "-c", stamp,
                              os.path.join(build, "examples", "hello_c")])]


def batch_script(subs, rounds, warmup, timeout_s, probe_subs=(), probe_runs=0):
    """The one batch script: checks, warm-up rounds, timed rounds; machine-readable lines start with SLB."""
    q = shlex.quote
    lines = [
        "export LC_ALL=C  # a '.' in $EPOCHREALTIME",
        "T=$(mktemp -d)",
        "trap 'rm -rf $T' EXIT",
        "echo \"SLBINFO allocation $SLURM_JOB_ID $SLURM_JOB_NODELIST $SLURM_TASKS_PER_NODE $(hostname)\"",
        "# measure ROUND SUBJECT ARGV...: one run, start to exit, its output in a file",
        "measure() {",
        "  local round=$1 name=$2; shift 2",
        "  local log=$T/$name.$round.log",
        "  local t0=$EPOCHREALTIME",
        f"  timeout {timeout_s} \"$@\" >$log 2>&1 </dev/null",
        "  local rc=$?",
        "  local t1=$EPOCHREALTIME",
        "  local joined=$(sed -n 's/.*all [0-9]* ranks joined the rendezvous \\([0-9]*\\) ms after.*/\\1/p' $log)",
        "  echo \"SLB $round $name $rc $t0 $t1 ${joined:--}\"",
        "  if [ $rc != 0 ]; then tail -n 8 $log | sed \"s/^/SLBERR $round $name /\"; fi",
        "  grep -o 'SLBW .*' $log | sed \"s/^SLBW /SLBT $round $name /\"",
        "}",
    ]
    names = [s[0] for s in subs]
    # The checks: which launch path each MPI took (their own verbose output), hvdrun's launcher.
    if "mpirun" in names:
        argv = dict((s[0], s[2]) for s in subs)["mpirun"]
        lines += [f"timeout {timeout_s} {argv[0]} --mca plm_base_verbose 10 {' '.join(map(q, argv[1:]))} "
                  f">$T/check.mpirun 2>&1 </dev/null; echo \"SLBCHK mpirun rc $?\"",
                  "grep -E 'Selected component \\[|plm:slurm: final top-level argv' -A1 $T/check.mpirun "
                  "| grep -v '^--$' | sed 's/^/SLBCHK mpirun /'",
                  "tail -n 5 $T/check.mpirun | sed 's/^/SLBCHK mpirun tail /'"]
    if "hydra" in names:
        argv = dict((s[0], s[2]) for s in subs)["hydra"]
        lines += [f"timeout {timeout_s} {argv[0]} -verbose {' '.join(map(q, argv[1:]))} "
                  f">$T/check.hydra 2>&1 </dev/null; echo \"SLBCHK hydra rc $?\"",
                  "grep -E 'Launch arguments:|^srun: ' $T/check.hydra | cut -c1-400 | sed 's/^/SLBCHK hydra /'",
                  "tail -n 3 $T/check.hydra | cut -c1-400 | sed 's/^/SLBCHK hydra tail /'"]
    for r in range(-warmup, rounds):
        tag = f"w{-r - 1}" if r < 0 else str(r)
        k = r % len(subs)
        for name, _, argv in subs[k:] + subs[:k]:
            lines.append(f"measure {tag} {name} {' '.join(map(q, argv))}")
    for r in range(probe_runs):
        for name, argv in (list(probe_subs) if r % 2 == 0 else list(probe_subs)[::-1]):
            lines.append(f"measure b{r} {name} {' '.join(map(q, argv))}")
    if "hvdrun" in names:  # the line where hvdrun --verbose says which launcher it took
        lines.append("grep -h 'launcher ' $T/hvdrun.*.log | head -n 1 | sed 's/^/SLBCHK hvdrun /'")
    lines.append("echo SLBEND")
    return "\n".join(lines)


def summarize(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def fmt(s, digits=0):
    if not s:
        return "-"
    return f"{s['median']:.{digits}f} [{s['min']:.{digits}f}-{s['max']:.{digits}f}]"


def version(cmd):
    try:
        out = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
        return " ".join(out.splitlines()[0].split()) if out else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up rounds, not counted (default 1)")
    ap.add_argument("--build-dir", default=os.environ.get("HVD_BUILD_DIR") or os.path.join(ROOT, "build"),
                    help="build tree with hvdrun, hvd-proxy and examples/hello_c (default build/)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "slurm", "results.json"),
                    help="JSON results (default bench/slurm/results.json)")
    ap.add_argument("--probe-runs", type=int, default=3,
                    help="untimed runs of srun and hvdrun whose tasks print their start and exit times, "
                         "for the breakdown (default 3)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per command (default 120)")
    args = ap.parse_args()
    if args.rounds < 1 or args.warmup < 0:
        ap.error("--rounds must be at least 1 and --warmup at least 0")
    build = os.path.abspath(args.build_dir)

    why = unavailable()
    if why:
        print(f"SKIPPED: no Slurm lab: {why}")
        return 77
    absent = missing(build)
    subs = [s for s in subjects(build) if s[0] not in absent]
    if "srun" not in [s[0] for s in subs] or not subs:
        print("SKIPPED: nothing to measure")
        return 77

    probe_subs = probes(build) if "hvdrun" in [s[0] for s in subs] else []
    script = batch_script(subs, args.rounds, args.warmup, args.timeout, probe_subs, args.probe_runs)
    env = {"PATH": f"{build}:/usr/sbin:/usr/bin:/sbin:/bin", "HVD_BIN": build}
    load_before = os.getloadavg()
    started = time.time()
    budget = 60 + (args.rounds + args.warmup + 2) * len(subs) * args.timeout
    with SlurmLab(nodes=NODES, cpus=CPUS) as lab:
        job = lab.sbatch([f"--nodes={NODES}", f"--ntasks={NTASKS}", f"--ntasks-per-node={PER_NODE}",
                          f"--chdir={lab.dir}"], script, env=env)
        state = lab.wait(job, timeout=budget)
        out = lab.output(job)
        lab_names = lab.node_ns + [lab.ctl, lab.hub]
    load_after = os.getloadavg()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    lab_ns_left = [n for n in lab_names if n in listed]

    runs = {s[0]: {"wall_ms": [None] * args.rounds, "joined_ms": [None] * args.rounds, "rc": [None] * args.rounds,
                   "warmup_wall_ms": []} for s in subs}
    errors, checks, allocation = [], {}, None
    probe_runs, probe_tasks = {}, {}  # (name, tag) -> (rc, t0, t1); (name, tag) -> [(start, end)]
    for line in out.splitlines():
        f = line.split()
        if line.startswith("SLBT ") and len(f) == 5:
            probe_tasks.setdefault((f[2], f[1]), []).append((float(f[3]), float(f[4])))
        elif line.startswith("SLB ") and len(f) == 7:
            _, tag, name, rc, t0, t1, joined = f
            wall = (float(t1) - float(t0)) * 1e3
            if tag.startswith("b"):
                probe_runs[(name, tag)] = (int(rc), float(t0), float(t1))
                continue
            if tag.startswith("w"):
                runs[name]["warmup_wall_ms"].append(round(wall, 2))
                continue
            r = int(tag)
            runs[name]["rc"][r] = int(rc)
            if int(rc) == 0:
                runs[name]["wall_ms"][r] = round(wall, 2)
                if joined != "-":
                    runs[name]["joined_ms"][r] = float(joined)
        elif line.startswith("SLBERR "):
            errors.append(line[7:])
        elif line.startswith("SLBCHK "):
            name, _, text = line[7:].partition(" ")
            checks.setdefault(name, []).append(text)
        elif line.startswith("SLBINFO allocation "):
            allocation = f[2:]

    # What each launcher really did, from the checks.
    status = {n: {"status": "missing", "reason": r} for n, r in absent.items()}
    for name, _, _ in subs:
        ok = [x for x in runs[name]["wall_ms"] if x is not None]
        failed = [e for e in errors if e.split()[1] == name]
        st = {"status": "ok", "reason": ""}
        if not ok:
            st = {"status": "failed", "reason": " | ".join(x.split(" ", 2)[2] for x in failed[-4:])
                  or "no run recorded (see the job output)"}
        elif len(ok) < args.rounds:
            st = {"status": "failed", "reason": f"{args.rounds - len(ok)} of {args.rounds} runs failed: "
                  + " | ".join(x.split(" ", 2)[2] for x in failed[-2:])}
        status[name] = st
    path = {}
    mp = checks.get("mpirun", [])
    if mp:
        sel = [l for l in mp if "Selected component" in l]
        srun_line = next((l.strip() for l in mp if l.strip().startswith("srun ")), None)
        path["mpirun"] = {"plm": re.sub(r".*Selected component \[(\w+)\].*", r"\1", sel[0]) if sel else None,
                          "launch": srun_line, "check_rc": next((l for l in mp if l.startswith("rc ")), None)}
        if path["mpirun"]["plm"] != "slurm" and status.get("mpirun", {}).get("status") == "ok":
            status["mpirun"] = {"status": "failed", "reason": f"did not use its slurm plm: {mp[-3:]}"}
    hy = checks.get("hydra", [])
    if hy:
        launch = next((l for l in hy if "Launch arguments:" in l), None)
        path["hydra"] = {"launch": re.sub(r".*Launch arguments: ", "", launch)[:200] if launch else None,
                         "uses_srun": bool(launch and re.search(r"Launch arguments: \S*srun ", launch)),
                         "check_rc": next((l for l in hy if l.startswith("rc ")), None)}
        if not path["hydra"]["uses_srun"] and status.get("hydra", {}).get("status") == "ok":
            status["hydra"] = {"status": "failed", "reason": f"its launch command is not srun: {hy[-3:]}"}
    if checks.get("hvdrun"):
        path["hvdrun"] = {"verbose": checks["hvdrun"][0]}

    # Breakdown of the probe runs: launcher start -> first task started -> last task started -> last task
    # ended -> launcher exit (ms, median [min-max] over the probe runs).
    breakdown = {}
    for name, _ in probe_subs:
        phases = {"to_first_task_start": [], "first_to_last_task_start": [], "last_start_to_last_task_end": [],
                  "last_task_end_to_exit": [], "wall": []}
        for (n, tag), (rc, t0, t1) in sorted(probe_runs.items()):
            tasks = probe_tasks.get((n, tag), [])
            if n != name or rc != 0 or len(tasks) != NTASKS:
                continue
            first, last = min(t[0] for t in tasks), max(t[0] for t in tasks)
            end = max(t[1] for t in tasks)
            for k, v in (("to_first_task_start", first - t0), ("first_to_last_task_start", last - first),
                         ("last_start_to_last_task_end", end - last), ("last_task_end_to_exit", t1 - end),
                         ("wall", t1 - t0)):
                phases[k].append(round(v * 1e3, 2))
        breakdown[name] = {k: summarize(v) for k, v in phases.items()}
        breakdown[name]["runs"] = phases

    summary = {}
    for name in runs:
        summary[name] = {"wall_ms": summarize(runs[name]["wall_ms"])}
        if any(x is not None for x in runs[name]["joined_ms"]):
            summary[name]["joined_ms"] = summarize(runs[name]["joined_ms"])

    def ratio(num, den_key="srun", field="wall_ms"):
        a = summary.get(num, {}).get(field)
        b = summary.get(den_key, {}).get("wall_ms")
        return a["median"] / b["median"] if a and b else None

    def round_ratios(num, field="wall_ms"):
        xs = [a / b for a, b in zip(runs.get(num, {}).get(field, []), runs["srun"]["wall_ms"])
              if a is not None and b is not None]
        return summarize(xs)

    ratios = {}
    for name in runs:
        if name != "srun":
            ratios[f"{name}/srun"] = {"of_medians": ratio(name), "per_round": round_ratios(name)}
    if "joined_ms" in summary.get("hvdrun", {}):
        ratios["hvdrun_joined/srun"] = {"of_medians": ratio("hvdrun", field="joined_ms"),
                                        "per_round": round_ratios("hvdrun", "joined_ms")}
    measured = ratios.get("hvdrun/srun", {}).get("of_medians")
    target = {"id": "slurm-launch-vs-srun",
              "target": f"hvdrun -np {NTASKS} of examples/hello_c inside the allocation, wall time to exit "
                        f"<= {TARGET}x plain `srun -N{NODES} -n{NTASKS} /bin/true`",
              "limit": TARGET, "measured": measured,
              "verdict": None if measured is None else ("MET" if measured <= TARGET else "MISSED")}

    labels = {s[0]: s[1] for s in subjects(build)}
    commands = {s[0]: " ".join(s[2]).replace(build + "/", "$BUILD/") for s in subjects(build)}
    data = {
        "bench": "slurm-launch",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": "bench/slurm/launch.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "rounds": args.rounds, "warmup_rounds": args.warmup,
        "lab": {"nodes": NODES, "cpus_per_node": CPUS, "machine_cpus": os.cpu_count(),
                "sbatch": f"--nodes={NODES} --ntasks={NTASKS} --ntasks-per-node={PER_NODE}",
                "allocation": allocation, "job_state": state},
        "load": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in load_after]},
        "versions": {"slurm": version("slurmd -V"),
                     "openmpi": version("ompi_info --version 2>/dev/null | head -1"),
                     "mpich": version("mpichversion 2>/dev/null | head -1") or
                              version("mpiexec.hydra --version 2>/dev/null | grep -i version")},
        "build_dir": build,
        "subjects": {n: {"label": labels[n], "command": commands[n], **status.get(n, {})} for n in labels},
        "launch_path": path,
        "runs": runs,
        "summary": summary,
        "ratios": ratios,
        "target": target,
        "breakdown": {"what": "untimed runs whose tasks are wrapped in bash printing $EPOCHREALTIME at start "
                              "and exit: " + "; ".join(f"{n}: {' '.join(a).replace(build + '/', '$BUILD/')}"
                                                       for n, a in probe_subs), **breakdown},
        "errors": errors[-40:],
        "lab_namespaces_left": lab_ns_left,
        "duration_s": round(time.time() - started, 1),
    }
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)

    # The table.
    print(f"Launch through srun: {NODES} nodes x {PER_NODE} tasks in one allocation ({data['lab']['sbatch']}), "
          f"{args.rounds} rounds (+{args.warmup} warm-up), interleaved; ms, median [min-max]; "
          f"load {load_before[0]:.2f} -> {load_after[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'subject':<58} {'wall to exit':>22} {'÷ srun':>8}   per round")
    for name in labels:
        st = data["subjects"][name]
        if st.get("status") in ("missing",) or name not in summary or not summary[name]["wall_ms"]:
            print(f"{labels[name]:<58} {st.get('status', '?')}: {st.get('reason', '')}")
            continue
        rr = ratios.get(f"{name}/srun", {})
        r_med = f"{rr['of_medians']:.2f}x" if rr.get("of_medians") else "-"
        print(f"{labels[name]:<58} {fmt(summary[name]['wall_ms']):>22} {r_med:>8}   "
              f"{fmt(rr.get('per_round'), 2) if rr.get('per_round') else '-'}"
              + ("" if st["status"] == "ok" else f"   ({st['status']}: {st['reason']})"))
        if "joined_ms" in summary[name]:
            rj = ratios["hvdrun_joined/srun"]
            print(f"{'  the same runs: start to all ' + str(NTASKS) + ' ranks joined':<58} "
                  f"{fmt(summary[name]['joined_ms']):>22} {rj['of_medians']:>7.2f}x   {fmt(rj['per_round'], 2)}")
    for name, b in breakdown.items():
        if b.get("wall"):
            print(f"breakdown, {name} ({b['wall']['n']} untimed runs, tasks wrapped in bash): "
                  + ", ".join(f"{k} {fmt(b[k])}" for k in ("to_first_task_start", "first_to_last_task_start",
                                                           "last_start_to_last_task_end", "last_task_end_to_exit",
                                                           "wall")))
    for name, p in path.items():
        print(f"launch path, {name}: {json.dumps(p)}")
    if target["verdict"]:
        print(f"target {target['id']}: hvdrun ÷ srun = {measured:.2f}x (limit {TARGET}x): {target['verdict']}")
    if lab_ns_left:
        print(f"WARNING: lab namespaces left behind: {lab_ns_left}")
    # One line for bench/compare.
    print(json.dumps({"bench": "slurm-launch", "summary": summary, "status": data["subjects"],
                      "ratios": {k: v["of_medians"] for k, v in ratios.items()}}, sort_keys=True))
    if args.out:
        print(f"wrote {args.out}")
    return 0 if all(data["subjects"][n].get("status") in ("ok", "missing") for n in labels) else 1


if __name__ == "__main__":
    sys.exit(main())
