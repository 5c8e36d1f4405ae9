"""The output of ranks that run as threads of a process hosting other work (a rank in a Dask worker process): what
such a rank's thread prints goes to its driver, as a rank started by hvdrun has its output forwarded, instead of
into the host process's log.

Contract. capture(send) installs, once per process, a router as sys.stdout and sys.stderr (each wraps the stream
it replaced) and registers the calling thread: from then on, text that thread writes to sys.stdout or sys.stderr
is cut into whole lines and passed to send(stream, text) ("stdout" or "stderr", one or more lines ending in
"\\n"); the rest of a line waits for its end, for flush() or for release(). Writes of every other thread go to the
replaced stream unchanged. release() sends what is left and unregisters the thread; the router stays (other
ranks of the process may still use it) and passes everything through once no thread is registered.

Limits: output written below Python (a C library writing to file descriptor 1 or 2, a subprocess) and output of
threads the rank starts itself stays the host process's. A send that raises (the driver's connection is gone)
drops that text.
Threading: capture() and release() from the rank's thread; writes from any thread.
"""

from __future__ import annotations

import sys
import threading
from typing import Callable, Dict

_lock = threading.Lock()
_sinks: Dict[int, "_Sink"] = {}


class _Sink:
    def __init__(self, send: Callable[[str, str], None]):
        self.send = send
        self.pending = {"stdout": "", "stderr": ""}

    def write(self, stream: str, text: str) -> None:
        text = self.pending[stream] + text
        cut = text.rfind("\n") + 1
        self.pending[stream] = text[cut:]
        if cut:
            self._send(stream, text[:cut])

    def flush(self, stream: str) -> None:
        text, self.pending[stream] = self.pending[stream], ""
        if text:
            self._send(stream, text + "\n")

    def _send(self, stream: str, text: str) -> None:
        try:
            self.send(stream, text)
        except Exception:  # the driver is gone: nobody to show it to
            pass


class _Router:
    """sys.stdout or sys.stderr while ranks run as threads of this process."""

    def __init__(self, name: str, replaced):
        self._name = name
        self.replaced = replaced

    def write(self, text: str) -> int:
        sink = _sinks.get(threading.get_ident())
        if sink is None:
            return self.replaced.write(text) if self.replaced is not None else len(text)
        sink.write(self._name, str(text))
        return len(text)

    def flush(self) -> None:
        sink = _sinks.get(threading.get_ident())
        if sink is not None:
            sink.flush(self._name)
        elif self.replaced is not None:
            self.replaced.flush()

    def __getattr__(self, name: str):
        return getattr(self.replaced, name)


def capture(send: Callable[[str, str], None]) -> None:
    """From now on this thread's sys.stdout and sys.stderr text goes to send (see the module docstring)."""
    with _lock:
        if not isinstance(sys.stdout, _Router):
            sys.stdout = _Router("stdout", sys.stdout)
        if not isinstance(sys.stderr, _Router):
            sys.stderr = _Router("stderr", sys.stderr)
        _sinks[threading.get_ident()] = _Sink(send)


def release() -> None:
    """Sends this thread's unfinished lines and stops capturing it."""
    with _lock:
        sink = _sinks.pop(threading.get_ident(), None)
    if sink is not None:
        sink.flush("stdout")
        sink.flush("stderr")
