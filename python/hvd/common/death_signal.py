"""Child processes that end with the thread that started them (Linux's PR_SET_PDEATHSIG), so that a driver killed
with SIGKILL leaves no hvdrun, and no ranks of it, running."""
import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1

try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):  # pragma: no cover
    _prctl = None


def preexec_fn(sig: int = signal.SIGTERM):
    """A subprocess.Popen preexec_fn for a child that gets `sig` when the thread that forks it ends (also at once,
    when this process is already gone by the time the child sets it up); None where the platform has no prctl.
    Call it in the thread that calls Popen and that lives as long as the child should."""
    if _prctl is None:
        return None
    parent = os.getpid()

    def set_up() -> None:
        _prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return set_up
