"""What every scikit-learn style ray_vfl estimator shares: input checks, the runtime, fitted state."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator

from ..errors import NotFittedError
from .actors import Runtime

__all__ = ["FederatedEstimator"]


class FederatedEstimator(BaseEstimator):
    """Base of :class:`~ray_vfl.SecureBoostClassifier`, :class:`~ray_vfl.splitnn.SplitNNClassifier` and the like.

    Subclasses keep scikit-learn's conventions: ``__init__`` stores parameters
    (one of them ``runtime``), ``fit`` stores the trained model as ``model_``.
    """

    runtime: Runtime | None

    def _fit_runtime(self, timeout_s: float | None) -> Runtime:
        """The runtime to train with: the one given, or a new one (with ``timeout_s`` if set)."""
        if self.runtime is not None:
            return self.runtime
        return Runtime() if timeout_s is None else Runtime(timeout_s=timeout_s)

    def _set_fitted_shape(self, data) -> None:
        """scikit-learn's ``n_features_in_`` and ``feature_names_in_`` (every party's column names, in
        party order: the schema the driver holds anyway), from the training data."""
        self._set_feature_names({p: list(data.columns(p)) for p in data.party_names})

    def _set_feature_names(self, columns: dict[str, list[str]]) -> None:
        """The same from ``{party: its column names}`` in party order (a loaded model's parties tell them)."""
        names = [c for cols in columns.values() for c in cols]
        self.n_features_in_ = len(names)
        self.party_features_ = {p: len(cols) for p, cols in columns.items()}
        self.feature_names_in_ = np.asarray(names, dtype=object)

    def _spread_over_features(self, party: str, own: np.ndarray) -> np.ndarray:
        """``own`` (one party's per-feature scores) at that party's place in ``feature_names_in_``; every
        other party's features NaN."""
        out = np.full(self.n_features_in_, np.nan)
        order = list(self.party_features_)
        start = sum(self.party_features_[p] for p in order[:order.index(party)])
        out[start:start + len(own)] = own
        return out

    def _check_fitted(self):
        model = getattr(self, "model_", None)
        if model is None:
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit(vertical_data) first")
        return model
