"""horovod.common on hvd: framework-independent modules (exceptions, process_sets)."""
