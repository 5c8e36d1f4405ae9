"""horovod.common.process_sets on hvd: the same ProcessSet class and registry as hvd.common.process_sets."""

from hvd.common.process_sets import (  # noqa: F401
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
