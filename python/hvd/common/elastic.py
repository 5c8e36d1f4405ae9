"""Elastic training, framework-independent part (Horovod's horovod.common.elastic): State, ObjectState,
run_fn.

An elastic job keeps training while workers fail and hosts come and go. The training function is wrapped
by run_fn (hvd.elastic.run for torch) and takes a State as its first argument:

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()          # save + check_host_updates: a collective, every rank at the same point

When a collective fails (HorovodInternalError), the wrapper restores the last commit, re-initializes
(the process takes its place in the job's next round) and calls the function again after sync()
has given every rank rank 0's state. When libhvd reports that the job is re-forming (check_host_updates
raises HostsUpdatedInterrupt on every rank together), the wrapper re-initializes without restoring.

What counts as a host update, and when the job re-formed, is libhvd's business (it compares the
rendezvous round this process joined with the driver's current one); this module only maps it to
Horovod's exceptions and calls.
"""

import copy
import enum
import functools

from hvd import _core
from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt, MismatchError


class HostUpdateResult(enum.IntFlag):
    """What changed when the job re-formed (Horovod's horovod.runner.elastic.worker.HostUpdateResult), as
    libhvd's hvd_elastic_check_host_updates reports it (HVD_HOSTS_REMOVED, HVD_HOSTS_ADDED)."""

    no_update = 0
    removed = _core.HOSTS_REMOVED
    added = _core.HOSTS_ADDED
    mixed = _core.HOSTS_REMOVED | _core.HOSTS_ADDED


def elastic_enabled():
    """True in an elastic job (HOROVOD_ELASTIC=1, set by hvdrun's elastic driver). Needs no init."""
    return _core.elastic_enabled()


def elastic_round():
    """The rendezvous round this process's libhvd runs in; -1 when hvd is not initialized or the job is not
    elastic. Each re-formation of an elastic job is a new round."""
    return _core.elastic_round()


def _check_host_updates():
    """libhvd's check, a collective over the job (every rank calls it at the same point): None when the job
    has not re-formed since this process's round (at once, without communication, in a job that is not
    elastic); else a HostUpdateResult, the same on every rank: what changed over the newer rounds
    (no_update when a newer round began with the same members)."""
    changes = _core.elastic_check_host_updates()
    return None if changes is None else HostUpdateResult(changes)


def _callable_or_raise(what, value):
    if not callable(value):
        raise ValueError(f"{what} must be callable, got {value!r}")
    return value


class Restorable:
    """Something elastic training saves, restores and synchronizes: a whole State, or one object of a
    TorchState. Subclasses implement save(), restore() and sync(); reset() does nothing by default."""

    def save(self):
        """Saves the state in memory."""
        raise NotImplementedError()

    def restore(self):
        """Restores the last committed state, undoing uncommitted changes."""
        raise NotImplementedError()

    def sync(self):
        """Gives every rank rank 0's state (a collective)."""
        raise NotImplementedError()

    def reset(self):
        """Adapts the state to the re-formed job (before the reset callbacks and sync)."""


class State(Restorable):
    """State kept in memory and synchronized across workers (Horovod's State).

    bcast_object(obj) broadcasts obj from rank 0 and returns rank 0's value on every rank; get_rank()
    returns this process's rank. Subclasses implement save(), restore() and sync(); reset() is called
    after every re-initialization, before the reset callbacks.
    """

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = _callable_or_raise("State(bcast_object=...)", bcast_object)
        self._rank = _callable_or_raise("State(get_rank=...)", get_rank)
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Adds callbacks (a list of functions taking no argument) to call after each reset, in order:
        after re-initialization (hvd.size() is the new size) and before state is synchronized. Typical use:
        scale the learning rate by the new size."""
        if callable(callbacks) or isinstance(callbacks, (str, bytes)):
            raise ValueError(f"register_reset_callbacks expects a list of callables, got {callbacks!r}")
        try:
            callbacks = list(callbacks)
        except TypeError:
            raise ValueError(f"register_reset_callbacks expects a list of callables, got {callbacks!r}") from None
        for callback in callbacks:
            _callable_or_raise("each reset callback", callback)
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """Called by the run loop after each re-initialization: reset(), then the reset callbacks."""
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state (what restore() goes back to) and checks for host updates. A collective: every
        rank must commit at the same points. Commits copy the whole state, so committing every few batches
        rather than every batch trades lost steps on a failure for speed.

        Raises HostsUpdatedInterrupt on every rank when the job is re-forming."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank together when the job has re-formed since this process
        joined its round: hosts or workers were added or removed (skip_sync=True when they were only
        removed). A collective: every rank must call it at the same point. Returns None when nothing
        changed, and always in a job that is not elastic.

        libhvd answers it: rank 0 asks the rendezvous server for rounds newer than this process's and
        broadcasts the answer, so every rank raises at the same step, and no update is lost or merged away
        (rounds are numbered, not time-stamped). Raises HorovodInternalError (CommunicationError) when the
        server cannot be asked."""
        changes = _check_host_updates()
        if changes is not None:
            # Only removals: every surviving rank holds the state committed at this same step already.
            raise HostsUpdatedInterrupt(skip_sync=changes == HostUpdateResult.removed)


class ObjectState(State):
    """State made of plain Python objects, given as keyword arguments and exposed as attributes.

    save() keeps a deep copy of every attribute, so changing a list or dict in place after a commit is
    undone by restore(). sync() broadcasts rank 0's current values (picklable with cloudpickle).
    """

    def __init__(self, bcast_object, get_rank, **kwargs):
        for name in kwargs:
            if name.startswith("_") or hasattr(type(self), name):
                raise ValueError(f"{type(self).__name__}: attribute name {name!r} is reserved (it starts with '_' "
                                 "or names a method or attribute of the state); choose another name")
        self._bcast_object = bcast_object
        self._saved_state = {}
        # The attributes are the objects given; the saved state is a copy of them.
        for name, value in kwargs.items():
            setattr(self, name, value)
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)
        self._saved_state = self._copy_attrs(kwargs.keys())

    def _copy_attrs(self, names):
        saved = {}
        for name in names:
            value = getattr(self, name)
            try:
                saved[name] = copy.deepcopy(value)
            except Exception as e:
                raise ValueError(f"{type(self).__name__}: cannot save attribute {name!r} (a {type(value).__name__}): "
                                 f"copy.deepcopy failed: {e}") from e
        return saved

    def save(self):
        self._saved_state = self._copy_attrs(self._saved_state.keys())

    def restore(self):
        # Copies again, so that changes made after this restore do not alter the saved values.
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))

    def sync(self):
        if self._saved_state:
            current = {name: getattr(self, name) for name in self._saved_state}
            for name, value in self._bcast_object(current).items():
                setattr(self, name, value)
        # What every rank now holds is the state to go back to: a process that has just joined (and may be
        # rank 0 of a later round) must not restore the values it was constructed with.
        self.save()


def run_fn(func, reset):
    """Wraps func(state, *args, **kwargs) in the elastic run loop; reset() re-initializes the framework
    (shutdown, then init).

    Loop: sync() the state unless the last event was a removal-only host update; call func and return its
    result. On HorovodInternalError (a peer failed, the job is shutting down): restore() the last commit,
    reset, sync. On HostsUpdatedInterrupt: reset, and sync unless skip_sync. After each reset,
    state.on_reset() runs reset() and the reset callbacks.

    Errors that a retry would repeat propagate: MismatchError (the ranks disagree on an operation: a bug
    of the script), and any HorovodInternalError in a job that is not elastic (no driver can re-form
    it). A worker that the re-formed job leaves out gets the error of its init (a ValueError naming the
    slot) from this wrapper.
    """
    _callable_or_raise("the elastic training function", func)
    _callable_or_raise("run_fn(reset=...)", reset)

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not isinstance(state, State):
            raise ValueError(f"{getattr(func, '__name__', func)!s}: the first argument of an elastic training "
                             f"function must be a State (such as hvd.elastic.TorchState), got {state!r}")
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except MismatchError:
                raise
            except HorovodInternalError:
                if not elastic_enabled():
                    raise
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            reset()
            state.on_reset()

    return wrapper
