"""The slots trials run on: hosts (localhost, -H style hosts, a hostfile), a Slurm allocation's nodes, or a Dask
cluster's eligible worker processes; and the packing of trials onto them.

Contract. Pool(hosts, kind) holds {host: slots}. take(slots_per_rank, ranks, nodes) reserves a placement for one
trial or returns None when the free slots do not allow it now: without nodes, ranks fill one host when one has
room (the fullest such host, so that whole hosts stay free for larger trials), else host by host in order; with
nodes (DeepHyper's nodes per evaluation), `nodes` hosts that are entirely free get ranks // nodes ranks each (a
trial owns its nodes, as in one allocation split into evaluations). give(placement) frees it. capacity_error()
says, before anything runs, why a trial could never fit (ValueError text naming the numbers), or None.
Threading: used by the tuner's main thread only.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from typing import Dict, List, Optional, Tuple

Placement = List[Tuple[str, int]]  # (host, ranks) in rank order


class Pool:
    def __init__(self, hosts: "List[Tuple[str, int]]", kind: str, where: str):
        self.kind = kind        # "hosts", "slurm" or "dask"
        self.where = where      # for messages: "localhost:4", "the Slurm allocation 12", "the Dask cluster at ..."
        self.slots: Dict[str, int] = dict(hosts)
        self.free: Dict[str, int] = dict(hosts)

    @property
    def total(self) -> int:
        return sum(self.slots.values())

    def capacity_error(self, slots_per_rank: int, ranks: int, nodes: Optional[int]) -> Optional[str]:
        need = slots_per_rank * ranks
        if nodes is None:
            if need > self.total:
                return (f"workers_per_trial={ranks} x {slots_per_rank} slot(s) each needs {need} slots; {self.where} "
                        f"has {self.total}")
            return None
        per_node = ranks // nodes
        fit = [h for h, s in self.slots.items() if s >= per_node * slots_per_rank]
        if len(fit) < nodes:
            return (f"nodes_per_trial={nodes} with {per_node} rank(s) per node needs {nodes} node(s) of "
                    f"{per_node * slots_per_rank} slot(s); {self.where} has {len(fit)}")
        return None

    def take(self, slots_per_rank: int, ranks: int, nodes: Optional[int]) -> Optional[Placement]:
        if nodes is not None:
            per_node = ranks // nodes
            idle = [h for h in self.slots if self.free[h] == self.slots[h] and self.slots[h] >= per_node * slots_per_rank]
            if len(idle) < nodes:
                return None
            placement = [(h, per_node) for h in idle[:nodes]]
            for h in idle[:nodes]:
                self.free[h] = 0  # the trial owns the node
            return placement
        need = slots_per_rank * ranks
        roomy = [h for h in self.slots if self.free[h] >= need]
        if roomy:
            host = min(roomy, key=lambda h: self.free[h])
            self.free[host] -= need
            return [(host, ranks)]
        if sum(self.free[h] // slots_per_rank for h in self.slots) < ranks:
            return None
        placement, left = [], ranks
        for host in self.slots:
            n = min(left, self.free[host] // slots_per_rank)
            if n:
                placement.append((host, n))
                self.free[host] -= n * slots_per_rank
                left -= n
            if not left:
                break
        return placement

    def give(self, placement: Placement, slots_per_rank: int, nodes: Optional[int]) -> None:
        for host, ranks in placement:
            self.free[host] = self.slots[host] if nodes is not None else self.free[host] + ranks * slots_per_rank


def expand_tasks_per_node(text: str) -> List[int]:
    """SLURM_TASKS_PER_NODE ("2(x3),1") -> [2, 2, 2, 1]; ValueError naming it when it does not parse."""
    counts = []
    for item in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if not match:
            raise ValueError(f"SLURM_TASKS_PER_NODE={text!r} does not parse")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def slurm_pool(env: "os._Environ | dict") -> Pool:
    """The allocation's nodes (scontrol show hostnames) with their task counts as slots."""
    job, nodelist = env.get("SLURM_JOB_ID", ""), env.get("SLURM_JOB_NODELIST", "")
    if not nodelist:
        raise ValueError(f"inside the Slurm allocation {job} SLURM_JOB_NODELIST is not set")
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise ValueError(f"cannot expand SLURM_JOB_NODELIST={nodelist!r} with scontrol: {e}") from None
    nodes = out.split()
    counts = expand_tasks_per_node(env.get("SLURM_TASKS_PER_NODE", ",".join("1" for _ in nodes)))
    if len(counts) != len(nodes):
        raise ValueError(f"SLURM_TASKS_PER_NODE={env.get('SLURM_TASKS_PER_NODE')!r} does not match the "
                         f"{len(nodes)} nodes of SLURM_JOB_NODELIST={nodelist!r}")
    return Pool(list(zip(nodes, counts)), "slurm", f"the Slurm allocation {job}")


def slots_per_rank(cpus_per_worker: float) -> int:
    return max(1, math.ceil(cpus_per_worker))
