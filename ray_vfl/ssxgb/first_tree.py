"""The LBP's first tree (the paper's LBPXGBTRAIN): plain XGBoost on the LBP's own binned features.

Before any encryption the label-bearing participant fits one ordinary tree on its own features
(the exact sigmoid, no approximation: it holds the labels) with the shared histogram kernels of
:mod:`ray_vfl.trees.reference`, and its candidates (missing values with a learned direction). The
base score and this tree stay with the LBP in plaintext; only the resulting margins and the labels
are encrypted. Both the LBP and the centralized reference call :func:`fit_first_tree`.
"""

from __future__ import annotations

import numpy as np

from ..trees.config import BoostConfig
from ..trees.kernels import base_margin, base_score_of
from ..trees.reference import ReferenceTree, fit_reference, predict_reference

__all__ = ["FirstTree", "fit_first_tree"]


class FirstTree:
    """Base margin and the first tree, on the LBP's bins; :meth:`margins` of any binned rows."""

    def __init__(self, base: float, tree: ReferenceTree, missing_bin: int) -> None:
        self.base, self.tree, self.missing_bin = base, tree, missing_bin

    def margins(self, bins: np.ndarray) -> np.ndarray:
        return predict_reference([self.tree], bins, self.base, self.missing_bin)

    def to_dict(self) -> dict:
        t = self.tree
        return {"base": self.base, "missing_bin": self.missing_bin,
                "tree": {k: getattr(t, k).tolist() for k in ("left", "right", "feature", "bin", "default_left", "weight")}}

    @classmethod
    def from_dict(cls, d: dict) -> FirstTree:
        t = d["tree"]
        tree = ReferenceTree(*(np.asarray(t[k]) for k in ("left", "right", "feature", "bin")),
                             np.asarray(t["default_left"], dtype=bool), np.asarray(t["weight"], dtype=np.float64))
        return cls(float(d["base"]), tree, int(d["missing_bin"]))


def fit_first_tree(bins: np.ndarray, y: np.ndarray, config) -> FirstTree:
    """Fit the first tree on the LBP's ``bins`` and labels ``y`` with the SSXGB ``config``'s depth,
    learning rate, lambda and bins (``gamma = 0``, ``min_child_weight = 1``, as XGBoost's defaults)."""
    base_score = base_score_of("binary:logistic", y, config.base_score)
    boost = BoostConfig(n_trees=1, max_depth=config.max_depth, learning_rate=config.learning_rate,
                        reg_lambda=config.reg_lambda, max_bin=config.max_bin, backend="plain")
    (tree,) = fit_reference(bins, y, boost, base_score)
    return FirstTree(base_margin("binary:logistic", base_score), tree, config.max_bin)
