"""What the tree protocols' scikit-learn style estimators share: the callbacks a fit's arguments ask
for, the eval sets' names (weighted or not), scikit-learn's ``y``, and binary classes from margins."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..data.dataset import VerticalDataset
from ..errors import ConfigError, DataError
from .callbacks import EarlyStopping, EvaluationLogger, ProgressBar, TrainingCallback
from .checkpoint import Checkpoint
from .config import default_gradient_bound
from .kernels import transform_margin
from .multiclass import softmax

__all__ = ["eval_sets_of", "fit_callbacks", "BinaryClassifier", "ScoreOnDataLabels", "check_y", "weighted_fit_data", "bound_for_weights"]


def check_y(data: VerticalDataset, y: Any) -> None:
    """scikit-learn's ``y`` in ``fit(data, y)``: the labels are the data's own, held by the label party,
    so ``y`` is accepted only as None or, where the caller holds the labels (a simulation), equal to
    them; anything else raises :class:`DataError` (a ``y`` is never sent to any party).

    >>> check_y(None, None)
    """
    if y is None:
        return
    label = getattr(data, "label", None)
    if label is None:
        raise DataError("fit takes the labels from the data (the label party holds them): pass y=None; a y from the "
                        "driver is accepted only when it equals the labels of in-process data")
    y = np.asarray(y, dtype=np.float64)
    if y.shape != label.shape or not np.array_equal(y, label):
        raise DataError(f"y ({y.shape[0] if y.ndim else y} values) is not the data's labels: the protocols train on the "
                        "labels the label party holds; pass y=None, or build the data with these labels")


def weighted_fit_data(data: VerticalDataset, y: Any, sample_weight: Any, eval_set: Sequence[VerticalDataset] | None,
                      sample_weight_eval_set: Sequence[Any] | None) -> tuple[VerticalDataset, dict[str, VerticalDataset]]:
    """The training data with its sample weights attached (held with the labels, see
    :meth:`VerticalDataset.with_weights`; ``sample_weight=None`` keeps the weights the data carries, if
    any) and the eval sets by name, each with its weights from ``sample_weight_eval_set`` (one entry per
    eval set; None keeps that set's own)."""
    VerticalDataset.ensure(data)
    check_y(data, y)
    if sample_weight is not None:
        data = data.with_weights(sample_weight)
    evals = eval_sets_of(eval_set)
    if sample_weight_eval_set is not None:
        if not isinstance(sample_weight_eval_set, (list, tuple)) or len(sample_weight_eval_set) != len(evals):
            given = len(sample_weight_eval_set) if isinstance(sample_weight_eval_set, (list, tuple)) else "no list"
            raise DataError(f"sample_weight_eval_set takes one weight array (or None) per eval set: {len(evals)} eval "
                            f"set(s), got {given}")
        evals = {k: d if w is None else d.with_weights(w) for (k, d), w in zip(evals.items(), sample_weight_eval_set)}
    return data, evals


def bound_for_weights(objective: str, gradient_bound: float | None, sample_weight: Any,
                      scale_pos_weight: float = 1.0) -> float | None:
    """The ``gradient_bound`` a weighted fit encodes with: the one given, else (when the caller holds
    weights above 1, or ``scale_pos_weight`` > 1) the objective's default bound times the next power of
    two of the largest weight, else None (the default). Every party sees the bound: a power of two
    says only roughly how large the largest weight is.

    >>> bound_for_weights("binary:logistic", None, [0.5, 3.0]), bound_for_weights("binary:logistic", None, None)
    (4.0, None)
    """
    if gradient_bound is not None:
        return gradient_bound
    w_max = max(1.0, float(np.max(sample_weight)) if sample_weight is not None and len(sample_weight) else 1.0)
    w_max *= max(1.0, float(scale_pos_weight))
    if w_max <= 1.0:
        return None
    return default_gradient_bound(objective) * 2.0 ** math.ceil(math.log2(w_max))


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


class ScoreOnDataLabels:
    """scikit-learn's ``score`` (accuracy, or R^2) with ``y`` and ``sample_weight`` defaulting to the
    data's own labels and weights, which the caller holds for in-process data: what scikit-learn's
    model selection calls when it is given ``X`` = a vertical data set and no ``y``. Party-held data
    keeps its labels at the label party: use ``model_.evaluate(data)`` there (the label party scores)."""

    def score(self, data: VerticalDataset, y=None, sample_weight=None) -> float:
        if y is None:
            y = getattr(data, "label", None)
            if y is None:
                raise DataError("score needs the labels at the caller: this data's labels stay with the label party; "
                                "use model_.evaluate(data), which the label party computes")
            sample_weight = getattr(data, "weight", None) if sample_weight is None else sample_weight
        return super().score(data, y, sample_weight=sample_weight)


class BinaryClassifier(ScoreOnDataLabels):
    """``predict_proba`` and ``predict`` of a 0/1 classifier from its ``predict_margin`` (logistic link)."""

    classes_ = np.array([0, 1])

    def predict_proba(self, data: VerticalDataset) -> np.ndarray:
        """``(n, 2)`` class probabilities."""
        p = transform_margin("binary:logistic", self.predict_margin(data))
        return np.column_stack([1.0 - p, p])

    def predict(self, data: VerticalDataset) -> np.ndarray:
        """Predicted class (0 or 1) per row."""
        return (self.predict_proba(data)[:, 1] > 0.5).astype(np.int64)


class ClassPredictions:
    """A classifier's ``n_classes_``, ``predict_proba`` and ``predict`` from its ``predict_margin``: one
    margin per row (binary) or ``K`` (multi-class, columns in the order of ``classes_``)."""

    @property
    def n_classes_(self) -> int:
        return len(self.classes_)

    def predict_proba(self, data: VerticalDataset) -> np.ndarray:
        """``(n, K)`` class probabilities, columns in the order of ``classes_`` (``K`` = 2 for binary)."""
        return _probabilities(self.predict_margin(data))

    def predict(self, data: VerticalDataset) -> np.ndarray:
        """The predicted class (one of ``classes_``) of every row."""
        margin = self.predict_margin(data)
        if margin.ndim == 1:  # binary: classes 0 and 1
            return (_probabilities(margin)[:, 1] > 0.5).astype(np.int64)
        return np.asarray(self.classes_)[margin.argmax(axis=1)]  # softmax keeps the order


def _probabilities(margin: np.ndarray) -> np.ndarray:
    if margin.ndim == 2:
        return softmax(margin)
    p = transform_margin("binary:logistic", margin)
    return np.column_stack([1.0 - p, p])
