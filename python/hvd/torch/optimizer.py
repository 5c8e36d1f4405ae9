"""DistributedOptimizer: averages gradients over the ranks while backward() is still running.

`DistributedOptimizer(opt, ...)` returns a new optimizer whose class is a subclass of `type(opt)`, created
on the fly with the same name, so `isinstance(new, type(opt))` holds and state_dict(), param_groups, LR
schedulers and checkpoints behave as with `opt`. It shares `opt`'s param_group dicts but not its state.

Each parameter that requires a gradient gets a hook on its gradient accumulator (the AccumulateGrad node
of autograd). The hook fires as soon as backward() has accumulated that parameter's gradient and starts
an asynchronous in-place allreduce of `p.grad`, so communication overlaps the rest of the backward pass.
`step()` (or an explicit `synchronize()`) waits for every allreduce and writes the results into `p.grad`.
"""

import os
import warnings
from contextlib import contextmanager

import torch

from hvd.common.process_sets import ProcessSet
from hvd.torch.compression import Compression
from hvd.torch.objects import broadcast_object
from hvd.torch.mpi_ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    allreduce_async_,
    global_process_set,
    grouped_allreduce_async_,
    rocm_built,
    size,
    sparse_allreduce_async,
    synchronize,
)

_OPS = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}

_TOO_MANY_PASSES = ("Gradients were computed more than backward_passes_per_step times before call to step(). "
                    "Increase backward_passes_per_step to accumulate gradients locally.")
_ZERO_GRAD_RACE = ("optimizer.zero_grad() was called after loss.backward() but before optimizer.step() or "
                   "optimizer.synchronize(). This is prohibited as it can cause a race condition.")
_STEP_AFTER_SYNC = ("optimizer.step() called without optimizer.skip_synchronize() context after "
                    "optimizer.synchronize(). This can cause training slowdown. You may want to consider using "
                    "optimizer.skip_synchronize() context if you use optimizer.synchronize() in your code.")


class _DistributedOptimizer:
    """Mixin placed before the wrapped optimizer's class in the dynamically created subclass.

    State per parameter p (only on ranks of the process set, and only when hooks are registered):
    `_delay[p]` counts the backward passes still to accumulate before p's allreduce starts; `_handles`
    maps p (or a group's tuple of parameters) to (handle, compression context), with (None, None) as a
    placeholder for a gradient that has been computed but not yet sent.
    """

    def __init__(self, params, defaults, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, groups, sparse_as_dense, process_set):
        try:
            super().__init__(params, **defaults)
        except TypeError:
            # The class's constructor does not take its defaults as keywords; the group dicts already
            # carry every option, so the class's own defaults are enough.
            super().__init__(params)
            self.defaults = dict(defaults)

        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._groups = groups

        self._parameter_names = {}
        for name, p in sorted(named_parameters, key=lambda item: item[0]):
            self._parameter_names[p] = name

        self._handles = {}
        self._delay = {}
        self._grad_accs = []
        self._requires_update = []
        self._p_to_group = {}
        self._group_list = []
        self._group_ready = {}
        self._synchronized = False
        self._should_synchronize = True
        if process_set.included() and (size() > 1 or os.environ.get("HOROVOD_ELASTIC") == "1"):
            self._register_hooks()

    # --- hooks ------------------------------------------------------------------------------------------

    def _trainable_params(self):
        return [p for group in self.param_groups for p in group["params"] if p.requires_grad]

    def _register_hooks(self):
        trainable = self._trainable_params()
        if self._groups is not None:
            self._form_groups(trainable)
        for p in trainable:
            self._requires_update.append(p)
            self._delay[p] = self.backward_passes_per_step
            # expand_as gives a view whose grad_fn leads to p's AccumulateGrad node; keeping the node
            # alive keeps the hook registered on the node autograd uses for p.
            grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
            grad_acc.register_hook(self._make_hook(p))
            self._grad_accs.append(grad_acc)

    def _form_groups(self, trainable):
        """Fixes the groups of parameters reduced together, in the parameter order of the set's first rank
        (a collective over the process set, so every rank forms the same groups)."""
        names = [self._parameter_names.get(p) for p in trainable]
        root = self.process_set.ranks[0] if self.process_set.ranks else 0
        root_names = broadcast_object(names, root_rank=root, name="DistributedOptimizer.parameter_order",
                                      process_set=self.process_set)
        position = {name: i for i, name in enumerate(root_names)}
        missing = [n for n in names if n not in position]
        if missing:
            raise ValueError(f"DistributedOptimizer(groups=...): parameters {missing} of this rank are not "
                             f"parameters of rank {root}; every rank must wrap the same parameters")
        ordered = sorted(trainable, key=lambda p: position[self._parameter_names.get(p)])

        if isinstance(self._groups, list):
            known = {id(p) for p in ordered}
            grouped = set()
            groups = []
            for group in self._groups:
                members = [p for p in group if id(p) in known]
                grouped.update(id(p) for p in members)
                groups.append(members)
            groups.extend([p] for p in ordered if id(p) not in grouped)
        else:
            count, extra = divmod(len(ordered), self._groups)
            groups, start = [], 0
            for i in range(self._groups):
                end = start + count + (1 if i < extra else 0)
                groups.append(ordered[start:end])
                start = end
        for members in groups:
            if not members:
                continue
            group = tuple(members)
            self._group_list.append(group)
            self._group_ready[group] = 0
            for p in group:
                self._p_to_group[p] = group

    def _make_hook(self, p):
        def hook(*_):
            if self._delay[p] <= 0:
                raise AssertionError(_TOO_MANY_PASSES)
            self._delay[p] -= 1
            if self._delay[p] > 0:
                self._handles[p] = (None, None)
                return
            group = self._p_to_group.get(p)
            if group is None:
                self._handles[p] = self._allreduce_grad_async(p)
                return
            self._handles[p] = (None, None)
            self._group_ready[group] += 1
            if self._group_ready[group] == len(group):
                self._launch_group(group)

        return hook

    # --- starting the reductions ------------------------------------------------------------------------

    def _scale_factors(self):
        if self.op == Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _compressed(self, grad):
        tensor, ctx = self._compression.compress(grad)
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()
        return tensor, ctx

    @staticmethod
    def _ensure_grad(p):
        # A rank whose forward pass did not use p still takes part in p's reduction, with zeros.
        if p.grad is None:
            p.grad = p.data.new_zeros(p.size())

    def _allreduce_grad_async(self, p):
        """Starts p's reduction; returns (handle, compression context). A sparse gradient's handle is the
        callable sparse_allreduce_async returns."""
        self._ensure_grad(p)
        name = self._parameter_names.get(p)
        grad = p.grad
        if grad.is_sparse:
            if not self.sparse_as_dense:
                return sparse_allreduce_async(grad, name=name, op=self.op, process_set=self.process_set), None
            grad = grad.to_dense()
        tensor, ctx = self._compressed(grad)
        prescale, postscale = self._scale_factors()
        handle = allreduce_async_(tensor, name=name, op=self.op, prescale_factor=prescale,
                                  postscale_factor=postscale, process_set=self.process_set)
        return handle, ctx

    def _launch_group(self, group):
        """Starts one grouped allreduce over every member of group, named after its first member."""
        tensors, ctxs = [], []
        for p in group:
            self._ensure_grad(p)
            grad = p.grad
            if grad.is_sparse:
                if not self.sparse_as_dense:
                    raise ValueError(f"parameter {self._parameter_names.get(p)} has a sparse gradient, which a "
                                     "grouped allreduce cannot reduce: pass sparse_as_dense=True or leave it "
                                     "out of groups")
                grad = grad.to_dense()
            tensor, ctx = self._compressed(grad)
            tensors.append(tensor)
            ctxs.append(ctx)
        prescale, postscale = self._scale_factors()
        handle = grouped_allreduce_async_(tensors, name=self._parameter_names.get(group[0]), op=self.op,
                                          prescale_factor=prescale, postscale_factor=postscale,
                                          process_set=self.process_set)
        for p in group:
            self._handles.pop(p, None)
        self._handles[group] = (handle, ctxs)
        self._group_ready[group] = 0

    # --- public methods ---------------------------------------------------------------------------------

    def set_backward_passes_per_step(self, passes):
        """Sets how many backward passes accumulate locally before the gradients are reduced."""
        if isinstance(passes, bool) or not isinstance(passes, int) or passes <= 0:
            raise ValueError(f"backward_passes_per_step must be an int > 0, got {passes!r}")
        self.backward_passes_per_step = passes
        for p in self._delay:
            self._delay[p] = passes

    def synchronize(self):
        """Starts the reductions the hooks have not started yet (gradients that were never computed are
        reduced as zeros, so every rank takes part), waits for all of them and writes the results into
        p.grad. A rank outside the process set only marks itself synchronized."""
        if not self.process_set.included():
            self._synchronized = True
            return

        for group in self._group_list:
            if group not in self._handles:
                self._launch_group(group)
        for p in self._requires_update:
            if p in self._p_to_group:
                continue
            handle, _ = self._handles.get(p, (None, None))
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)

        error = None
        for key, (handle, ctx) in list(self._handles.items()):
            try:
                output = handle() if callable(handle) else synchronize(handle)
            except Exception as e:  # wait for every reduction before raising, so none is left running
                error = error or e
                continue
            if isinstance(key, tuple):
                for p, out, c in zip(key, output, ctx):
                    self._store_grad(p, out, c)
            else:
                self._store_grad(key, output, ctx)
        self._handles.clear()
        for p in self._delay:
            self._delay[p] = self.backward_passes_per_step
        for group in self._group_ready:
            self._group_ready[group] = 0
        self._synchronized = True
        if error is not None:
            raise error

    def _store_grad(self, p, output, ctx):
        value = self._compression.decompress(output, ctx)
        if p.grad.is_sparse:
            if not value.is_sparse:
                value = value.to_sparse()
            # Sparse tensors have no set_(); zero_().add_() replaces the contents instead.
            p.grad.zero_().add_(value)
        elif value is not p.grad:
            p.grad.set_(value)

    @contextmanager
    def skip_synchronize(self):
        """step() inside this context does not reduce: for use after an explicit synchronize()."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        """Synchronizes (unless inside skip_synchronize()), then runs the wrapped optimizer's step. After an
        explicit synchronize() it warns and reduces again (Average leaves the gradients unchanged)."""
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn(_STEP_AFTER_SYNC)
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, set_to_none=False):
        """The wrapped optimizer's zero_grad. AssertionError while gradients of this step are still being
        reduced or accumulated (between backward() and step()/synchronize())."""
        if self._handles:
            raise AssertionError(_ZERO_GRAD_RACE)
        return super().zero_grad(set_to_none)

    def load_state_dict(self, *args, **kwargs):
        """The wrapped optimizer's load_state_dict; forgets reductions in progress and resets the counters
        of backward passes."""
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._delay:
            self._delay[p] = self.backward_passes_per_step
        for group in self._group_ready:
            self._group_ready[group] = 0
        return super().load_state_dict(*args, **kwargs)


def _check_named_parameters(named_parameters, param_groups):
    """named_parameters as a list of (name, tensor); defaults to allreduce.noname.<group>.<index>."""
    if named_parameters is None:
        return [(f"allreduce.noname.{i}.{j}", p)
                for i, group in enumerate(param_groups) for j, p in enumerate(group["params"])]
    try:
        named_parameters = list(named_parameters)
    except TypeError:
        raise ValueError(f"named_parameters should be a sequence of tuples (name, parameter), usually produced "
                         f"by model.named_parameters(); got {type(named_parameters).__name__}") from None
    for item in named_parameters:
        if not isinstance(item, tuple):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), usually "
                             f"produced by model.named_parameters(); got an item of type {type(item).__name__}")
    seen, duplicates = set(), []
    for name, _ in named_parameters:
        if name in seen and name not in duplicates:
            duplicates.append(name)
        seen.add(name)
    if duplicates:
        raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: "
                         + ", ".join(str(d) for d in duplicates))
    named_ids = {id(p) for _, p in named_parameters}
    unnamed = [id(p) for group in param_groups for p in group["params"] if id(p) not in named_ids]
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters were not named. "
                         "Python object ids: " + ", ".join(str(i) for i in unnamed))
    return named_parameters


def _check_groups(groups):
    if groups is None:
        return None
    if isinstance(groups, list):
        seen = set()
        for group in groups:
            if not isinstance(group, (list, tuple)):
                raise ValueError("groups should be a non-negative integer or a list of list of torch.Tensor; "
                                 f"got an item of type {type(group).__name__}")
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise ValueError(f"groups must consist of torch.Tensor; got {type(p).__name__}")
                if id(p) in seen:
                    raise ValueError(f"A parameter can only appear once in groups; tensor of shape "
                                     f"{tuple(p.shape)} appears twice")
                seen.add(id(p))
        return groups
    if isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0:
        raise ValueError(f"groups should be a non-negative integer or a list of list of torch.Tensor; got "
                         f"{groups!r}")
    return groups


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=global_process_set):
    """Wraps `optimizer` so that step() uses gradients reduced over the ranks of `process_set`.

    named_parameters: (name, parameter) pairs, usually `model.named_parameters()`; the names become the
        collectives' names (default `allreduce.noname.<group>.<index>`). Names must be unique and cover
        every parameter of the optimizer (ValueError).
    compression: Compression.none or Compression.fp16 (gradients travel as float16).
    backward_passes_per_step: backward passes accumulated locally before each reduction (> 0).
    op: Average (default), Sum, Min, Max or Product. Adasum raises NotImplementedError when size() > 1.
    gradient_predivide_factor: with Average, gradients are multiplied by 1/f before the sum and by f/size
        after it (ValueError with any other op).
    groups: an int n (parameters split into n contiguous groups) or a list of lists of parameters; each
        group is reduced as one fused grouped allreduce. num_groups is its deprecated spelling.
    sparse_as_dense: reduce sparse gradients as dense tensors (otherwise they are allgathered).
    process_set: the ranks that reduce together; other ranks step on their local gradients.

    Returns a new optimizer of a subclass of type(optimizer); the original's state is not carried over.
    Building it with `groups` is a collective over the process set.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"DistributedOptimizer expects a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if isinstance(optimizer, _DistributedOptimizer):
        raise ValueError(f"{type(optimizer).__name__} optimizer is already a DistributedOptimizer: wrap the "
                         "original optimizer once")
    if gradient_predivide_factor != 1.0:
        if rocm_built():
            raise ValueError("gradient_predivide_factor not supported yet with ROCm")
        if op != Average:
            raise ValueError(f"gradient_predivide_factor not supported with op != Average (op={op!r}, "
                             f"gradient_predivide_factor={gradient_predivide_factor!r})")
        if gradient_predivide_factor == 0:
            raise ValueError("gradient_predivide_factor must not be 0: gradients are multiplied by its inverse")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    if op not in _OPS or isinstance(op, bool):
        raise ValueError(f"unknown reduce operation op={op!r}: use hvd.Average, hvd.Sum, hvd.Min, hvd.Max or "
                         "hvd.Product")
    if op == Adasum and size() > 1:
        raise NotImplementedError("Adasum (op=hvd.Adasum) is not supported by hvd: use op=hvd.Average")
    if isinstance(backward_passes_per_step, bool) or not isinstance(backward_passes_per_step, int) \
            or backward_passes_per_step <= 0:
        raise ValueError(f"backward_passes_per_step must be an int > 0, got {backward_passes_per_step!r}")
    named_parameters = _check_named_parameters(named_parameters, optimizer.param_groups)
    groups = _check_groups(groups)
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f"process_set must be a ProcessSet, got {type(process_set).__name__}")
    if process_set.process_set_id is None:
        raise ValueError(f"{process_set} has not been registered: pass it to hvd.init(process_sets=...) or "
                         "hvd.add_process_set()")
    if not (callable(getattr(compression, "compress", None)) and callable(getattr(compression, "decompress", None))):
        raise ValueError(f"compression must have compress() and decompress() (such as hvd.Compression.fp16), "
                         f"got {compression!r}")

    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedOptimizer, base),
               {"__module__": __name__, "__qualname__": base.__qualname__})
    return cls(optimizer.param_groups, dict(optimizer.defaults), named_parameters, compression,
               backward_passes_per_step, op, gradient_predivide_factor, groups, sparse_as_dense, process_set)
