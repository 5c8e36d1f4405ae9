"""horovod.common.exceptions on hvd: Horovod's exception classes are hvd's."""

from hvd.common.exceptions import (  # noqa: F401
    HorovodInternalError,
    HorovodVersionMismatchError,
    HostsUpdatedInterrupt,
)
