"""Training callbacks: progress bar, evaluation logging, early stopping.

A callback sees the training loop at three points, as in XGBoost's
``TrainingCallback``: before training, after every tree (with that tree's
metrics per data set; returning True stops training) and after training.
"""

from __future__ import annotations

import logging
import math
import sys
import time
import warnings
from typing import Any, Sequence, TextIO

from ..errors import ConfigError, DataWarning

__all__ = ["TrainingCallback", "ProgressBar", "EvaluationLogger", "EarlyStopping", "TreeTimer", "CallbackList"]

log = logging.getLogger(__name__)


class TrainingCallback:
    """Base class; override any of the three hooks.

    Example
    -------
    >>> class StopAtAuc(TrainingCallback):
    ...     def after_iteration(self, iteration, logs):
    ...         return logs.get("validation_0", {}).get("auc", 0.0) > 0.9
    >>> StopAtAuc().after_iteration(3, {"validation_0": {"auc": 0.95}})
    True
    """

    def before_training(self, config: Any) -> None:
        pass

    def after_iteration(self, iteration: int, logs: dict[str, dict[str, float]]) -> bool:
        return False

    def after_training(self, model: Any) -> None:
        pass


class ProgressBar(TrainingCallback):
    """Trees done, elapsed time, ETA and the latest metrics, after every tree.

    On a terminal the bar redraws one line in place (``\\r``); into anything else (a log file, a
    pipe, a notebook's captured stream) it writes one plain line per tree, so logs hold no
    carriage returns.

    Example
    -------
    >>> import io
    >>> bar = ProgressBar(stream=io.StringIO())
    >>> bar.before_training(type("C", (), {"n_trees": 2})())
    >>> bar.after_iteration(0, {"train": {"auc": 0.7}})
    False
    """

    def __init__(self, stream: TextIO | None = None, width: int = 24) -> None:
        self.stream = stream
        self.width = width

    def before_training(self, config: Any) -> None:
        self.total = config.n_trees
        self.start = time.perf_counter()

    def after_iteration(self, iteration: int, logs: dict[str, dict[str, float]]) -> bool:
        done = iteration + 1
        elapsed = time.perf_counter() - self.start
        eta = elapsed / done * (self.total - done)
        filled = int(self.width * done / self.total)
        latest = " ".join(f"{k}-{m}={v:.4f}" for k, d in logs.items() for m, v in d.items() if isinstance(v, float))
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] tree {done}/{self.total} {elapsed:6.1f}s ETA {eta:6.1f}s {latest}"
        stream = self.stream or sys.stderr
        stream.write(f"\r{line}" if self._redraws(stream) else f"{line.rstrip()}\n")
        stream.flush()
        return False

    @staticmethod
    def _redraws(stream: TextIO) -> bool:
        """Whether ``stream`` is a terminal, where ``\\r`` redraws the line instead of piling up."""
        isatty = getattr(stream, "isatty", None)
        try:
            return bool(isatty and isatty())
        except ValueError:  # a closed stream
            return False

    def after_training(self, model: Any) -> None:
        stream = self.stream or sys.stderr
        if self._redraws(stream):
            stream.write("\n")
            stream.flush()


class EvaluationLogger(TrainingCallback):
    """Log every ``period`` trees' metrics through :mod:`logging`.

    Example
    -------
    >>> EvaluationLogger(period=5).after_iteration(0, {"train": {"logloss": 0.5}})
    False
    """

    def __init__(self, period: int = 1) -> None:
        if period < 1:
            raise ConfigError(f"period must be >= 1, got {period}")
        self.period = period

    def after_iteration(self, iteration: int, logs: dict[str, dict[str, float]]) -> bool:
        if iteration % self.period == 0:
            log.info("[%d] %s", iteration, "  ".join(f"{k}-{m}:{v:.5f}" for k, d in logs.items() for m, v in d.items()
                                                      if isinstance(v, float)))
        return False


class EarlyStopping(TrainingCallback):
    """Stop when ``metric`` on ``data`` has not improved for ``rounds`` trees.

    The model keeps the trees up to the best iteration. Each training starts afresh (the same
    callback may watch several fits). A NaN score never counts as an improvement, and is reported
    once per fit with a :class:`~ray_vfl.errors.DataWarning`; if no score is a number for
    ``rounds`` trees, training stops and keeps every tree.

    Parameters
    ----------
    rounds : int
        Patience in trees.
    data : str
        Name of the eval set to watch (``"validation_0"`` for the first).
    metric : str or None
        Metric name; default ``auc`` for classification, ``rmse`` otherwise.
    maximize : bool or None
        Direction; inferred from the metric name when None.

    Example
    -------
    >>> stop = EarlyStopping(rounds=2)
    >>> [stop.after_iteration(i, {"validation_0": {"auc": a}}) for i, a in enumerate([0.7, 0.8, 0.79, 0.78])]
    [False, False, False, True]
    >>> stop.best_iteration
    1
    """

    def __init__(self, rounds: int, data: str = "validation_0", metric: str | None = None, maximize: bool | None = None) -> None:
        if not isinstance(rounds, int) or rounds < 1:
            raise ConfigError(f"early stopping rounds must be an integer >= 1, got {rounds!r}")
        self.rounds, self.data, self.metric, self.maximize = rounds, data, metric, maximize
        self.before_training(None)

    def before_training(self, config: Any) -> None:
        self.best_iteration: int | None = None
        self.best_score = -math.inf
        self._warned_nan = False

    def after_iteration(self, iteration: int, logs: dict[str, dict[str, float]]) -> bool:
        if self.data not in logs:
            raise ConfigError(f"early stopping watches {self.data!r}, but the logged data sets are {sorted(logs)}")
        metrics = logs[self.data]
        metric = self.metric or ("auc" if "auc" in metrics else next(iter(metrics)))
        if metric not in metrics:
            raise ConfigError(f"early stopping metric {metric!r} is not among {sorted(metrics)}")
        maximize = self.maximize if self.maximize is not None else metric in ("auc", "accuracy")
        score = metrics[metric] if maximize else -metrics[metric]
        if math.isnan(score):
            if not self._warned_nan:
                self._warned_nan = True
                warnings.warn(f"early stopping: {metric} on {self.data!r} is NaN after tree {iteration + 1}; a NaN "
                              "never counts as an improvement", DataWarning, stacklevel=2)
        elif self.best_iteration is None or score > self.best_score:
            self.best_iteration, self.best_score = iteration, score
        since = self.best_iteration if self.best_iteration is not None else -1
        return iteration - since >= self.rounds


class TreeTimer(TrainingCallback):
    """Seconds spent growing trees, from the first tree's start (after set-up and key generation), and
    each tree's own seconds (``laps``; a lap also holds what callbacks listed before the timer did
    after the previous tree).

    Example
    -------
    >>> timer = TreeTimer()
    >>> timer.before_training(None); timer.after_iteration(0, {})
    False
    >>> timer.seconds >= 0.0 and len(timer.laps) == 1
    True
    """

    def before_training(self, config: Any) -> None:
        self.start, self.seconds, self.laps = time.perf_counter(), 0.0, []
        self.wall_start = self.wall_end = time.time()  # the window of the parties' measured intervals

    def after_iteration(self, iteration: int, logs: dict[str, dict[str, float]]) -> bool:
        seconds = time.perf_counter() - self.start
        self.laps.append(seconds - self.seconds)
        self.seconds = seconds
        self.wall_end = time.time()
        return False


class CallbackList:
    """Runs several callbacks; training stops if any asks to."""

    def __init__(self, callbacks: Sequence[TrainingCallback]) -> None:
        for cb in callbacks:
            if not isinstance(cb, TrainingCallback):
                raise ConfigError(f"callbacks must be TrainingCallback instances, got {type(cb).__name__}")
        self.callbacks = list(callbacks)

    def before_training(self, config: Any) -> None:
        for cb in self.callbacks:
            cb.before_training(config)

    def after_iteration(self, iteration: int, logs: dict[str, dict[str, float]]) -> bool:
        return any([cb.after_iteration(iteration, logs) for cb in self.callbacks])

    def after_training(self, model: Any) -> None:
        for cb in self.callbacks:
            cb.after_training(model)

    @property
    def best_iteration(self) -> int | None:
        for cb in self.callbacks:
            if isinstance(cb, EarlyStopping):
                return cb.best_iteration
        return None

