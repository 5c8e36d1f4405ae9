"""Exceptions: libhvd's error classes (raised by hvd._core) and Horovod's Python-side ones.

HorovodInternalError is a RuntimeError, as in Horovod; libhvd's subclasses say what failed:
MismatchError (ranks disagree), ShutDownError, CommunicationError (a peer died, a timeout),
StalledError, NotInitializedError, InitError. Bad arguments raise InvalidArgumentError, a ValueError
(Horovod raises plain ValueError there).
"""

from hvd._core import (  # noqa: F401  (re-exported)
    CommunicationError,
    HorovodInternalError,
    InitError,
    InvalidArgumentError,
    MismatchError,
    NotInitializedError,
    ShutDownError,
    StalledError,
)


class HostsUpdatedInterrupt(RuntimeError):
    """Elastic training: the set of hosts changed (raised between steps). Kept for Horovod scripts that
    import it; hvd does not run elastic jobs yet, so it is never raised."""

    def __init__(self, skip_sync=False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync


class HorovodVersionMismatchError(ImportError):
    """Horovod raises it when its extension was built for another framework version; kept for imports."""
