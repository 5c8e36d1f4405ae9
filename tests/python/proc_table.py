"""The process table (/proc) as the tests read it. A process that ends while it is read is passed over."""

import os


def pids():
    """Every process's pid."""
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def cmdline(pid: int) -> str:
    """A process's command line, arguments joined by spaces ('' when it has gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def environ(pid: int) -> "list[bytes] | None":
    """A process's environment as NAME=VALUE byte strings (None when it has gone)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return None


def parent(pid: int) -> "int | None":
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def children(pid: int) -> "list[int]":
    """The processes whose parent is `pid`."""
    return [p for p in pids() if parent(p) == pid]
