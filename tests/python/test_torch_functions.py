"""hvd.torch's broadcast_parameters, broadcast_optimizer_state, broadcast_object and allgather_object on
real jobs (hvdrun, np 2 and 3). Each job runs every check in one worker script."""

import pytest

from conftest import EXPECT_ERROR, assert_ok

WORKER = EXPECT_ERROR + r"""
import torch
import hvd.torch as hvd

subset = hvd.ProcessSet([1, 2])
hvd.init(process_sets=[subset] if hvd_size_hint >= 3 else None)
R, N = hvd.rank(), hvd.size()
assert N == hvd_size_hint


class Point:
    # A plain class defined in the script: cloudpickle sends it by value, so a received instance is of
    # a class rebuilt in the receiving process (equal by name and fields, not by identity).
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return type(other).__name__ == "Point" and (self.x, self.y) == (other.x, other.y)

    def norm1(self):
        return abs(self.x) + abs(self.y)


def same_everywhere(t):
    # True when t (any shape) is bit-identical on every rank (checked through allgather, not broadcast).
    every = hvd.allgather(t.detach().reshape(1, -1).double())
    return all(torch.equal(every[r], every[0]) for r in range(N))


def rank_value(t, root):
    # root's value of t, fetched by allgather (independent of the broadcast under test).
    return hvd.allgather(t.detach().reshape(1, -1).clone())[root].reshape(t.shape)


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU(),
                               torch.nn.Linear(4, 2))


# --- broadcast_parameters -----------------------------------------------------------------------------
model = make_model(10 + R)
model.train()
model(torch.randn(5, 3))  # running statistics and num_batches_tracked differ per rank too
state = model.state_dict()
wanted = {k: rank_value(v, 0) for k, v in state.items()}
assert not same_everywhere(state["0.weight"])
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
for k, v in model.state_dict().items():
    assert torch.equal(v, wanted[k]), k
assert model.state_dict()["1.num_batches_tracked"].dtype == torch.int64

# A list of tensors, and of (name, tensor) tuples; root 1; a non-contiguous tensor.
tensors = [torch.full((2, 3), float(R)), torch.arange(6, dtype=torch.int32).reshape(2, 3) * (R + 1)]
strided = torch.full((3, 4), float(R)).t()
assert not strided.is_contiguous()
hvd.broadcast_parameters(tensors + [strided], root_rank=1)
assert torch.equal(tensors[0], torch.full((2, 3), 1.0))
assert torch.equal(tensors[1], torch.arange(6, dtype=torch.int32).reshape(2, 3) * 2)
assert torch.equal(strided, torch.full((4, 3), 1.0))
model = make_model(20 + R)
hvd.broadcast_parameters(list(model.named_parameters()), root_rank=N - 1)
assert all(same_everywhere(p) for p in model.parameters())
assert torch.equal(model[0].weight, make_model(20 + N - 1)[0].weight)

expect_error(ValueError, "invalid params of type", hvd.broadcast_parameters, model.named_parameters(), 0)
expect_error(ValueError, "invalid params of type", hvd.broadcast_parameters, tuple(model.parameters()), 0)
expect_error(ValueError, "invalid params of type", hvd.broadcast_parameters, model, 0)

# --- broadcast_optimizer_state ---------------------------------------------------------------------------
# Rank 0 trained a few (local) steps; the others have fresh optimizers with other options.
model = make_model(30)
opt = torch.optim.Adam(model.parameters(), lr=0.01 if R == 0 else 0.5, betas=(0.8, 0.9) if R == 0 else (0.9, 0.999))
if R == 0:
    for s in range(3):
        opt.zero_grad()
        model(torch.randn(4, 3)).pow(2).sum().backward()
        opt.step()
params = list(model.parameters())
root_state = [{k: v.clone() for k, v in opt.state[p].items()} if R == 0 else None for p in params]
hvd.broadcast_optimizer_state(opt, root_rank=0)
assert opt.param_groups[0]["lr"] == 0.01 and opt.param_groups[0]["betas"] == (0.8, 0.9)
for i, p in enumerate(params):
    st = opt.state[p]
    assert set(st) == {"step", "exp_avg", "exp_avg_sq"}, st.keys()
    assert float(st["step"]) == 3.0
    for k in ("exp_avg", "exp_avg_sq"):
        assert same_everywhere(st[k]), (i, k)
        assert st[k].abs().sum() > 0, (i, k)
        if R == 0:  # the root's state is untouched; the others now hold it (same_everywhere)
            assert torch.equal(st[k], root_state[i][k])

# Fresh optimizers everywhere, a wrapped one included (its own step, no collective).
model = make_model(40)
dist = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.003 * (R + 1)),
                                named_parameters=model.named_parameters())
hvd.broadcast_optimizer_state(dist, root_rank=1)
assert dist.param_groups[0]["lr"] == 0.006
assert dist._handles == {}
assert all(float(dist.state[p]["step"]) == 1.0 for p in model.parameters())


class CountingSGD(torch.optim.SGD):
    # Keeps a Python int in its state: the scalar path of broadcast_optimizer_state.
    def step(self, closure=None):
        super().step(closure)
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["count"] = self.state[p].get("count", 0) + 1


model = make_model(50)
opt = CountingSGD(model.parameters(), lr=0.1, momentum=0.9)
for _ in range(4 if R == 0 else 0):
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
hvd.broadcast_optimizer_state(opt, 0)
assert all(opt.state[p]["count"] == 4 for p in model.parameters()), [opt.state[p]["count"] for p in model.parameters()]
assert all(same_everywhere(opt.state[p]["momentum_buffer"]) for p in model.parameters())

# Stateless SGD: nothing to broadcast. LBFGS: ValueError.
hvd.broadcast_optimizer_state(torch.optim.SGD(model.parameters(), lr=0.1), 0)
expect_error(ValueError, "cannot broadcast torch.optim.LBFGS state", hvd.broadcast_optimizer_state,
             torch.optim.LBFGS(model.parameters()), 0)

# Sparse gradients: SparseAdam, and SGD with momentum on a sparse embedding found through model.
emb = torch.nn.Embedding(6, 2, sparse=True)
sparse_adam = torch.optim.SparseAdam(emb.parameters(), lr=0.01 * (R + 1))
hvd.broadcast_optimizer_state(sparse_adam, 0)
assert sparse_adam.param_groups[0]["lr"] == 0.01 and float(sparse_adam.state[emb.weight]["step"]) == 1.0
sgd = torch.optim.SGD(emb.parameters(), lr=0.1, momentum=0.5)
hvd.broadcast_optimizer_state(sgd, 0, model=emb)
assert "momentum_buffer" in sgd.state[emb.weight]

# --- broadcast_object / allgather_object ------------------------------------------------------------------
obj = {"epoch": 7, "nested": [1, (2, 3.5)], "point": Point(1, -2), "t": torch.arange(3)} if R == 1 else None
got = hvd.broadcast_object(obj, root_rank=1)
assert got["epoch"] == 7 and got["nested"] == [1, (2, 3.5)] and got["point"] == Point(1, -2)
assert got["point"].norm1() == 3  # methods travel with the class
assert torch.equal(got["t"], torch.arange(3))
if R == 1:
    assert got is obj
assert hvd.broadcast_object(Point(R, R), name="pt") == Point(0, 0)
assert hvd.broadcast_object("x" * 100000 if R == 0 else "") == "x" * 100000

mine = [{"rank": R}, Point(R, 2 * R), "three", 4.5][R % 4]
every = hvd.allgather_object(mine)
assert every == [{"rank": 0}, Point(1, 2), "three", 4.5][:N], every
assert hvd.allgather_object(list(range(R + 1)), name="ranges") == [list(range(r + 1)) for r in range(N)]

if N >= 3:
    # broadcast_object over a process set: the root is a global rank.
    if subset.included():
        assert hvd.broadcast_object(Point(R, 0) if R == 2 else None, root_rank=2, process_set=subset) == Point(2, 0)
    hvd.barrier()

hvd.barrier()  # no rank shuts down while others still communicate
print("OK")
"""


@pytest.mark.parametrize("np", [2, 3])
def test_broadcast_and_gather_helpers(hvdrun, np):
    job = hvdrun(np, f"hvd_size_hint = {np}\n" + WORKER, timeout=90)
    assert_ok(job, np)
