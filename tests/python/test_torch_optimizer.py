"""hvd.torch.DistributedOptimizer on real multi-rank jobs (hvdrun, np 1, 2 and 3).

Each job runs many checks in one worker script (importing torch costs seconds per rank). Expected
gradients are computed independently: every rank backpropagates through an identical model that has no
optimizer hooks, and the local gradients are allgathered and averaged.
"""

from conftest import EXPECT_ERROR, assert_ok

# Helpers shared by the worker scripts.
PRELUDE = EXPECT_ERROR + r"""
import copy
import os
import time
import warnings

import torch
import hvd.torch as hvd
import hvd.torch.optimizer as optimizer_module


def make_model(seed=0):
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)]
    return torch.nn.Sequential(*layers)


def batch(step, r):
    g = torch.Generator().manual_seed(1000 * step + r)
    return torch.randn(6, 4, generator=g), torch.randn(6, 2, generator=g)


def loss_fn(model, x, y):
    return ((model(x) - y) ** 2).mean()


def local_grads(model, batches):
    # Gradients of a model without hooks, accumulated over batches.
    for p in model.parameters():
        p.grad = None
    for x, y in batches:
        loss_fn(model, x, y).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def gathered(t, process_set=hvd.global_process_set):
    return hvd.allgather(t.unsqueeze(0), process_set=process_set)


def expected(grads, reduce="mean", process_set=hvd.global_process_set):
    out = []
    for g in grads:
        all_g = gathered(g, process_set)
        out.append(all_g.mean(0) if reduce == "mean" else all_g.sum(0))
    return out


def assert_close(actual, wanted, what, rtol=1e-6, atol=1e-7):
    assert len(actual) == len(wanted), what
    for i, (a, w) in enumerate(zip(actual, wanted)):
        assert a.shape == w.shape and a.dtype == w.dtype, (what, i, a.shape, w.shape, a.dtype, w.dtype)
        assert torch.allclose(a, w, rtol=rtol, atol=atol), (what, i, a, w)


def grads_of(model):
    return [p.grad.detach().clone() for p in model.parameters()]


def train_run(steps=40):
    # Different initial weights per rank, made equal by broadcast_parameters; different data per rank.
    torch.manual_seed(100 + R)
    model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=model.named_parameters())
    w_true = torch.randn(5, 1, generator=torch.Generator().manual_seed(42))
    g = torch.Generator().manual_seed(7 + R)
    x = torch.randn(64, 5, generator=g)
    y = x @ w_true + 0.01 * torch.randn(64, 1, generator=g)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(hvd.allreduce(loss.detach(), name="train.loss").item())
    assert losses[-1] < 0.1 * losses[0], losses
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = gathered(flat)
    for r in range(N):
        assert torch.equal(every[r], every[0]), ("parameters differ between ranks", r)
    # The local loss of each rank fell too (data differ, so they are not equal).
    assert ((model(x) - y) ** 2).mean().item() < 0.1 * losses[0]


hvd_init_kwargs = globals().get("hvd_init_kwargs", {})
hvd.init(**hvd_init_kwargs)
R, N = hvd.rank(), hvd.size()
"""

CORE_WORKER = PRELUDE + r"""
train_run()

# --- the wrapped object -------------------------------------------------------------------------------
model = make_model()
base = torch.optim.SGD(model.parameters(), lr=0.1)
opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
assert opt is not base
assert isinstance(opt, torch.optim.SGD) and type(opt) is not torch.optim.SGD
assert type(opt).__name__ == "SGD" and type(opt).__module__ == "hvd.torch.optimizer"
assert opt.param_groups[0] is base.param_groups[0]
assert opt.defaults["lr"] == 0.1
scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
x, y = batch(0, R)
loss_fn(model, x, y).backward()
opt.step()
scheduler.step()
assert opt.param_groups[0]["lr"] == 0.05 and base.param_groups[0]["lr"] == 0.05
sd = opt.state_dict()
assert sd["param_groups"][0]["lr"] == 0.05
opt.zero_grad()

# A class whose constructor does not take every option of its defaults as a keyword.
class Custom(torch.optim.SGD):
    def __init__(self, params, lr=0.25):
        super().__init__(params, lr=lr, momentum=0.5)


custom = Custom(make_model().parameters(), lr=0.75)
wrapped = hvd.DistributedOptimizer(custom)
assert isinstance(wrapped, Custom) and type(wrapped).__name__ == "Custom"
assert wrapped.param_groups[0]["lr"] == 0.75 and wrapped.defaults == custom.defaults

# Adam's state survives state_dict / load_state_dict on the wrapper.
model = make_model()
opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())
loss_fn(model, *batch(0, R)).backward()
opt.step()
sd = copy.deepcopy(opt.state_dict())
assert len(sd["state"]) == 4 and float(sd["state"][0]["step"]) == 1.0
opt.load_state_dict(sd)
assert float(opt.state_dict()["state"][0]["step"]) == 1.0

# --- the average of every rank's gradients, reduced during backward ------------------------------------
model, ref = make_model(), make_model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters())
seen_in_backward = {}


class Probe(torch.autograd.Function):
    # Sits between the two Linear layers: its backward runs after the second layer's gradients exist and
    # before the first layer's.
    @staticmethod
    def forward(ctx, t):
        return t.clone()

    @staticmethod
    def backward(ctx, g):
        for name, p in model.named_parameters():
            seen_in_backward[name] = opt._handles.get(p, (None, None))[0]
        return g


x, y = batch(1, R)
out = model[2](model[1](Probe.apply(model[0](x))))
((out - y) ** 2).mean().backward()
assert isinstance(seen_in_backward["2.weight"], int) and isinstance(seen_in_backward["2.bias"], int), \
    seen_in_backward
assert seen_in_backward["0.weight"] is None and seen_in_backward["0.bias"] is None, seen_in_backward
opt.synchronize()
assert_close(grads_of(model), expected(local_grads(ref, [(x, y)])), "average")
with opt.skip_synchronize():
    opt.step()

# op=Sum and gradient_predivide_factor.
model, ref = make_model(), make_model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0), op=hvd.Sum)
loss_fn(model, *batch(2, R)).backward()
opt.synchronize()
summed = grads_of(model)
assert_close(summed, expected(local_grads(ref, [batch(2, R)]), "sum"), "sum")
# step() after an explicit synchronize() warns and reduces again: Sum multiplies by size.
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    opt.step()
messages = [str(w.message) for w in caught]
assert any(m.startswith("optimizer.step() called without optimizer.skip_synchronize() context after "
                        "optimizer.synchronize()") for m in messages), messages
assert_close(grads_of(model), [g * N for g in summed], "sum reduced twice")
opt.zero_grad()
loss_fn(model, *batch(3, R)).backward()
opt.synchronize()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with opt.skip_synchronize():
        opt.step()
assert not [w for w in caught if "skip_synchronize" in str(w.message)]
assert_close(grads_of(model), expected(local_grads(ref, [batch(3, R)]), "sum"), "skip_synchronize")

model, ref = make_model(), make_model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), gradient_predivide_factor=4.0)
loss_fn(model, *batch(4, R)).backward()
opt.step()
assert_close(grads_of(model), expected(local_grads(ref, [batch(4, R)])), "predivide", rtol=1e-5)

# --- backward_passes_per_step ----------------------------------------------------------------------------
model, ref = make_model(), make_model()
# lr=0 keeps the parameters equal to ref's through the steps below.
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                               named_parameters=model.named_parameters(), backward_passes_per_step=2)
loss_fn(model, *batch(5, R)).backward()
assert opt._handles and all(h is None for h, _ in opt._handles.values())  # accumulated locally only
expect_error(AssertionError, "optimizer.zero_grad() was called after loss.backward() but before "
             "optimizer.step() or optimizer.synchronize()", opt.zero_grad)
loss_fn(model, *batch(6, R)).backward()
opt.synchronize()
assert_close(grads_of(model), expected(local_grads(ref, [batch(5, R), batch(6, R)])), "bpps=2", rtol=1e-5)
opt.zero_grad()
loss_fn(model, *batch(7, R)).backward()
loss_fn(model, *batch(8, R)).backward()
# The third backward adds into the gradients before its hook raises: let the reductions that the second one
# started finish first, so that nothing writes a gradient they are still reading.
while not all(hvd.poll(h) for h, _ in opt._handles.values()):
    time.sleep(0.001)
expect_error(AssertionError, "Gradients were computed more than backward_passes_per_step times before call "
             "to step()", lambda: loss_fn(model, *batch(9, R)).backward())
opt.synchronize()
with opt.skip_synchronize():
    opt.step()
opt.zero_grad()

# set_backward_passes_per_step, then back to 1.
opt.set_backward_passes_per_step(3)
assert opt.backward_passes_per_step == 3
for s in (10, 11, 12):
    loss_fn(model, *batch(s, R)).backward()
opt.synchronize()
assert_close(grads_of(model), expected(local_grads(ref, [batch(s, R) for s in (10, 11, 12)])), "bpps=3",
             rtol=1e-5)
with opt.skip_synchronize():
    opt.step()
opt.zero_grad()
opt.set_backward_passes_per_step(1)
loss_fn(model, *batch(13, R)).backward()
opt.step()
expect_error(ValueError, "backward_passes_per_step must be an int > 0, got 0", opt.set_backward_passes_per_step, 0)

# load_state_dict forgets reductions in progress.
opt.zero_grad()
loss_fn(model, *batch(14, R)).backward()
in_flight = [h for h, _ in opt._handles.values()]
assert len(in_flight) == 4 and all(isinstance(h, int) for h in in_flight)
opt.load_state_dict(opt.state_dict())
for h in in_flight:  # they still write the gradients: finish them before zero_grad() zeroes those
    hvd.synchronize(h)
opt.zero_grad()  # no AssertionError: the optimizer has forgotten them

# --- fp16 compression ----------------------------------------------------------------------------------
model, ref = make_model(), make_model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters(), compression=hvd.Compression.fp16)
loss_fn(model, *batch(15, R)).backward()
opt.synchronize()
local = local_grads(ref, [batch(15, R)])
exact = expected(local)
# Every rank's gradient travels as float16: the sum is rounded to float16, then cast back to float32.
halves = [gathered(g.half().float()) for g in local]
wanted = [(h.sum(0) / N).half().float() for h in halves]
got = grads_of(model)
assert all(g.dtype == torch.float32 for g in got)
if N == 2:  # halving is exact, so the float16 result is known to the bit
    for a, w in zip(got, wanted):
        assert torch.equal(a, w), (a, w)
assert_close(got, exact, "fp16", rtol=2e-3, atol=1e-4)
assert any(not torch.equal(a, e) for a, e in zip(got, exact)), "fp16 compression left no trace"
opt.zero_grad()

# --- groups ----------------------------------------------------------------------------------------------
calls = []
real_grouped = optimizer_module.grouped_allreduce_async_


def spy(tensors, *args, **kwargs):
    calls.append((len(tensors), kwargs.get("name")))
    return real_grouped(tensors, *args, **kwargs)


optimizer_module.grouped_allreduce_async_ = spy

model, ref = make_model(), make_model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters(),
                               groups=[[model[2].weight, model[0].weight]])
loss_fn(model, *batch(16, R)).backward()
opt.synchronize()
# The listed group, then every other parameter as a group of its own.
assert sorted(calls) == [(1, "0.bias"), (1, "2.bias"), (2, "2.weight")], calls
assert_close(grads_of(model), expected(local_grads(ref, [batch(16, R)])), "groups=list")
opt.zero_grad()

# groups=int: the parameter order comes from rank 0, whatever the order of this rank's optimizer.
calls.clear()
model, ref = make_model(), make_model()
params = list(model.parameters())
if R % 2:
    params = params[::-1]
opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1), named_parameters=model.named_parameters(),
                               groups=2)
loss_fn(model, *batch(17, R)).backward()
opt.synchronize()
assert sorted(calls) == [(2, "0.weight"), (2, "2.weight")], calls
assert_close(grads_of(model), expected(local_grads(ref, [batch(17, R)])), "groups=2")

calls.clear()
model, ref = make_model(), make_model()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), num_groups=1,
                                   backward_passes_per_step=2)
assert any(issubclass(w.category, DeprecationWarning) and "num_groups" in str(w.message) for w in caught)
loss_fn(model, *batch(18, R)).backward()
loss_fn(model, *batch(19, R)).backward()
opt.synchronize()
assert calls == [(4, "allreduce.noname.0.0")], calls
assert_close(grads_of(model), expected(local_grads(ref, [batch(18, R), batch(19, R)])), "num_groups=1", rtol=1e-5)
optimizer_module.grouped_allreduce_async_ = real_grouped

# --- parameters a rank did not use take part with zeros ---------------------------------------------------
for groups in (None, 1):
    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"used": torch.nn.Linear(4, 2), "sometimes": torch.nn.Linear(4, 2)})
    # This rank's own gradients come from a copy without hooks: once every rank has submitted, the reduction
    # overwrites the model's gradients in place, so reading them after backward() would race with it.
    ref = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), groups=groups)
    x, y = batch(20, R)
    for m in (model, ref):
        out = m["used"](x)
        if R == 0:
            out = out + m["sometimes"](x)
        ((out - y) ** 2).mean().backward()
    mine = {n: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)) for n, p in
            ref.named_parameters()}
    opt.synchronize()
    for n, p in model.named_parameters():
        assert torch.allclose(p.grad, gathered(mine[n]).mean(0), rtol=1e-6, atol=1e-7), (groups, n)

# --- sparse gradients ----------------------------------------------------------------------------------
for as_dense in (False, True):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    ref_emb = copy.deepcopy(emb)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.1),
                                   named_parameters=emb.named_parameters(), sparse_as_dense=as_dense)
    idx = torch.tensor([R, R + 1, 7, R])
    emb(idx).pow(2).sum().backward()
    ref_emb(idx).pow(2).sum().backward()
    opt.synchronize()
    assert emb.weight.grad.is_sparse, as_dense
    want = gathered(ref_emb.weight.grad.to_dense()).mean(0)
    assert torch.allclose(emb.weight.grad.to_dense(), want, rtol=1e-6, atol=1e-7), (as_dense, emb.weight.grad, want)
    with opt.skip_synchronize():
        opt.step()

# --- construction errors, in Horovod's order and types ---------------------------------------------------
model = make_model()
sgd = torch.optim.SGD(model.parameters(), lr=0.1)
named = list(model.named_parameters())
D = hvd.DistributedOptimizer
expect_error(ValueError, "gradient_predivide_factor not supported with op != Average", D, sgd, op=hvd.Sum,
             gradient_predivide_factor=2.0)
expect_error(ValueError, "gradient_predivide_factor must not be 0", D, sgd, gradient_predivide_factor=0.0)
expect_error(ValueError, "backward_passes_per_step must be an int > 0, got 0", D, sgd, backward_passes_per_step=0)
expect_error(ValueError, "named_parameters should be a sequence of tuples (name, parameter)", D, sgd,
             named_parameters=[p for _, p in named])
expect_error(ValueError, "Parameter names in named_parameters must be unique. Found duplicates: 0.weight", D, sgd,
             named_parameters=named + [("0.weight", named[0][1])])
expect_error(ValueError, "named_parameters was specified, but one or more model parameters were not named", D,
             sgd, named_parameters=named[:2])
D(sgd, named_parameters=named + [("unused.extra", torch.zeros(1, requires_grad=True))])  # extra names are fine
expect_error(ValueError, "groups should be a non-negative integer or a list of list of torch.Tensor; got 0", D,
             sgd, groups=0)
expect_error(ValueError, "groups should be a non-negative integer or a list of list of torch.Tensor; got -2", D,
             sgd, num_groups=-2)
expect_error(ValueError, "A parameter can only appear once in groups", D, sgd,
             groups=[[named[0][1]], [named[1][1], named[0][1]]])
expect_error(ValueError, "groups must consist of torch.Tensor", D, sgd, groups=[["0.weight"]])
expect_error(NotImplementedError, "not supported by hvd", D, sgd, op=hvd.Adasum)
expect_error(ValueError, "unknown reduce operation op=17", D, sgd, op=17)
expect_error(ValueError, "expects a torch.optim.Optimizer, got Sequential", D, model)
expect_error(ValueError, "SGD optimizer is already a DistributedOptimizer", D, opt)
expect_error(ValueError, "has not been registered", D, sgd, process_set=hvd.ProcessSet([0]))
expect_error(ValueError, "compression must have compress() and decompress()", D, sgd, compression="fp16")
hvd.barrier()  # no rank shuts down while others still reduce
print("OK")
"""

SINGLE_WORKER = PRELUDE + r"""
assert N == 1
# Size 1: no hooks, step() uses the local gradients.
model, ref = make_model(), make_model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
loss_fn(model, *batch(0, R)).backward()
assert opt._handles == {}
opt.synchronize()
assert_close(grads_of(model), local_grads(ref, [batch(0, R)]), "size 1")
opt.step()
opt.zero_grad()
# Adasum is accepted at size 1 (it would be the identity).
hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Adasum)
# HOROVOD_ELASTIC=1 registers the hooks even at size 1.
os.environ["HOROVOD_ELASTIC"] = "1"
model, ref = make_model(), make_model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
loss_fn(model, *batch(1, R)).backward()
assert len(opt._handles) == 4 and all(isinstance(h, int) for h, _ in opt._handles.values())
opt.step()
assert_close(grads_of(model), local_grads(ref, [batch(1, R)]), "elastic size 1")
hvd.barrier()  # no rank shuts down while others still reduce
print("OK")
"""

PROCESS_SET_WORKER = r"""
import hvd.torch as hvd
subset = hvd.ProcessSet([1, 2])
hvd_init_kwargs = {"process_sets": [subset]}
""" + PRELUDE + r"""
assert N == 3 and subset.process_set_id == 1
train_run()

# Rank 0 is outside the set: it steps on its own gradients; ranks 1 and 2 average theirs.
for groups in (None, 2):
    model, ref = make_model(), make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), process_set=subset, groups=groups)
    loss_fn(model, *batch(30, R)).backward()
    local = local_grads(ref, [batch(30, R)])
    if R == 0:
        assert opt._handles == {}
        opt.synchronize()
        assert opt._synchronized
        assert_close(grads_of(model), local, "outside the set")
    else:
        assert len(opt._handles) == (4 if groups is None else 2)
        opt.synchronize()
        assert_close(grads_of(model), expected(local, process_set=subset), "inside the set")
    before = [p.detach().clone() for p in model.parameters()]
    with opt.skip_synchronize():
        opt.step()
    for b, p, g in zip(before, model.parameters(), grads_of(model)):
        assert torch.allclose(p.detach(), b - 0.1 * g)
    opt.zero_grad()
hvd.barrier()  # no rank shuts down while others still reduce
print("OK")
"""


def test_distributed_optimizer_np2(hvdrun):
    job = hvdrun(2, CORE_WORKER)
    assert_ok(job, 2)


def test_distributed_optimizer_process_set_np3(hvdrun):
    job = hvdrun(3, PROCESS_SET_WORKER)
    assert_ok(job, 3)


def test_distributed_optimizer_single_rank(hvdrun):
    job = hvdrun(1, SINGLE_WORKER)
    assert_ok(job, 1)
