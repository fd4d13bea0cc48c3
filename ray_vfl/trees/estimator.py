"""What the tree protocols' scikit-learn style estimators share: the callbacks a fit's arguments ask
for, the eval sets' names, and binary classes from margins."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..data.dataset import VerticalDataset
from ..errors import ConfigError, DataError
from .callbacks import EarlyStopping, EvaluationLogger, ProgressBar, TrainingCallback
from .checkpoint import Checkpoint
from .kernels import transform_margin

__all__ = ["eval_sets_of", "fit_callbacks", "BinaryClassifier"]


def eval_sets_of(eval_set: Sequence[VerticalDataset] | None) -> dict[str, VerticalDataset]:
    """``eval_set=[a, b]`` as ``{"validation_0": a, "validation_1": b}``, each checked.

    Example
    -------
    >>> eval_sets_of(None)
    {}
    """
    if eval_set is not None and not isinstance(eval_set, (list, tuple)):
        raise DataError(f"eval_set takes a list of data sets, e.g. eval_set=[test]; got {type(eval_set).__name__}")
    return {f"validation_{i}": VerticalDataset.ensure(d, f"eval_set[{i}]") for i, d in enumerate(eval_set or [])}


def fit_callbacks(estimator: Any, evals: dict[str, VerticalDataset] | None, checkpoint_dir: str | None,
                  checkpoint_every: int, stop_metric: str | None = None, maximize: bool | None = None
                  ) -> list[TrainingCallback]:
    """The estimator's own ``callbacks``, then a progress bar (and, with eval sets, a metrics logger) if
    ``verbose``, a :class:`Checkpoint` for ``checkpoint_dir`` and :class:`EarlyStopping` on the last eval
    set for ``early_stopping_rounds`` (``evals=None``: the protocol scores no eval sets)."""
    if isinstance(estimator.callbacks, TrainingCallback):
        raise ConfigError(f"callbacks takes a list of callbacks, e.g. callbacks=[{type(estimator.callbacks).__name__}(...)]")
    callbacks = list(estimator.callbacks or [])
    if estimator.verbose:
        callbacks += [ProgressBar()] + ([EvaluationLogger()] if evals is not None else [])
    if checkpoint_dir is not None:
        callbacks.append(Checkpoint(checkpoint_dir, checkpoint_every))
    rounds = getattr(estimator, "early_stopping_rounds", None)
    if rounds is not None:
        if not evals:
            raise DataError("early_stopping_rounds needs an eval_set to watch")
        callbacks.append(EarlyStopping(rounds, data=f"validation_{len(evals) - 1}", metric=stop_metric, maximize=maximize))
    return callbacks


class BinaryClassifier:
    """``predict_proba`` and ``predict`` of a 0/1 classifier from its ``predict_margin`` (logistic link)."""

    classes_ = np.array([0, 1])

    def predict_proba(self, data: VerticalDataset) -> np.ndarray:
        """``(n, 2)`` class probabilities."""
        p = transform_margin("binary:logistic", self.predict_margin(data))
        return np.column_stack([1.0 - p, p])

    def predict(self, data: VerticalDataset) -> np.ndarray:
        """Predicted class (0 or 1) per row."""
        return (self.predict_proba(data)[:, 1] > 0.5).astype(np.int64)
