"""What the label party keeps for multi-class boosting: the classes, K margins per row, the
gradient pairs each tree of a round fits (:mod:`ray_vfl.trees.multiclass`).

A mixin of :class:`~ray_vfl.secureboost.active.ActiveParty`, whose config, labels and backend it reads.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, DataError
from ..trees.kernels import encoded_gradients
from ..trees.multiclass import class_index
from ..trees.weights import weighted_pairs

__all__ = ["MultiClassState", "node_sums"]


class MultiClassState:
    """Class labels, margin shapes and per-tree gradient pairs (see the module docstring)."""

    def _class_labels(self, label: np.ndarray, role: str) -> np.ndarray:
        """Multi-class labels as class indices 0 .. K-1; the training labels fix the classes (ascending)."""
        label = np.asarray(label, dtype=np.float64)
        if self.classes is None:
            self.classes = np.unique(label)
            if len(self.classes) != self.config.num_class:
                raise DataError(f"party {self.name!r}: the labels hold {len(self.classes)} classes, the config says "
                                f"num_class={self.config.num_class}; set num_class to the number of classes")
        return class_index(label, self.classes, role)

    def _margin_shape(self, n: int) -> tuple[int, ...]:
        """``(n,)``, or ``(n, K)`` margins for K classes."""
        return (n, self.config.num_class) if self.multi else (n,)

    def label_classes(self) -> list[float]:
        """The training labels' classes, ascending (multi-class; the caller's ``classes_``)."""
        return [] if self.classes is None else self.classes.tolist()

    def _check_packing(self) -> None:
        """Multi-output trees: each row's K pairs must fit one ciphertext of this key."""
        if not (self.outputs and self.backend.is_encrypted):
            return
        try:
            self.backend.slots_per_ciphertext(self.public_key)
        except ConfigError:
            raise ConfigError(f"multi_strategy='multi_output_tree' packs each row's {self.outputs[0]} gradient pairs "
                              f"in one ciphertext, more than a {self.config.key_bits}-bit {self.config.backend} key "
                              "holds; use multi_strategy='one_output_per_tree', or larger key_bits") from None

    def _tree_gradients(self, tree: int) -> tuple[np.ndarray, np.ndarray]:
        """The gradient pairs tree ``tree`` fits: the model's; with one tree per class, column
        ``tree % K`` of the pairs every class's tree of the round shares (taken at the round's start)."""
        if self.per_round == 1:
            return weighted_pairs(*encoded_gradients(self.config.objective, self.y, self.margin), self.w)
        if tree % self.per_round == 0 or self.round_gh is None:
            self.round_gh = weighted_pairs(*encoded_gradients(self.config.objective, self.y, self.margin), self.w)
        k = tree % self.per_round
        return np.ascontiguousarray(self.round_gh[0][:, k]), np.ascontiguousarray(self.round_gh[1][:, k])


def node_sums(node_of_row: np.ndarray, v: np.ndarray, size: int) -> np.ndarray:
    """Sums of ``v`` (``(n,)`` or ``(n, K)``) over the rows of each node ``0 .. size-1``."""
    if v.ndim == 1:
        return np.bincount(node_of_row, weights=v, minlength=size)
    return np.stack([np.bincount(node_of_row, weights=v[:, k], minlength=size) for k in range(v.shape[1])], axis=1)
