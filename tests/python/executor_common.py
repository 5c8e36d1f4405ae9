"""What the executor tests share: functions and a class the ranks run, and process checks for the driver.

The ranks import this module by name (the driver sends its sys.path to them), so its functions travel by
reference and every backend (hvdrun's local and ssh launchers, Dask) runs the same code.
"""

import time


def allreduce_for(seconds):
    """Allreduces a one every 10 ms for seconds; returns the rank."""
    import numpy as np

    import hvd.numpy as hn

    hn.init()
    end = time.time() + seconds
    while time.time() < end:
        hn.allreduce(np.array([1.0]), op=hn.Sum)
        time.sleep(0.01)
    return hn.rank()


def noop():
    return None


class Accumulator:
    """Each rank's state for execute(): a value that grows by the allreduced sum of ones (the size) per step."""

    def __init__(self, start):
        import socket

        import hvd.numpy as hn

        hn.init()
        self.rank = hn.rank()
        self.host = socket.gethostname()
        self.value = start
        self.steps = 0

    def step(self):
        import numpy as np

        import hvd.numpy as hn

        self.value += float(hn.allreduce(np.array([1.0]), op=hn.Sum)[0])
        self.steps += 1
        return self.value


def alive(pid):
    """True while pid runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids, timeout):
    """Waits up to timeout s for every pid to end; returns those still alive."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)
