"""usable_cpus(): how many CPUs this process may run on (its affinity where the platform has one)."""

import os


def usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
