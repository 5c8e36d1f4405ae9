"""Elastic training with PyTorch (Horovod's horovod.torch.elastic): run, TorchState, ElasticSampler.

    import hvd.torch as hvd

    hvd.init()
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        ...
        state.commit()

    train(state)

State and ObjectState are in hvd.common.elastic, as Horovod has them in horovod.common.elastic. The
behaviour and where it departs from Horovod's are described in docs/python.md ("Elastic training").
"""

from hvd.common.elastic import run_fn
from hvd.torch.elastic.sampler import ElasticSampler
from hvd.torch.elastic.state import TorchState
from hvd.torch.mpi_ops import init, shutdown


def run(func):
    """Decorator: runs func(state, *args, **kwargs) so that it survives workers failing and hosts coming
    and going (see hvd.common.elastic.run_fn).

    Before each call, state.sync() gives every rank rank 0's state (skipped after a reset caused by host
    removals only, where every rank already has it). When a collective fails, the state goes back to its
    last commit; when the job re-forms, hvd is re-initialized (shutdown(), init()), state.on_reset() runs
    the reset callbacks, and func is called again.

    Do not run collectives before calling the decorated function: a worker that joins a running job
    starts with sync(), which the others would not be in step with.
    """
    return run_fn(func, _reset)


def _reset():
    shutdown()
    init()


__all__ = [
    "TorchState",
    "ElasticSampler",
    "run",
]
