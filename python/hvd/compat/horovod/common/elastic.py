"""horovod.common.elastic on hvd: hvd.common.elastic's State, ObjectState and run_fn."""

from hvd.common.elastic import ObjectState, State, run_fn  # noqa: F401
