"""TorchState: the state of a PyTorch training process for elastic training (Horovod's
horovod.torch.elastic.state).

Keyword arguments whose type has a handler in the registry (models, optimizers, LR schedulers,
ElasticSamplers) are saved, restored and synchronized through their state_dict(); the others are plain
attributes handled by ObjectState. get_handler_registry() / set_handler_registry() expose the registry, a
list of (type, handler class) pairs searched in order with isinstance().
"""

import copy

import torch

from hvd.common.elastic import ObjectState, Restorable
from hvd.torch.elastic.sampler import ElasticSampler
from hvd.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters
from hvd.torch.mpi_ops import rank


def _broadcast_state(value):
    return broadcast_object(value, root_rank=0, name="elastic.state")


class TorchState(ObjectState):
    """State of a PyTorch training process.

    model, optimizer: optional; further models, optimizers, schedulers and samplers may be given as other
    keyword arguments. Every keyword argument becomes an attribute. Assigning a new object to a handled
    attribute (state.model = other) makes the handler track it, and saves it at once.

    commit() (save + check for host updates) copies each handled object's state_dict() and each plain
    attribute; restore() loads them back; sync() broadcasts rank 0's current values to every rank.
    """

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(dict(model=model, optimizer=optimizer))
        handlers, plain = _get_handlers(kwargs)
        for name in handlers:
            if name.startswith("_") or hasattr(type(self), name):
                raise ValueError(f"TorchState: attribute name {name!r} is reserved (it starts with '_' or names a "
                                 "method or attribute of the state); choose another name")
        self._handlers = handlers
        for name, handler in handlers.items():
            setattr(self, name, handler.value)
        super().__init__(bcast_object=_broadcast_state, get_rank=rank, **plain)

    def save(self):
        self._step("save")

    def restore(self):
        self._step("restore")

    def sync(self):
        self._step("sync")

    def reset(self):
        # After every re-initialization, with or without a sync to follow: objects that depend on the
        # job's ranks (samplers) adapt to the new ones.
        self._step("reset")

    def _step(self, name):
        """Runs the step `name` (save, restore, sync or reset) on every handled object, then on the plain
        attributes (ObjectState's own step)."""
        for handler in self._handlers.values():
            getattr(handler, name)()
        getattr(super(), name)()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers")
        if handlers is not None and name in handlers and name in self.__dict__:
            handlers[name].set_value(value)
        super().__setattr__(name, value)


class StateHandler(Restorable):
    """Saves, restores and synchronizes one object of a TorchState. value: the object."""

    def __init__(self, value):
        self.value = value

    def set_value(self, value):
        self.value = value
        self.save()


class _StateDictHandler(StateHandler):
    """An object with state_dict() / load_state_dict(): saves a deep copy of its state_dict()."""

    def __init__(self, value):
        super().__init__(value)
        self._saved_state = copy.deepcopy(self.value.state_dict())

    def save(self):
        self._saved_state = copy.deepcopy(self.value.state_dict())

    def restore(self):
        # load_state_dict copies the tensors of a model and replaces an optimizer's state by copies, so the
        # saved copy stays intact for a later restore.
        self.value.load_state_dict(self._saved_state)

    def sync(self):
        self.value.load_state_dict(_broadcast_state(self.value.state_dict()))


class ModelStateHandler(_StateDictHandler):
    """torch.nn.Module: sync broadcasts every tensor of state_dict() (parameters and buffers) in place."""

    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(_StateDictHandler):
    """torch.optim.Optimizer (a DistributedOptimizer too): sync is broadcast_optimizer_state."""

    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class LRSchedulerStateHandler(_StateDictHandler):
    """torch.optim.lr_scheduler schedulers: their state_dict() (epoch counters, last learning rates)."""

    def restore(self):
        # A scheduler's state_dict holds lists that load_state_dict adopts as they are: give it a copy.
        self.value.load_state_dict(copy.deepcopy(self._saved_state))


class SamplerStateHandler(_StateDictHandler):
    """ElasticSampler: its epoch and count of processed samples; re-partitioned after every reset."""

    def reset(self):
        self.value.reset()


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (torch.optim.lr_scheduler._LRScheduler, LRSchedulerStateHandler),
    (torch.optim.lr_scheduler.ReduceLROnPlateau, LRSchedulerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    """The list of (type, handler class) pairs TorchState searches, in order, for each keyword argument."""
    return _handler_registry


def set_handler_registry(registry):
    """Replaces the registry: a list of (type, handler class) pairs; each handler class takes the object
    and has save(), restore(), sync() and set_value() (subclass StateHandler)."""
    global _handler_registry
    try:
        entries = list(registry)
    except TypeError:
        raise ValueError(f"set_handler_registry expects a list of (type, handler class) pairs, got {registry!r}") \
            from None
    for entry in entries:
        if (not isinstance(entry, tuple) or len(entry) != 2 or not isinstance(entry[0], (type, tuple))
                or not callable(entry[1])):
            raise ValueError(f"set_handler_registry: {entry!r} is not a (type, handler class) pair")
    _handler_registry = registry


def _get_handler(value):
    for handler_type, handler_cls in _handler_registry:
        if isinstance(value, handler_type):
            return handler_cls(value)
    return None


def _get_handlers(kwargs):
    handlers = {}
    plain = {}
    for name, value in kwargs.items():
        handler = _get_handler(value)
        if handler is not None:
            handlers[name] = handler
        else:
            plain[name] = value
    return handlers, plain
