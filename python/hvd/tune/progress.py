"""What a running search shows: on a terminal, a live table (trials running, pending, done; the best so far; each
running trial's last metric), redrawn at most twice a second; elsewhere one line per event. At the end: the table
once more, and a plot of the metric per trial over time written as <experiment>/<metric>.png.

Threading: the tuner's main thread only; prepare_plot's thread only imports matplotlib. Nothing here raises: a
failing plot is reported as one line.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from typing import List, Optional

from hvd.tune.space import flatten
from hvd.tune.trial import ERROR, PENDING, PRUNED, RUNNING, TERMINATED, Trial

_REDRAW_S = 0.5


def _short(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def describe(config: dict, limit: int = 60) -> str:
    text = ", ".join(f"{k}={_short(v)}" for k, v in flatten(config).items())
    return text if len(text) <= limit else text[:limit - 3] + "..."


class Progress:
    def __init__(self, metric: Optional[str], mode: str, total: int, stream=None, live: Optional[bool] = None):
        self.metric = metric
        self.mode = mode
        self.total = total
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self._drawn_lines = 0
        self._last_draw = 0.0

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except Exception:
            pass

    def event(self, text: str, trials: List[Trial]) -> None:
        if self.live:
            self.table(trials)
        else:
            self._write(f"hvd.tune: {text}\n")

    def table(self, trials: List[Trial], force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_draw < _REDRAW_S:
            return
        self._last_draw = now
        lines = self.render(trials)
        erase = f"\x1b[{self._drawn_lines}F\x1b[J" if self.live and self._drawn_lines else ""
        self._write(erase + "\n".join(lines) + "\n")
        self._drawn_lines = len(lines) if self.live else 0

    def render(self, trials: List[Trial]) -> List[str]:
        counts = {s: sum(1 for t in trials if t.status == s) for s in (RUNNING, TERMINATED, PRUNED, ERROR)}
        pending = self.total - sum(counts.values())
        best = self._best(trials)
        lines = [f"== hvd.tune: {counts[RUNNING]} running, {max(pending, 0)} pending, {counts[TERMINATED]} done, "
                 f"{counts[PRUNED]} pruned, {counts[ERROR]} error"
                 + (f"; best {self.metric}={_short(best.last(self.metric))} (trial {best.trial_id})" if best else "")]
        metric = self.metric or "-"
        lines.append(f"{'trial':>7}  {'status':<10} {metric:>10} {'iter':>5} {'wall s':>7}  config")
        for t in trials:
            if t.status == PENDING:
                continue
            value = t.last(self.metric) if self.metric else None
            wall = t.wall_s
            lines.append(f"{t.trial_id:>7}  {t.status:<10} {_short(value) if value is not None else '':>10} "
                         f"{len(t.history):>5} {wall if wall is not None else 0:>7.1f}  {describe(t.config)}")
        return lines

    def _best(self, trials: List[Trial]) -> Optional[Trial]:
        scored = [t for t in trials if t.status != ERROR and isinstance(t.last(self.metric), (int, float))]
        if not self.metric or not scored:
            return None
        pick = min if self.mode == "min" else max
        return pick(scored, key=lambda t: t.last(self.metric))

    def finish(self, trials: List[Trial]) -> None:
        if not self.live:
            self._drawn_lines = 0
        self.table(trials, force=True)


def prepare_plot() -> None:
    """Imports matplotlib as plot() uses it (the Agg backend) in a daemon thread, for a search that will draw its
    plot: called once the trials run, while the driver mostly waits for them, so that plot() after the last
    trial only draws. The import is the larger part of the plot's cost (about 0.6 of 0.95 s here) and is paid
    either way; a failing import is left for plot() to report."""
    if "matplotlib.pyplot" in sys.modules or importlib.util.find_spec("matplotlib") is None:
        return

    def load() -> None:
        try:
            _pyplot()
        except Exception:
            pass

    threading.Thread(target=load, name="hvd-tune-import-matplotlib", daemon=True).start()


def _pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(trials: List[Trial], metric: str, started: float, path: str) -> Optional[str]:
    """The metric of every trial over time since the search started, as a PNG at path; None or why not."""
    try:
        plt = _pyplot()
    except Exception as e:
        return f"no plot: matplotlib cannot be imported ({e})"
    figure, axes = plt.subplots(figsize=(8, 4.5), dpi=100)
    try:
        drawn = 0
        for t in trials:
            points = [((t.started or started) + row.get("time_total_s", 0.0), row[metric]) for row in t.history
                      if isinstance(row.get(metric), (int, float))]
            if not points:
                continue
            xs = [p[0] - started for p in points]
            axes.plot(xs, [p[1] for p in points], marker="o", markersize=3, label=f"{t.trial_id} ({t.status.lower()})")
            drawn += 1
        axes.set_xlabel("seconds since the search started")
        axes.set_ylabel(metric)
        axes.set_title(f"{metric} per trial")
        if 0 < drawn <= 12:
            axes.legend(fontsize=7)
        figure.tight_layout()
        figure.savefig(path)
        return None
    except Exception as e:
        return f"no plot: {type(e).__name__}: {e}"
    finally:
        plt.close(figure)
