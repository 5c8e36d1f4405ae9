"""Framework-independent parts of hvd: lifecycle, topology, process sets, exceptions."""
