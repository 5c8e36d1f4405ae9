"""Process sets: collectives among a subset of ranks (Horovod's horovod.common.process_sets).

A ProcessSet holds sorted global ranks; it gets an id when registered, either statically by
init(process_sets=[...]) or at run time by add_process_set() (which needs HOROVOD_DYNAMIC_PROCESS_SETS=1
or init(process_sets="dynamic")). Registration is collective: every rank of the job calls it, with the
same ranks, in the same order. The sets themselves live in libhvd (hvd_add_process_set, ...).
"""

from hvd import _core
from hvd.common.exceptions import InvalidArgumentError


__all__ = ["ProcessSet", "add_process_set", "global_process_set", "remove_process_set"]

class ProcessSet:
    """A set of global ranks. `process_set_id` is None until the set is registered."""

    def __init__(self, ranks_or_comm):
        self.process_set_id = None
        self.mpi_comm = None
        if hasattr(ranks_or_comm, "Get_rank") and hasattr(ranks_or_comm, "Get_size"):
            raise ValueError("ProcessSet: an MPI communicator needs Horovod built with MPI; hvd runs on Gloo. "
                             "Pass the ranks instead.")
        try:
            ranks = list(ranks_or_comm)
        except TypeError:
            raise ValueError(f"ProcessSet: expected an iterable of ranks, got {type(ranks_or_comm).__name__}") from None
        for r in ranks:
            if isinstance(r, bool) or not isinstance(r, int):
                raise ValueError(f"ProcessSet: rank {r!r} is not an int")
        self.ranks = sorted(ranks)

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """Number of ranks, or None while unregistered."""
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set; None while unregistered."""
        if self.process_set_id is None:
            return None
        me = _core.rank()
        if me not in self.ranks:
            raise ValueError("Process is not part of provided process set.")
        return self.ranks.index(me)

    def included(self):
        """True when this process is a member (None if the set has no ranks yet)."""
        if self.ranks is None:
            return None
        return _core.rank() in self.ranks

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm={self.mpi_comm})"

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0
global_process_set.ranks = None  # filled in by init()

# id -> ProcessSet object, for the sets registered through this module.
_registered = {0: global_process_set}


def _on_init(static_sets):
    """Called by init(): the global set's ranks, and the ids of static sets (1, 2, ... in order)."""
    global_process_set.ranks = list(range(_core.size()))
    _registered.clear()
    _registered[0] = global_process_set
    for i, ps in enumerate(static_sets, start=1):
        ps.process_set_id = i
        _registered[i] = ps


def _on_shutdown():
    for ps in list(_registered.values()):
        if ps is not global_process_set:
            ps._invalidate()
    _registered.clear()
    _registered[0] = global_process_set


def _check_initialized():
    if not _core.is_initialized():
        raise ValueError("Horovod has not been initialized; use hvd.init().")


def add_process_set(process_set):
    """Registers a process set (a ProcessSet or a list of ranks) on every rank; returns the ProcessSet.

    Collective over the whole job. ValueError: not initialized, dynamic process sets not enabled, ranks
    out of range, or the same ranks as an existing set ("Attempted to add a duplicate process set")."""
    _check_initialized()
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError(f"{ps} is already registered")
    ps.process_set_id = _core.add_process_set(ps.ranks)
    _registered[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Removes a set added by add_process_set (collective). False for the global set or an unregistered
    set; True once removed. ValueError when dynamic process sets are not enabled."""
    _check_initialized()
    if process_set is global_process_set or process_set.process_set_id in (None, 0):
        return False
    try:
        _core.remove_process_set(process_set.process_set_id)
    except InvalidArgumentError as e:
        if "no such process set" in str(e):
            return False
        raise
    _registered.pop(process_set.process_set_id, None)
    process_set._invalidate()
    return True


def _id_of(process_set):
    """The id to pass to libhvd; ValueError for what is not a ProcessSet or one that is not registered."""
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f"process_set must be a ProcessSet (hvd.global_process_set, or one passed to hvd.init or "
                         f"hvd.add_process_set), got {process_set!r}")
    ps_id = process_set.process_set_id
    if ps_id is None:
        raise ValueError(f"{process_set} has not been registered: pass it to hvd.init(process_sets=...) "
                         "or hvd.add_process_set()")
    return ps_id
