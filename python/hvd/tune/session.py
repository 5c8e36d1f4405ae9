"""Inside a trial's training function: hvd.tune.report and hvd.tune.get_checkpoint.

A trial runs the user's train_fn(config) on every rank through hvd.train's worker session, so these are
hvd.train's report and get_checkpoint: every rank may report, rank 0's values count, and a checkpoint reported
with hvd.train.report(..., checkpoint=) (or here) is persisted in the trial's directory. report() does not
synchronise the ranks. Outside a trial they raise RuntimeError saying so.
"""

from typing import Any, Dict, Optional


def report(metrics: Optional[Dict[str, Any]] = None, *, checkpoint=None, **kwargs: Any) -> None:
    """Reports one iteration's metrics: report(loss=0.5, epoch=2) (Tune's form) or report({"loss": 0.5}).
    The tuner uses the search's metric of each report for pruning and for the trial's result. TypeError for
    metrics that are neither, or both forms at once."""
    from hvd.train import session

    if metrics is not None and kwargs:
        raise TypeError("hvd.tune.report: pass the metrics as a dict or as keywords, not both")
    if metrics is None:
        metrics = kwargs
    if not isinstance(metrics, dict):
        raise TypeError(f"hvd.tune.report: metrics must be a dict or keywords, got {type(metrics).__name__}")
    if session._session is None:
        raise RuntimeError("hvd.tune.report: called outside a trial run by hvd.tune.run")
    session.report(metrics, checkpoint=checkpoint)


def get_checkpoint():
    """The checkpoint a retried trial resumes from (its latest persisted one), else None."""
    from hvd.train import session

    if session._session is None:
        raise RuntimeError("hvd.tune.get_checkpoint: called outside a trial run by hvd.tune.run")
    return session.get_checkpoint()
