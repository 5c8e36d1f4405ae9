"""Child processes that end with the thread that started them (Linux's PR_SET_PDEATHSIG), so that a driver killed
with SIGKILL leaves no hvdrun, hvd-rendezvous or hvd-proxy, and no ranks of them, running.

The programs set the signal themselves, from HVD_PARENT_DEATH_SIGNAL in their environment, rather than in a
subprocess preexec function: a preexec function makes subprocess fork this process instead of vfork'ing it, which
with torch loaded costs about 30 ms and leaves every page of the driver copy-on-write for the rest of its life
(a page fault on the first write to each: about 0.4 s over a later import of pandas and the interpreter's
teardown on a 2-vCPU host)."""
import os
import signal
import sys
from typing import Dict

VARIABLE = "HVD_PARENT_DEATH_SIGNAL"


def child_environment(sig: int = signal.SIGTERM) -> Dict[str, str]:
    """The variable to add to the environment of an hvdrun, hvd-rendezvous or hvd-proxy child, so that it gets
    `sig` when the thread that calls Popen ends (at once, when this process is already gone by the time the child
    sets it up); empty where the platform has no parent-death signal. Start the child in the thread that lives as
    long as the child should."""
    if not sys.platform.startswith("linux"):
        return {}
    return {VARIABLE: f"{int(sig)}:{os.getpid()}"}
