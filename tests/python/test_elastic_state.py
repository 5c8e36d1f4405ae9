"""Elastic training's Python layer in one process: State, ObjectState, run_fn, TorchState and ElasticSampler.

The test process itself runs libhvd as a one-rank job (hvd.init() with no HOROVOD_* environment), so
TorchState's broadcasts are real; several ranks of an ElasticSampler are simulated by giving each
sampler its own rank() and size(). libhvd's host-update check and the job's elasticity are replaced
where a test needs them (hvd.common.elastic._check_host_updates and elastic_enabled).
"""

import copy
import itertools
import threading

import pytest
import torch

import hvd.common.elastic as common_elastic
import hvd.torch as hvd
import hvd.torch.elastic.sampler as sampler_module
import hvd.torch.elastic.state as state_module
from hvd.common.elastic import HostUpdateResult, ObjectState, State, run_fn
from hvd.common.exceptions import (
    CommunicationError,
    HorovodInternalError,
    HostsUpdatedInterrupt,
    MismatchError,
    ShutDownError,
)
from hvd.torch.elastic import ElasticSampler, TorchState


@pytest.fixture(scope="module", autouse=True)
def one_rank_job():
    hvd.init()
    assert hvd.size() == 1
    yield
    hvd.shutdown()


@pytest.fixture
def host_updates(monkeypatch):
    """Queue of libhvd's answers for the next check_host_updates() calls (None, no newer round, once it is
    empty)."""
    queue = []
    monkeypatch.setattr(common_elastic, "_check_host_updates", lambda: queue.pop(0) if queue else None)
    return queue


@pytest.fixture
def elastic_job(monkeypatch):
    monkeypatch.setattr(common_elastic, "elastic_enabled", lambda: True)


def identity_bcast(value):
    return value


def rank_zero():
    return 0


# --- State --------------------------------------------------------------------------------------------

class Recorder(State):
    """A State that records the calls made on it."""

    def __init__(self):
        super().__init__(bcast_object=identity_bcast, get_rank=rank_zero)
        self.calls = []

    def save(self):
        self.calls.append("save")

    def restore(self):
        self.calls.append("restore")

    def sync(self):
        self.calls.append("sync")

    def reset(self):
        self.calls.append("reset")


def test_state_abstract_methods():
    state = State(identity_bcast, rank_zero)
    for method in (state.save, state.restore, state.sync):
        with pytest.raises(NotImplementedError):
            method()
    state.reset()  # a no-op by default


def test_state_bad_arguments():
    with pytest.raises(ValueError, match=r"State\(bcast_object=...\) must be callable, got 3"):
        State(3, rank_zero)
    with pytest.raises(ValueError, match=r"State\(get_rank=...\) must be callable, got 'rank'"):
        State(identity_bcast, "rank")
    state = Recorder()
    with pytest.raises(ValueError, match="expects a list of callables, got <function rank_zero"):
        state.register_reset_callbacks(rank_zero)
    with pytest.raises(ValueError, match="expects a list of callables, got 7"):
        state.register_reset_callbacks(7)
    with pytest.raises(ValueError, match="each reset callback must be callable, got 'x'"):
        state.register_reset_callbacks([rank_zero, "x"])
    assert state._reset_callbacks == []  # nothing registered from a rejected list


def test_on_reset_runs_reset_then_callbacks_in_order():
    state = Recorder()
    state.register_reset_callbacks([lambda: state.calls.append("first")])
    state.register_reset_callbacks((lambda: state.calls.append("second"), lambda: state.calls.append("third")))
    state.on_reset()
    assert state.calls == ["reset", "first", "second", "third"]


@pytest.mark.parametrize("changes, skip_sync", [
    (HostUpdateResult.removed, True),
    (HostUpdateResult.added, False),
    (HostUpdateResult.mixed, False),
    (HostUpdateResult.no_update, False),  # a newer round with the same members: sync to be safe
])
def test_commit_saves_then_raises_host_updates(host_updates, changes, skip_sync):
    state = Recorder()
    host_updates.append(changes)
    with pytest.raises(HostsUpdatedInterrupt) as info:
        state.commit()
    assert info.value.skip_sync is skip_sync
    assert state.calls == ["save"]
    state.commit()  # the update was reported once
    state.check_host_updates()
    assert state.calls == ["save", "save"]


def test_check_host_updates_in_a_job_that_is_not_elastic():
    # libhvd's own answer: nothing, at once, in a job that is not elastic.
    assert not common_elastic.elastic_enabled()
    assert common_elastic._check_host_updates() is None
    assert common_elastic.elastic_round() == -1
    Recorder().check_host_updates()


def test_host_update_result_is_libhvds_bit_set():
    import hvd._core as core
    assert (HostUpdateResult.removed, HostUpdateResult.added) == (core.HOSTS_REMOVED, core.HOSTS_ADDED) == (1, 2)
    assert HostUpdateResult.mixed == 3


def test_exception_classes():
    from hvd.common.exceptions import CommunicationError, HostsUpdatedError, PeerLostError
    assert issubclass(PeerLostError, CommunicationError) and issubclass(CommunicationError, HorovodInternalError)
    assert issubclass(HostsUpdatedError, HorovodInternalError)


def test_hosts_updated_interrupt():
    assert issubclass(HostsUpdatedInterrupt, RuntimeError)
    assert not issubclass(HostsUpdatedInterrupt, HorovodInternalError)
    assert HostsUpdatedInterrupt().skip_sync is False
    assert HostsUpdatedInterrupt(True).skip_sync is True
    assert "removals only" in str(HostsUpdatedInterrupt(skip_sync=True))


# --- ObjectState --------------------------------------------------------------------------------------

def test_object_state_commit_restore_deep_copies():
    state = ObjectState(identity_bcast, rank_zero, epoch=0, history=[1.0], table={"a": [1]})
    assert (state.epoch, state.history, state.table) == (0, [1.0], {"a": [1]})
    state.epoch = 3
    state.history.append(2.0)
    state.table["a"].append(2)
    state.restore()  # back to the values given at construction
    assert (state.epoch, state.history, state.table) == (0, [1.0], {"a": [1]})

    state.epoch = 5
    state.history.append(3.0)
    state.save()
    state.history.append(4.0)  # in place, after the commit
    state.table["b"] = []
    state.restore()
    assert (state.epoch, state.history, state.table) == (5, [1.0, 3.0], {"a": [1]})
    # A change after restore() leaves the saved copy alone.
    state.history.append(9.0)
    state.restore()
    assert state.history == [1.0, 3.0]


def test_object_state_sync_broadcasts_current_values():
    sent = []

    def bcast(value):
        sent.append(copy.deepcopy(value))
        return {"epoch": 7, "batch": 11}  # rank 0's values

    state = ObjectState(bcast, rank_zero, epoch=0, batch=0)
    state.epoch = 2  # not committed: sync sends the current value, as the handlers do
    state.sync()
    assert sent == [{"epoch": 2, "batch": 0}]
    assert (state.epoch, state.batch) == (7, 11)

    empty = ObjectState(bcast, rank_zero)
    empty.sync()  # nothing to send: no collective
    assert len(sent) == 1


def test_object_state_bad_arguments():
    with pytest.raises(ValueError, match="attribute name 'commit' is reserved"):
        ObjectState(identity_bcast, rank_zero, commit=1)
    with pytest.raises(ValueError, match="attribute name '_saved_state' is reserved"):
        ObjectState(identity_bcast, rank_zero, _saved_state=1)
    state = ObjectState(identity_bcast, rank_zero, lock=None)
    state.lock = threading.Lock()
    with pytest.raises(ValueError, match="cannot save attribute 'lock' \\(a lock\\)"):
        state.save()


# --- run_fn -------------------------------------------------------------------------------------------

def make_loop(state, outcomes):
    """A run_fn-wrapped function that raises outcomes[i] on its i-th call (None: returns the call count)."""
    calls = itertools.count()

    def train(s, offset, scale=1):
        assert s is state
        i = next(calls)
        state.calls.append(f"train {i}")
        if i < len(outcomes) and outcomes[i] is not None:
            raise outcomes[i]
        return (i + offset) * scale

    return run_fn(train, lambda: state.calls.append("shutdown+init"))


def test_run_loop_restores_after_a_failure_and_syncs(elastic_job):
    state = Recorder()
    state.register_reset_callbacks([lambda: state.calls.append("callback")])
    train = make_loop(state, [CommunicationError("peer lost"), ShutDownError("shut down"), None])
    assert train(state, 10, scale=2) == 24
    assert state.calls == ["sync", "train 0",
                           "restore", "shutdown+init", "reset", "callback", "sync", "train 1",
                           "restore", "shutdown+init", "reset", "callback", "sync", "train 2"]


def test_run_loop_host_updates(elastic_job):
    state = Recorder()
    train = make_loop(state, [HostsUpdatedInterrupt(skip_sync=True), HostsUpdatedInterrupt(skip_sync=False),
                              HostsUpdatedInterrupt(skip_sync=True), CommunicationError("x")])
    assert train(state, 0) == 4
    # No restore for host updates; no sync after removals only; a failure syncs again.
    assert state.calls == ["sync", "train 0",
                           "shutdown+init", "reset", "train 1",
                           "shutdown+init", "reset", "sync", "train 2",
                           "shutdown+init", "reset", "train 3",
                           "restore", "shutdown+init", "reset", "sync", "train 4"]


def test_run_loop_failure_during_sync(elastic_job):
    state = Recorder()
    failures = [CommunicationError("during sync")]

    def sync():
        state.calls.append("sync")
        if failures:
            raise failures.pop()

    state.sync = sync
    train = make_loop(state, [])
    assert train(state, 0) == 0
    assert state.calls == ["sync", "restore", "shutdown+init", "reset", "sync", "train 0"]


@pytest.mark.parametrize("error", [MismatchError("shapes differ"), ValueError("bad"), KeyError("k")])
def test_run_loop_propagates_errors_a_retry_would_repeat(elastic_job, error):
    state = Recorder()
    train = make_loop(state, [error])
    with pytest.raises(type(error)):
        train(state, 0)
    assert state.calls == ["sync", "train 0"]


def test_run_loop_in_a_job_that_is_not_elastic():
    # No driver can re-form a static job: its failures propagate at once, with no restore or reset.
    state = Recorder()
    train = make_loop(state, [CommunicationError("peer lost")])
    with pytest.raises(CommunicationError, match="peer lost"):
        train(state, 0)
    assert state.calls == ["sync", "train 0"]


def test_run_loop_bad_arguments():
    with pytest.raises(ValueError, match="the elastic training function must be callable, got 5"):
        run_fn(5, lambda: None)
    with pytest.raises(ValueError, match=r"run_fn\(reset=...\) must be callable, got None"):
        run_fn(lambda s: s, None)

    @hvd.elastic.run
    def train(state):
        return state

    with pytest.raises(ValueError, match="train: the first argument of an elastic training function must be a "
                                         "State .*, got 42"):
        train(42)
    assert train.__name__ == "train"  # functools.wraps


# --- TorchState ---------------------------------------------------------------------------------------

def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 1))


def train_steps(model, optimizer, scheduler=None, steps=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        optimizer.zero_grad()
        x = torch.randn(16, 4, generator=g)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()


def snapshot(model, optimizer, scheduler=None):
    return copy.deepcopy((model.state_dict(), optimizer.state_dict(),
                          scheduler.state_dict() if scheduler is not None else None))


def assert_same(a, b):
    """Nested dicts/lists/tensors equal, tensors bit for bit."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


@pytest.mark.parametrize("make_optimizer", [
    lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
    lambda params: torch.optim.Adam(params, lr=0.01),
])
def test_torch_state_commit_restore(make_optimizer):
    model = make_model(1)
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    sampler = ElasticSampler(list(range(100)), seed=3)
    state = TorchState(model, optimizer, scheduler=scheduler, sampler=sampler, epoch=0, batch=0, log=[])
    assert set(state._handlers) == {"model", "optimizer", "scheduler", "sampler"}
    assert state.model is model and state.optimizer is optimizer and state.sampler is sampler

    train_steps(model, optimizer, scheduler, seed=1)
    sampler.record_batch(0, 10)
    state.epoch, state.batch = 1, 3
    state.log.append("step")
    state.commit()
    committed = snapshot(model, optimizer, scheduler)
    sampler.reset()
    committed_order = list(sampler)
    assert len(committed_order) == 90

    train_steps(model, optimizer, scheduler, seed=2)
    sampler.record_batch(1, 10)
    sampler.set_epoch(2)
    state.epoch, state.batch = 2, 0
    state.log.append("lost")
    assert not torch.equal(model[0].weight, committed[0]["0.weight"])

    state.restore()
    assert_same(snapshot(model, optimizer, scheduler), committed)
    assert (state.epoch, state.batch, state.log) == (1, 3, ["step"])
    assert sampler.state_dict() == {"epoch": 0, "processed_num": 10} and list(sampler) == committed_order
    assert optimizer.param_groups[0]["lr"] == scheduler.get_last_lr()[0]

    # A second restore after more training gives the same commit again (the saved copy was not used up).
    train_steps(model, optimizer, scheduler, seed=3)
    state.restore()
    assert_same(snapshot(model, optimizer, scheduler), committed)

    # Training goes on from the restored state exactly as from the committed one.
    reference_model = make_model(0)
    reference_model.load_state_dict(committed[0])
    reference_opt = make_optimizer(reference_model.parameters())
    reference_opt.load_state_dict(committed[1])
    train_steps(model, optimizer, seed=4)
    train_steps(reference_model, reference_opt, seed=4)
    assert_same(model.state_dict(), reference_model.state_dict())


def test_torch_state_sync_and_distributed_optimizer():
    # At one rank sync() is the identity, through the real broadcasts (broadcast_parameters,
    # broadcast_optimizer_state, broadcast_object).
    model = make_model(2)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                         named_parameters=model.named_parameters())
    state = TorchState(model=model, optimizer=optimizer, sampler=ElasticSampler(range(10)), epoch=4)
    train_steps(model, optimizer)
    before = snapshot(model, optimizer)
    state.sync()
    assert_same(snapshot(model, optimizer), before)
    assert state.epoch == 4
    state.commit()
    train_steps(model, optimizer)
    state.restore()
    assert_same(snapshot(model, optimizer), before)


def test_torch_state_assigning_a_handled_attribute_saves_it():
    state = TorchState(make_model(1), None, epoch=0)
    assert "optimizer" not in state._handlers and state.optimizer is None  # None is a plain attribute
    other = make_model(5)
    state.model = other
    assert state.model is other and state._handlers["model"].value is other
    with torch.no_grad():
        other[0].weight.zero_()
    state.restore()  # back to the value saved when it was assigned
    assert torch.equal(other[0].weight, make_model(5)[0].weight)


def test_torch_state_bad_arguments():
    with pytest.raises(ValueError, match="attribute name 'save' is reserved"):
        TorchState(save=make_model(0))
    with pytest.raises(ValueError, match="attribute name 'sync' is reserved"):
        TorchState(sync=3)


def test_handler_registry():
    registry = state_module.get_handler_registry()
    assert [t for t, _ in registry][:2] == [torch.nn.Module, torch.optim.Optimizer]

    class Counter:
        def __init__(self):
            self.n = 0

    class CounterHandler(state_module.StateHandler):
        def __init__(self, value):
            super().__init__(value)
            self.saved = value.n

        def save(self):
            self.saved = self.value.n

        def restore(self):
            self.value.n = self.saved

        def sync(self):
            pass

    try:
        state_module.set_handler_registry(registry + [(Counter, CounterHandler)])
        counter = Counter()
        state = TorchState(counter=counter)
        counter.n = 5
        state.commit()
        counter.n = 9
        state.restore()
        assert counter.n == 5 and "counter" in state._handlers
    finally:
        state_module.set_handler_registry(registry)
    assert state_module.get_handler_registry() is registry
    with pytest.raises(ValueError, match="set_handler_registry: 'x' is not a \\(type, handler class\\) pair"):
        state_module.set_handler_registry(["x"])
    with pytest.raises(ValueError, match="expects a list of \\(type, handler class\\) pairs, got 3"):
        state_module.set_handler_registry(3)
    assert state_module.get_handler_registry() is registry


def test_run_with_torch_state_at_one_rank(elastic_job, host_updates):
    """hvd.elastic.run with a real shutdown and init between the attempts."""
    model = make_model(3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = TorchState(model, optimizer, epoch=0)
    order = []
    state.register_reset_callbacks([lambda: order.append(("callback", hvd.is_initialized(), hvd.size()))])
    committed = {}

    @hvd.elastic.run
    def train(state, epochs):
        order.append(("train", state.epoch))
        for state.epoch in range(state.epoch, epochs):
            train_steps(state.model, state.optimizer, seed=state.epoch)
            if state.epoch == 1 and not committed:
                state.commit()
                committed.update(snapshot(model, optimizer)[0])
                train_steps(state.model, state.optimizer, seed=99)  # lost to the failure below
                raise CommunicationError("a peer was lost")
        return state.epoch

    assert train(state, 3) == 2
    assert order == [("train", 0), ("callback", True, 1), ("train", 1)]
    assert hvd.is_initialized()
    # The committed model (after epochs 0 and 1), trained again on epochs 1 and 2.
    reference = make_model(0)
    reference.load_state_dict(committed)
    reference_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for epoch in (1, 2):
        train_steps(reference, reference_opt, seed=epoch)
    assert_same(model.state_dict(), reference.state_dict())


# --- ElasticSampler -----------------------------------------------------------------------------------

@pytest.fixture
def ranks(monkeypatch):
    """ranks(r, n): a context in which ElasticSampler sees itself as rank r of an n-rank job (the previous
    view comes back on exit); ranks.set(r, n) changes the view for the rest of the test."""
    current = {"rank": 0, "size": 1}
    monkeypatch.setattr(sampler_module, "rank", lambda: current["rank"])
    monkeypatch.setattr(sampler_module, "size", lambda: current["size"])

    class As:
        def __init__(self, r, n):
            self.view = {"rank": r, "size": n}

        def __enter__(self):
            self.previous = dict(current)
            current.update(self.view)

        def __exit__(self, *_):
            current.update(self.previous)

        @staticmethod
        def set(r, n):
            current.update(rank=r, size=n)

    return As


def batches(sampler, batch_size, count):
    """The first `count` batches of this rank's indices, as a DataLoader would cut them."""
    indices = list(sampler)
    return [indices[i * batch_size:(i + 1) * batch_size] for i in range(count)]


@pytest.mark.parametrize("length, n, shuffle", [(100, 3, True), (10, 4, False), (64, 4, True), (5, 8, True)])
def test_sampler_partition_and_padding(ranks, length, n, shuffle):
    samplers = []
    for r in range(n):
        with ranks(r, n):
            samplers.append(ElasticSampler(range(length), shuffle=shuffle, seed=7))
    per_rank = -(-length // n)
    parts = [list(s) for s in samplers]
    assert all(len(s) == per_rank and len(p) == per_rank for s, p in zip(samplers, parts))
    union = [i for p in parts for i in p]
    assert sorted(set(union)) == list(range(length))
    # Padding repeats only as much as a multiple of n needs, from the start of the order.
    assert len(union) - length == per_rank * n - length
    order = list(range(length))
    if shuffle:
        import random
        random.Random(7).shuffle(order)
    else:
        assert parts[0][:3] == [0, n, 2 * n]
    padded = (order * (per_rank * n // length + 1))[:per_rank * n]
    assert parts == [padded[r::n] for r in range(n)]


@pytest.mark.parametrize("before, after", [(3, 2), (2, 3), (4, 1), (2, 5)])
def test_sampler_resize_mid_epoch(ranks, before, after):
    """k batches on `before` ranks, a reset to `after` ranks: the rest of the epoch is partitioned with no
    sample twice (between ranks or with the processed ones) and none lost."""
    length, batch_size, k = 103, 4, 3
    samplers = []
    for r in range(before):
        with ranks(r, before):
            samplers.append(ElasticSampler(range(length), seed=1))
    processed = []
    for r, s in enumerate(samplers):
        for batch in batches(s, batch_size, k):
            processed += batch
    for s in samplers:
        for i in range(k):
            s.record_batch(i, batch_size)
    assert samplers[0].processed_num == k * batch_size * before == len(processed) == len(set(processed))

    state = samplers[0].state_dict()
    resized = []
    for r in range(after):
        with ranks(r, after):
            s = ElasticSampler(range(length), seed=1)
            s.load_state_dict(state)  # what sync() does on every rank of the new job
            resized.append(s)
    rest = [list(s) for s in resized]
    remaining = length - len(processed)
    per_rank = -(-remaining // after)
    assert all(len(p) == per_rank == len(s) for p, s in zip(rest, resized))
    flat = [i for p in rest for i in p]
    assert set(flat) == set(range(length)) - set(processed)  # none lost, none processed twice
    # Between ranks, only the padding of the last batch repeats samples.
    assert len(flat) - len(set(flat)) == per_rank * after - remaining


def test_sampler_record_batch_and_set_epoch(ranks):
    with ranks(1, 2):
        s = ElasticSampler(range(20), seed=5)
        assert (s.num_replicas, s.rank, len(s)) == (2, 1, 10)
        epoch0 = list(s)
        s.record_batch(0, 3)
        s.record_batch(17, 3)  # batch_idx is not used
        assert s.processed_num == 12 and s.state_dict() == {"epoch": 0, "processed_num": 12}
        assert list(s) == epoch0  # counted, not re-partitioned until reset
        s.reset()
        assert len(s) == 4 and list(s) == epoch0[6:]
        s.set_epoch(1)
        assert s.processed_num == 0 and len(s) == 10
        epoch1 = list(s)
        with ranks(0, 2):
            other = ElasticSampler(range(20), seed=5)
            other.set_epoch(1)
        assert epoch1 != epoch0 and sorted(epoch1 + list(other)) == list(range(20))
        s.set_epoch(0)
        assert list(s) == epoch0  # the same order for the same epoch
        s.record_batch(0, 100)  # past the end: nothing left
        s.reset()
        assert len(s) == 0 and list(s) == []


def test_sampler_in_torch_state_repartitions_after_every_reset(ranks, host_updates, elastic_job):
    """After a reset caused by removals only, sync() is skipped; the sampler is re-partitioned anyway
    (by TorchState.reset) for the new size and rank."""
    ranks.set(2, 4)
    sampler = ElasticSampler(range(40), shuffle=False)
    state = TorchState(sampler=sampler)
    assert (sampler.num_replicas, sampler.rank, len(sampler)) == (4, 2, 10)
    host_updates.append(HostUpdateResult.removed)
    seen = []
    calls = itertools.count()

    def train(state):
        i = next(calls)
        seen.append((sampler.num_replicas, sampler.rank, list(sampler)))
        if i == 0:
            state.sampler.record_batch(0, 2)  # 8 samples processed over the 4 ranks
            state.commit()
        return i

    def reset():
        ranks.set(1, 3)  # the job re-formed with 3 ranks; this process is now rank 1

    assert run_fn(train, reset)(state) == 1
    assert seen[0] == (4, 2, list(range(2, 40, 4)))
    assert seen[1] == (3, 1, list(range(8, 40))[1::3])


def test_sampler_bad_arguments():
    import numpy as np

    with pytest.raises(ValueError, match="the dataset must have a length \\(len\\(\\)\\), got a object"):
        ElasticSampler(object())
    with pytest.raises(ValueError, match="shuffle must be a bool, got 'yes'"):
        ElasticSampler(range(4), shuffle="yes")
    with pytest.raises(ValueError, match="seed must be an int, got 1.5"):
        ElasticSampler(range(4), seed=1.5)
    s = ElasticSampler(range(4), seed=np.int64(3))
    assert s.seed == 3 and type(s.seed) is int
    with pytest.raises(ValueError, match="record_batch\\(batch_size\\) must be an int >= 0, got -1"):
        s.record_batch(0, -1)
    with pytest.raises(ValueError, match="record_batch\\(batch_size\\) must be an int >= 0, got 2.0"):
        s.record_batch(0, 2.0)
    with pytest.raises(ValueError, match="record_batch\\(batch_size\\) must be an int >= 0, got True"):
        s.record_batch(0, True)
    s.record_batch(0, np.int32(2))  # NumPy and torch integers are integers
    s.record_batch(1, torch.tensor(1))
    assert s.processed_num == 3
    with pytest.raises(ValueError, match="set_epoch\\(epoch\\) must be an int, got '1'"):
        s.set_epoch("1")
    with pytest.raises(ValueError, match="expects a dict with 'epoch' and 'processed_num', got \\[1\\]"):
        s.load_state_dict([1])
    with pytest.raises(ValueError, match="\\{'epoch': 1\\} lacks 'processed_num'"):
        s.load_state_dict({"epoch": 1})
    with pytest.raises(ValueError, match="'processed_num' must be an int >= 0, got -3"):
        s.load_state_dict({"epoch": 1, "processed_num": -3})
    assert s.state_dict() == {"epoch": 0, "processed_num": 3}  # unchanged by the rejected calls
