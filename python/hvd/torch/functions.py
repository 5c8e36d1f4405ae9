"""Helpers that make every rank start from the same state: parameters, optimizer state, Python objects
(broadcast_object and allgather_object live in hvd.torch.objects and are exported here too, as Horovod does)."""

import collections

import torch

from hvd.torch.mpi_ops import broadcast_async, broadcast_async_, synchronize
from hvd.torch.objects import allgather_object, broadcast_object  # noqa: F401
from hvd.torch.optimizer import _DistributedOptimizer


def broadcast_parameters(params, root_rank):
    """Overwrites, in place, every tensor of `params` with root_rank's value (global set).

    params: a dict of name -> tensor (such as model.state_dict(); broadcast in sorted key order, the key
    naming each broadcast), or a list of tensors or of (name, tensor) tuples. Any other type, the
    generator model.named_parameters() included, raises ValueError. Every broadcast is started before
    the first is waited for."""
    if isinstance(params, dict):
        items = sorted(params.items(), key=lambda item: item[0])
    elif isinstance(params, list):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError(f"invalid params of type: {type(params)} (expected a dict such as model.state_dict(), "
                         "or a list of tensors or (name, tensor) tuples such as list(model.named_parameters()))")
    pending = []
    for name, tensor in items:
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"broadcast_parameters: {name or 'an entry'} is a {type(tensor).__name__}, not a "
                             "torch.Tensor")
        if tensor.is_contiguous():
            pending.append((broadcast_async_(tensor, root_rank, name), None))
        else:
            # Broadcast a contiguous copy, then copy the result back into the strided tensor.
            pending.append((broadcast_async(tensor, root_rank, name), tensor))
    for handle, strided in pending:
        result = synchronize(handle)
        if strided is not None:
            with torch.no_grad():
                strided.copy_(result)


def _sparse_embedding_params(model):
    """ids of the weights of the model's embeddings that produce sparse gradients."""
    if not isinstance(model, torch.nn.Module):
        return set()
    return {id(m.weight) for m in model.modules()
            if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and m.sparse}


def broadcast_optimizer_state(optimizer, root_rank, model=None):
    """Gives every rank root_rank's optimizer state (dense tensors in place; scalars, sparse tensors and
    param_group options in one broadcast_object, assigned back), over the global set.

    A freshly created optimizer has no state yet: its state is created first by one step of the wrapped
    optimizer on zero gradients (sparse for SparseAdam, and for SGD on the sparse embeddings of `model`).
    Note that this step applies weight decay to the parameters. An optimizer that still has no state
    (plain SGD) has nothing to broadcast. torch.optim.LBFGS raises ValueError."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state: its nested state has no tensor form")
    state_dict = optimizer.state_dict()

    if len(state_dict["state"]) == 0:
        sparse_ids = _sparse_embedding_params(model) if isinstance(optimizer, torch.optim.SGD) else set()
        for group in optimizer.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                p.grad = p.data.new_zeros(p.size())
                if isinstance(optimizer, torch.optim.SparseAdam) or id(p) in sparse_ids:
                    p.grad = p.grad.to_sparse()
        if isinstance(optimizer, _DistributedOptimizer):
            # The wrapped optimizer's own step: the distributed step() would reduce every gradient, a
            # collective that ranks whose state is already initialized would not join.
            super(_DistributedOptimizer, optimizer).step()
        else:
            optimizer.step()
        state_dict = optimizer.state_dict()

    if len(state_dict["state"]) == 0:
        return

    tensors = []
    scalars = {}
    setters = {}
    occurrences = collections.defaultdict(int)

    def set_option(index, key):
        def assign(value):
            optimizer.param_groups[index][key] = value
        return assign

    def set_state(param_state, key):
        def assign(value):
            param_state[key] = value
        return assign

    for index, group in enumerate(state_dict["param_groups"]):
        for option, value in group.items():
            if option == "params":
                continue
            key = f"{option}.{index}"
            scalars[key] = value
            setters[key] = set_option(index, option)
        for pid in group["params"]:
            if pid not in state_dict["state"]:
                continue  # no state: the parameter does not require a gradient
            # state_dict() packs the optimizer's own per-parameter dicts: tensors are the state itself
            # (broadcast in place), and assigning into param_state updates the optimizer.
            param_state = state_dict["state"][pid]
            for name, value in param_state.items():
                occurrences[name] += 1
                key = f"{name}.{occurrences[name]}"
                if torch.is_tensor(value) and not value.is_sparse:
                    tensors.append((key, value))
                else:
                    scalars[key] = value
                    setters[key] = set_state(param_state, name)

    broadcast_parameters(tensors, root_rank)
    scalars = broadcast_object(scalars, root_rank, name="broadcast_optimizer_state.scalars")
    for key, value in scalars.items():
        setters[key](value)
