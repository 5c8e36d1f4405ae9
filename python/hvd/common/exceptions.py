"""Exceptions: libhvd's error classes (raised by hvd._core) and Horovod's Python-side ones.

HorovodInternalError is a RuntimeError, as in Horovod; libhvd's subclasses say what failed:
MismatchError (ranks disagree), ShutDownError, CommunicationError (a timeout, a backend failure) and
its subclass PeerLostError (a peer process died or became unreachable), StalledError,
NotInitializedError, InitError, HostsUpdatedError (elastic jobs: an operation ended because the job's
membership changed).
Bad arguments raise InvalidArgumentError, a ValueError (Horovod raises plain ValueError there).

HostsUpdatedInterrupt is not an error: elastic jobs raise it on every rank together from
State.commit() / State.check_host_updates() when the job is re-forming.
"""

from hvd._core import (  # noqa: F401  (re-exported)
    CommunicationError,
    HorovodInternalError,
    HostsUpdatedError,
    InitError,
    InvalidArgumentError,
    MismatchError,
    NotInitializedError,
    PeerLostError,
    ShutDownError,
    StalledError,
)


class HostsUpdatedInterrupt(RuntimeError):
    """Elastic training: hosts were added to or removed from the job, which is re-forming.

    Raised on every rank at the same point, by State.commit() or State.check_host_updates(), when libhvd
    reports that the driver has begun a new round since this process joined. hvd.elastic.run catches it,
    re-initializes (the process takes its place in the new round) and calls the function again, with the
    state as it was when the interrupt was raised (no restore). skip_sync is True when hosts were only
    removed: every surviving rank already holds the same state, so the broadcast from rank 0 is skipped.
    """

    def __init__(self, skip_sync=False):
        super().__init__("hosts updated: the elastic job is re-forming" + (" (removals only)" if skip_sync else ""))
        self.skip_sync = skip_sync


class HorovodVersionMismatchError(ImportError):
    """Horovod raises it when its extension was built for another framework version; kept for imports."""
