"""Pure, party-agnostic numpy kernels of histogram gradient boosting.

The tree protocols (SecureBoost) and the centralized reference call these
functions; none of them knows about parties or Ray.
Histograms are laid out as ``(slots, features, n_bins)`` with the last bin of
every feature reserved for missing values, so that one flat ``bucket_sum`` key

    key = (slot * n_features + feature) * n_bins + bin

covers all nodes and features of a level at once. Plaintext and encrypted
histograms are built by the same :func:`build_histograms`; only the crypto
backend's ``bucket_sum`` differs.

The split gain follows XGBoost (Chen & Guestrin 2016, eq. 7, without the 1/2):

    gain = G_L^2 / (H_L + lambda) + G_R^2 / (H_R + lambda) - G^2 / (H + lambda)

and a split is made only if ``gain > gamma`` and both children have a hessian
sum of at least ``min_child_weight``. Like XGBoost's implementation, ``gamma``
is compared with this un-halved gain: it is twice the paper's ``gamma``.

Every party and the centralized reference sum the same values: the gradient
pairs of :func:`encoded_gradients`, rounded to multiples of
``2**-GRADIENT_FRAC_BITS``, the very values the encrypted backends encode. A
float64 sum of such values is exact while every partial sum stays below
``2**(53 - GRADIENT_FRAC_BITS) = 2**21`` in magnitude, so plaintext, decrypted
and derived (parent minus sibling) bin sums are equal bit for bit, and so are
the gains and the trees: federated equals centralized by construction, not up
to a tie margin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..crypto.he.fixed_point import FixedPoint
from ..errors import ConfigError
from ..metrics import auc, logloss
from .categorical import CategoricalFeatures, categorical_children, left_sets
from .multiclass import is_multiclass, multiclass_metrics, softmax, softmax_gradients

__all__ = [
    "evaluate_margin",
    "gradients",
    "encoded_gradients",
    "GRADIENT_FRAC_BITS",
    "base_margin",
    "transform_margin",
    "feature_keys",
    "histogram_keys",
    "slot_of_rows",
    "bucket_sum",
    "build_histograms",
    "SplitChoice",
    "best_splits",
    "split_gains",
    "ties_with",
    "is_splittable",
    "goes_left",
    "leaf_weights",
    "smaller_children",
    "base_score_of",
]

# Fractional bits of every gradient and hessian summed into a histogram, by every party and the
# reference: 2**-32 (2.3e-10) is finer than the float32 gradient pairs XGBoost keeps whenever
# |g| >= 2**-8, and leaves sums exact in float64 up to 2**21.
GRADIENT_FRAC_BITS = 32
_GAIN_EPS = 1e-10  # gains below this are float noise, never a real split
# Gains this close (relative) to a node's best are ties: the first candidate wins. While the bin sums
# are exact (|sum| < 2**21, see the module docstring) every caller gets the same sums bit for bit,
# candidates that part the rows alike tie exactly and this margin is not needed for losslessness.
# It stays for sums past 2**21 (squared error with large gradients), where float sums depend on
# their order (direct sums, parent minus sibling, decrypted integers), and it is deterministic:
# the first candidate within it wins, as the first of exactly equal gains does.
_TIE_RTOL = 1e-9


def gradients(objective: str, y: np.ndarray, margin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and second derivative of the loss at the current margin.

    Example
    -------
    >>> g, h = gradients("reg:squarederror", np.array([1.0]), np.array([0.5]))
    >>> float(g[0]), float(h[0])
    (-0.5, 1.0)
    """
    if objective == "binary:logistic":
        p = 1.0 / (1.0 + np.exp(-margin))
        return p - y, np.maximum(p * (1.0 - p), 1e-16)
    if objective == "reg:squarederror":
        return margin - y, np.ones_like(margin)
    if is_multiclass(objective):  # y: class indices, margin: (n, K); (n, K) pairs back
        return softmax_gradients(y, margin)
    raise ConfigError(f"unknown objective {objective!r}")


def encoded_gradients(objective: str, y: np.ndarray, margin: np.ndarray,
                      frac_bits: int = GRADIENT_FRAC_BITS) -> tuple[np.ndarray, np.ndarray]:
    """:func:`gradients` rounded to multiples of ``2**-frac_bits``: the values every party sums.

    The rounding is the encrypted backends' fixed-point encoding (``FixedPoint.rounded``, half to
    even), so encrypting these values loses nothing and every histogram, plaintext or decrypted,
    holds the same sums. Hessians stay positive: one that rounds to 0 is raised to
    ``2**-frac_bits``, the grid's counterpart of the ``1e-16`` floor of :func:`gradients`.

    Example
    -------
    >>> g, h = encoded_gradients("reg:squarederror", np.array([0.0]), np.array([1 + 2.0**-40]))
    >>> float(g[0]), float(h[0])
    (1.0, 1.0)
    >>> g, h = encoded_gradients("binary:logistic", np.array([1.0]), np.array([40.0]))
    >>> float(g[0]), float(h[0]) == 2.0**-32
    (0.0, True)
    """
    g, h = gradients(objective, y, margin)
    grid = FixedPoint(frac_bits)
    return grid.rounded(g), np.maximum(grid.rounded(h), 2.0**-frac_bits)


def base_score_of(objective: str, y: np.ndarray, base_score: float | None = None) -> float:
    """The initial prediction: ``base_score`` when given, else the label mean (kept inside (0, 1) for logistic).

    Example
    -------
    >>> base_score_of("binary:logistic", np.array([1.0, 1.0])), base_score_of("reg:squarederror", np.array([2.0, 4.0]))
    (0.999999, 3.0)
    """
    if base_score is not None:
        return float(base_score)
    if is_multiclass(objective):  # XGBoost's: the same for every class, so no softmax ever sees it
        return 0.5
    mean = float(np.mean(y))
    return float(np.clip(mean, 1e-6, 1 - 1e-6)) if objective == "binary:logistic" else mean


def base_margin(objective: str, base_score: float) -> float:
    """Margin of the initial prediction (logit of a probability for logistic)."""
    if objective == "binary:logistic":
        return float(np.log(base_score / (1.0 - base_score)))
    return float(base_score)


def transform_margin(objective: str, margin: np.ndarray) -> np.ndarray:
    """Turn raw margins into predictions (probabilities for logistic and ``multi:softprob``, ``(n, K)``;
    the class index for ``multi:softmax``)."""
    if objective == "binary:logistic":
        return 1.0 / (1.0 + np.exp(-margin))
    if objective == "multi:softprob":
        return softmax(margin)
    if objective == "multi:softmax":
        return margin.argmax(axis=1).astype(np.float64)
    return margin


def evaluate_margin(objective: str, y: np.ndarray, margin: np.ndarray, with_auc: bool = True) -> dict[str, float]:
    """Metrics of raw margins: logloss and AUC for logistic, RMSE for regression.

    Example
    -------
    >>> evaluate_margin("reg:squarederror", np.array([1.0, 3.0]), np.array([1.0, 1.0]))
    {'rmse': 1.4142135623730951}
    """
    if is_multiclass(objective):
        return multiclass_metrics(y, margin)
    pred = transform_margin(objective, margin)
    if objective == "binary:logistic":
        metrics = {"logloss": logloss(y, pred)}
        if with_auc:
            metrics["auc"] = auc(y, pred)
        return metrics
    return {"rmse": float(np.sqrt(np.mean((pred - y) ** 2)))}


def feature_keys(bins: np.ndarray, n_bins: int) -> np.ndarray:
    """Per row and feature, the bucket ``f * n_bins + bin`` of slot 0 (computed once per data set)."""
    return bins.astype(np.int64) + np.arange(bins.shape[1], dtype=np.int64) * n_bins


def offset_keys(keys: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``keys + offsets[:, None]`` row by row, where a negative key (a cell not summed) stays ``-1``.

    Example
    -------
    >>> offset_keys(np.array([[1, -1], [-1, 5]]), np.array([0, 10])).tolist()
    [[1, -1], [-1, 15]]
    """
    shifted = keys + np.asarray(offsets, dtype=np.int64)[:, None]
    return np.where(keys >= 0, shifted, -1) if keys.size and keys.min() < 0 else shifted


def histogram_keys(fkeys: np.ndarray, slot: np.ndarray, n_bins: int) -> np.ndarray:
    """Flat bucket keys ``(slot * F + f) * n_bins + bin`` from :func:`feature_keys` rows and their slots;
    a negative key (a cell not summed) stays ``-1``.

    Example
    -------
    >>> histogram_keys(feature_keys(np.array([[1, 0], [2, 2]]), 3), np.array([0, 1]), 3).tolist()
    [[1, 3], [8, 11]]
    >>> histogram_keys(np.array([[1, -1], [-1, 5]]), np.array([0, 1]), 3).tolist()
    [[1, -1], [-1, 11]]
    """
    return offset_keys(fkeys, slot.astype(np.int64) * (fkeys.shape[1] * n_bins))


def slot_of_rows(node_of_row: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Index of each row's node within ``nodes`` (-1 for rows of other nodes).

    Example
    -------
    >>> slot_of_rows(np.array([4, 2, -1, 4, 7]), np.array([4, 7])).tolist()
    [0, -1, -1, 0, 1]
    """
    size = max(int(node_of_row.max(initial=-1)), int(np.max(nodes, initial=-1))) + 2
    lookup = np.full(size, -1, dtype=np.int64)
    lookup[np.asarray(nodes, dtype=np.int64)] = np.arange(len(nodes))
    return lookup[node_of_row]  # node -1 reads lookup[-1], which is always -1


def bucket_sum(values: np.ndarray, keys: np.ndarray, n_buckets: int) -> np.ndarray:
    """Plaintext bucket sum: ``out[keys[i, j]] += values[i]`` for keys >= 0.

    ``values`` is ``(n,)`` or ``(n, k)``; ``keys`` is ``(n,)`` or ``(n, F)``.

    Example
    -------
    >>> bucket_sum(np.array([1.0, 2.0, 4.0]), np.array([0, 2, 0]), 3)
    array([5., 0., 2.])
    """
    width = values.shape[1:] if values.ndim == 2 else ()
    if len(keys) == 0:
        return np.zeros((n_buckets, *width))
    keys = keys.reshape(len(keys), -1)
    per_row = keys.shape[1]
    if keys.min() >= 0:  # the common case: no skipped keys, no masking
        flat = keys.ravel()
        weights = np.repeat(values, per_row, axis=0)
    else:
        ok = keys >= 0
        flat = keys[ok]
        weights = values[np.nonzero(ok)[0]]
    if values.ndim == 1:
        return np.bincount(flat, weights=weights, minlength=n_buckets)
    return np.stack([np.bincount(flat, weights=weights[:, j], minlength=n_buckets) for j in range(values.shape[1])], axis=1)


def build_histograms(backend, public_key, gh, fkeys: np.ndarray, rows_of_nodes: Sequence[np.ndarray], n_bins: int) -> list:
    """Sum (encrypted or plain) gradient pairs into one ``(features * n_bins)`` histogram per node.

    ``gh`` is what ``backend.encrypt_gh`` produced for every row, ``fkeys`` the
    :func:`feature_keys` of those rows and ``rows_of_nodes`` the ascending row
    indices of each node to build; the cost is proportional to those rows.
    A node holding every row (the root) is summed without copying its keys.

    Example
    -------
    >>> from ray_vfl.crypto import get_backend
    >>> be = get_backend("plain"); pk, sk = be.generate_keys()
    >>> gh = be.encrypt_gh(pk, np.array([1.0, 2.0, 4.0]), np.ones(3))
    >>> fkeys = feature_keys(np.array([[0], [1], [0]]), 2)
    >>> [be.decrypt_gh(sk, h)[0].tolist() for h in build_histograms(be, pk, gh, fkeys, [np.array([0, 1]), np.array([2])], 2)]
    [[1.0, 2.0], [4.0, 0.0]]
    """
    width = fkeys.shape[1] * n_bins
    if not len(rows_of_nodes):
        return []
    if len(rows_of_nodes) == 1 and len(rows_of_nodes[0]) == len(fkeys):  # the root: every row in order, no gather
        return [backend.bucket_sum(public_key, gh, fkeys, width)]
    rows = np.concatenate(rows_of_nodes)
    slot = np.repeat(np.arange(len(rows_of_nodes)), [len(r) for r in rows_of_nodes])
    total = backend.bucket_sum(public_key, backend.take(gh, rows), histogram_keys(fkeys[rows], slot, n_bins),
                               len(rows_of_nodes) * width)
    return backend.chunk(total, width)


@dataclass(frozen=True)
class SplitChoice:
    """Best split of each node: arrays indexed by node slot."""

    gain: np.ndarray  # (slots,) loss reduction, -inf where no valid split
    feature: np.ndarray  # (slots,) feature index within the histogram
    bin: np.ndarray  # (slots,) rows with bin <= this go left (a threshold split)
    default_left: np.ndarray  # (slots,) bool: missing values go left
    # (slots, n_bins - 1) bool, the bins a categorical split sends left (a row of False: a threshold
    # split); None when no feature is categorical
    left_set: np.ndarray | None = None

    def is_categorical(self, slot: int) -> bool:
        return self.left_set is not None and bool(self.left_set[slot].any())

    def splittable(self, gamma: float) -> np.ndarray:
        return is_splittable(self.gain, gamma)


def _children_sums(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Left and right sums of every candidate, ``(slots, F, 2, n_bins-1)`` each, missing values
    [left, right]. The right sums run down from the top bin instead of being the total minus the
    left: a child without rows sums to exactly 0 (and is refused), even where float sums round."""
    below = np.cumsum(X[:, :, :-1], axis=2)
    above = np.zeros_like(below)
    above[:, :, :-1] = np.cumsum(X[:, :, -2:0:-1], axis=2)[:, :, ::-1]  # bins b+1 .. n_bins-2
    missing = X[:, :, -1:]
    return np.stack([below + missing, below], axis=2), np.stack([above, above + missing], axis=2)


def split_gains(gl: np.ndarray, hl: np.ndarray, gr: np.ndarray, hr: np.ndarray, g_tot, h_tot,
                reg_lambda: float, min_child_weight: float) -> np.ndarray:
    """Gain of every candidate from its children's sums and the node's totals; ``-inf`` where a child
    is empty or lighter than ``min_child_weight``. Every protocol scores candidates with this.

    Example
    -------
    >>> split_gains(np.array([-2.0]), np.array([1.0]), np.array([2.0]), np.array([1.0]), 0.0, 2.0, 1.0, 0.0).tolist()
    [4.0]
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = gl**2 / (hl + reg_lambda) + gr**2 / (hr + reg_lambda) - g_tot**2 / (h_tot + reg_lambda)
    valid = (hl >= min_child_weight) & (hr >= min_child_weight) & (hl > 0) & (hr > 0)
    return np.where(valid, gain, -np.inf)


def ties_with(gain: np.ndarray, top) -> np.ndarray:
    """Candidates whose gain ties ``top`` (within a relative ``1e-9``): the first of them wins."""
    with np.errstate(invalid="ignore"):  # -inf - inf where nothing is valid: no ties
        return gain >= top - _TIE_RTOL * np.abs(top)


def is_splittable(gain, gamma: float):
    """A split is made only when its gain beats ``gamma`` and float noise."""
    return (gain > gamma) & (gain > _GAIN_EPS)


def best_splits(G: np.ndarray, H: np.ndarray, reg_lambda: float, min_child_weight: float,
                categorical: CategoricalFeatures | None = None) -> SplitChoice:
    """Best (feature, bin, missing direction) per node from ``(slots, F, n_bins)`` histograms, or
    ``(slots, F, n_bins, K)`` ones of ``K`` outputs (multi-output trees): a candidate's gain is then
    the sum of its ``K`` gains, valid only where every output's children are.

    ``categorical`` names the features split natively by category sets
    (:mod:`ray_vfl.trees.categorical`); their candidates take the places of threshold candidates.

    Candidates are ordered feature by feature, missing-left before missing-right,
    thresholds ascending; ties (gains within a relative ``1e-9`` of the best)
    go to the first candidate, so every caller that lists features in the same
    order picks the same split from the same sums.

    Example
    -------
    >>> G = np.array([[[-2.0, 2.0, 0.0], [-2.0, 2.0, 0.0]]])  # two features, 2 bins + missing
    >>> choice = best_splits(G, np.ones_like(G), reg_lambda=1.0, min_child_weight=0.0)
    >>> int(choice.feature[0]), int(choice.bin[0]), bool(choice.default_left[0])
    (0, 0, True)
    """
    slots, n_features, n_bins = G.shape[:3]
    if n_features == 0:
        empty = np.full(slots, -np.inf)
        zeros = np.zeros(slots, dtype=np.int64)
        return SplitChoice(empty, zeros, zeros, np.zeros(slots, dtype=bool))
    g_tot = G[:, 0, :].sum(axis=1)[:, None, None, None]
    h_tot = H[:, 0, :].sum(axis=1)[:, None, None, None]
    (gl, gr), (hl, hr) = _children_sums(G), _children_sums(H)
    cats = categorical.columns() if categorical is not None else np.zeros(0, dtype=np.int64)
    if cats.size:
        if G.ndim == 4:
            raise ConfigError("native categorical splits take one output per tree; multi-output trees split "
                              "categorical columns as ordinal codes (enable_categorical=False)")
        onehot = categorical.onehot()[cats]
        cgl, cgr, chl, chr_, valid, order = categorical_children(
            G[:, cats], H[:, cats], categorical.n_categories[cats], onehot, reg_lambda, categorical.max_cat_threshold)
        gl[:, cats], gr[:, cats], hl[:, cats], hr[:, cats] = cgl, cgr, chl, chr_
    gain = split_gains(gl, hl, gr, hr, g_tot, h_tot, reg_lambda, min_child_weight)
    if cats.size:
        gain[:, cats] = np.where(valid[:, :, None, :], gain[:, cats], -np.inf)
    if G.ndim == 4:  # K outputs: the sum of their gains (-inf if any output's children are invalid)
        gain = gain.sum(axis=-1)
    gain = gain.reshape(slots, -1)
    top = gain.max(axis=1, keepdims=True)
    best = np.argmax(ties_with(gain, top), axis=1)  # -inf everywhere: argmax picks 0
    feature, rest = np.divmod(best, 2 * (n_bins - 1))
    direction, threshold = np.divmod(rest, n_bins - 1)
    left_set = None
    if cats.size:
        left_set = np.zeros((slots, n_bins - 1), dtype=bool)
        at = np.full(n_features, -1)
        at[cats] = np.arange(len(cats))
        won = np.flatnonzero(at[feature] >= 0)
        column = at[feature[won]]
        left_set[won] = left_sets(order[won, column], threshold[won], onehot[column])
    return SplitChoice(gain[np.arange(slots), best], feature, threshold, direction == 0, left_set)


def goes_left(bins: np.ndarray, bin_index, default_left, missing_bin: int) -> np.ndarray:
    """Does a split on ``bin_index`` send each row left? ``bins`` is the split feature's column.

    Rows in the missing bin follow ``default_left``; the others go left iff ``bin <= bin_index``.
    Scalars or per-row arrays work for the split arguments.

    Example
    -------
    >>> goes_left(np.array([0, 3, 9]), 2, True, missing_bin=9).tolist()
    [True, False, True]
    """
    return np.where(bins == missing_bin, default_left, bins <= bin_index)


def leaf_weights(G: np.ndarray, H: np.ndarray, reg_lambda: float, learning_rate: float) -> np.ndarray:
    """Shrunk optimal leaf weights ``-eta * G / (H + lambda)``."""
    return -learning_rate * G / (H + reg_lambda)


def smaller_children(left_counts: np.ndarray, right_counts: np.ndarray) -> np.ndarray:
    """True where the left child is the one to build (the smaller); its sibling is derived."""
    return left_counts <= right_counts
