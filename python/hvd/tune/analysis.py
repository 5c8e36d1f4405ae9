"""The outcome of hvd.tune.run: Ray Tune's ExperimentAnalysis / ResultGrid essentials.

Analysis.best_config, best_result, best_trial, best_logdir: the trial whose last reported metric is the best
(Tune's scope "last") among the trials that reported it and did not fail; results (alias results_df): a pandas
DataFrame with one row per trial (trial_id, status, the last reported values, best_<metric>,
training_iteration, wall_s, attempts, error, logdir, and the config as config/<key> columns); trial_dataframes:
each trial's report history; get_best_checkpoint(): the best checkpoint the best trial persisted. Everything is
read from the trials the search ran (and, after resume=True, the trials an earlier driver finished).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from hvd.tune.space import flatten
from hvd.tune.trial import ERROR, Trial


class Analysis:
    def __init__(self, trials: List[Trial], metric: Optional[str], mode: str, experiment_path: str):
        self.trials = sorted(trials, key=lambda t: t.number)
        self.metric = metric
        self.mode = mode
        self.experiment_path = experiment_path

    def get_best_trial(self, metric: Optional[str] = None, mode: Optional[str] = None,
                       scope: str = "last") -> Optional[Trial]:
        """The best trial by `metric` (default: the search's) under `mode`; scope "last" compares each trial's
        last reported value, "all" its best one. None when no trial that did not fail reported the metric."""
        metric = metric or self.metric
        mode = mode or self.mode
        if scope not in ("last", "all"):
            raise ValueError(f"scope={scope!r}: choose 'last' or 'all'")
        if mode not in ("min", "max"):
            raise ValueError(f"mode={mode!r}: choose 'min' or 'max'")
        scored = []
        for trial in self.trials:
            value = trial.last(metric) if scope == "last" else trial.best(metric, mode)
            if trial.status != ERROR and isinstance(value, (int, float)):
                scored.append((value, trial.number, trial))
        if not scored:
            return None
        pick = min if mode == "min" else max
        return pick(scored, key=lambda item: (item[0] if mode == "min" else item[0], -item[1] if mode == "max"
                                              else item[1]))[2]

    @property
    def best_trial(self) -> Optional[Trial]:
        """ValueError when the search had no metric (as Tune's: pass metric= and mode= to hvd.tune.run)."""
        if self.metric is None:
            raise ValueError("best_trial / best_config / best_result: the search had no metric; pass metric= and "
                             "mode= to hvd.tune.run (or call get_best_trial(metric, mode))")
        return self.get_best_trial()

    @property
    def best_config(self) -> Optional[Dict[str, Any]]:
        trial = self.best_trial
        return trial.config if trial else None

    @property
    def best_result(self) -> Optional[Dict[str, Any]]:
        """The best trial's last report, with its config under "config"."""
        trial = self.best_trial
        if trial is None or not trial.history:
            return None
        return dict(trial.history[-1], config=trial.config, trial_id=trial.trial_id)

    @property
    def best_logdir(self) -> Optional[str]:
        trial = self.best_trial
        return trial.directory if trial else None

    def get_best_checkpoint(self, trial: Optional[Trial] = None, metric: Optional[str] = None,
                            mode: Optional[str] = None):
        """The checkpoint of `trial` (default: the best trial) with the best `metric` among those it persisted,
        else its latest; None when it persisted none."""
        trial = trial or self.get_best_trial(metric, mode)
        if trial is None or trial.manager is None:
            return None
        metric = metric or self.metric
        mode = mode or self.mode
        ranked = [(m.get(metric), c) for c, m in trial.manager.best_checkpoints()
                  if isinstance(m.get(metric), (int, float))]
        if ranked:
            return (min if mode == "min" else max)(ranked, key=lambda item: item[0])[1]
        return trial.manager.latest

    @property
    def results(self):
        """One row per trial (see the module docstring), a pandas DataFrame."""
        import pandas

        rows = []
        for trial in self.trials:
            row: Dict[str, Any] = {"trial_id": trial.trial_id, "status": trial.status}
            if trial.history:
                row.update({k: v for k, v in trial.history[-1].items() if k != "checkpoint_dir_name"})
            if self.metric:
                row[f"best_{self.metric}"] = trial.best(self.metric, self.mode)
            row.update(wall_s=trial.wall_s, attempts=trial.attempts, error=trial.error, logdir=trial.directory)
            row.update({f"config/{k}": v for k, v in flatten(trial.config).items()})
            rows.append(row)
        return pandas.DataFrame(rows)

    results_df = results

    def dataframe(self):
        """The same table as results (Tune's ExperimentAnalysis.dataframe())."""
        return self.results

    @property
    def trial_dataframes(self):
        """{trial_id: DataFrame of its reports}."""
        import pandas

        return {t.trial_id: pandas.DataFrame(t.history) for t in self.trials}

    def __repr__(self) -> str:
        # Never raises (a REPL, a log line): without a metric or a finished trial there is no best config to show.
        try:
            best = f", best_config={self.best_config!r}"
        except ValueError:
            best = ""
        return f"Analysis({len(self.trials)} trials, metric={self.metric!r}, mode={self.mode!r}{best})"
