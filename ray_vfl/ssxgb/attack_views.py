"""Attacks on the leaks SSXGB's view table admits (:mod:`ray_vfl.ssxgb.protocol`), each run on a
recorded view alone and scored against chance.

- :func:`lgt_magnitudes`: S, from the clamp's LGT values, estimates the multiset of the margins' sizes
  ``|x|`` (what the table admits: a multiset, in a shuffled order).
- :func:`lgt_signs`: S pairs the clamp's two comparisons of each row by their position (as C lays them
  out before it shuffles) and reads the margin's sign, so the row's label. C's shuffle is what keeps
  it at chance; without the shuffle it reads most labels.
- :func:`lgt_outcomes`: S guesses each comparison's outcome from the sign of the value it opens (the
  random sign ``s`` keeps it at chance).
- :func:`partition_labels`: whoever sees the instance spaces (C from the left branches and the routes,
  every participant from the partitions) scores rows by the leading direction of their leaf
  memberships (rows that share leaves share labels); the orientation is unknown to it, so the
  two-sided AUC is its success.
- :func:`margin_features`: the LBP, from the margins it decrypts minus its own first tree, scores
  another participant's feature.
- :func:`tournament_balance`: S, from the bit lengths of the tournament's LGT values (shuffled: whose
  it cannot tell), tells which of two trainings has the more skewed labels: the gain differences
  shrink with the hessians ``p (1 - p)``. A skew signal of the training, not a row's label.

Every score attack returns ``(one-sided AUC, two-sided AUC, margin)``: ``margin`` is how far above
0.5 the two-sided AUC of a score independent of the secret reaches in 99% of draws (the same rows),
so an attack leaks when its AUC passes ``0.5 + margin``.

Example
-------
>>> y = np.array([0, 1] * 20)
>>> one, two, margin = score_auc(y, y + 0.0)
>>> one, two, margin < 0.25
(1.0, 1.0, True)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..metrics import auc_both_ways

__all__ = ["lgt_distances", "lgt_magnitudes", "lgt_outcomes", "lgt_signs", "margin_features", "partition_labels",
           "score_auc", "tournament_balance", "within"]


def score_auc(y: np.ndarray, score: np.ndarray, draws: int = 1000, seed: int = 0) -> tuple[float, float, float]:
    """``(one-sided AUC, two-sided AUC, margin)`` of ``score`` against the secret bits ``y``; ``margin``:
    the 99th percentile of the two-sided AUC of random scores, minus 0.5 (the chance band)."""
    y = np.asarray(y).astype(int)
    one, two = auc_both_ways(y, np.asarray(score, dtype=float))
    rng = np.random.default_rng(seed)
    null = [auc_both_ways(y, rng.random(len(y)))[1] for _ in range(draws)]
    return one, two, float(np.quantile(null, 0.99)) - 0.5


def lgt_distances(values: Sequence[int], kappa: int) -> np.ndarray:
    """S's estimate of ``|y - x|`` of each LGT value ``v = s (r d + r')``, ``d = 2 (y - x) - 1``:
    ``|v| / (2 E[r])`` with ``r`` uniform in ``[2^(kappa-1), 2^kappa)`` (within a factor 4/3 either way)."""
    return np.array([abs(int(v)) for v in values], dtype=float) / (1.5 * 2.0 ** kappa)


def lgt_magnitudes(values: Sequence[int], kappa: int, clamp: int) -> np.ndarray:
    """The clamp's ``2 m`` LGT values (of ``x + C`` and ``x - C`` for ``m`` margins, any order) -> S's
    estimate of the ``m`` margins' ``|x|``, sorted, in units (``C`` = the clamp in units). Each margin
    has a near and a far distance, ``C -+ |x|``: the ``m`` smallest distances are the near ones, the
    ``m`` largest the far ones, paired by rank; ``|x| ~ (far - near) / 2``."""
    dist = np.sort(lgt_distances(values, kappa))
    m = len(dist) // 2
    near, far = dist[:m], dist[m:][::-1]
    return np.sort(np.clip((far - near) / 2.0, 0.0, None))


def within(estimate: np.ndarray, truth: np.ndarray, tol: float) -> tuple[float, float]:
    """``(success, chance)`` of a sorted estimate of a multiset: the fraction of ranks within ``tol`` of
    the sorted truth, and the best any constant guess reaches (a guesser without the view, even one told
    the truth's densest window)."""
    truth = np.sort(np.asarray(truth, dtype=float))
    success = float(np.mean(np.abs(np.sort(estimate) - truth) <= tol))
    hi = np.searchsorted(truth, truth + 2 * tol, side="right")
    chance = float(np.max(hi - np.arange(len(truth))) / len(truth))
    return success, chance


def lgt_signs(values: Sequence[Sequence[int]], y: Sequence[np.ndarray]) -> tuple[float, float, float]:
    """S pairs value ``i`` (``[x_i < -C]``: ``|v| ~ |x_i + C|``) with value ``i + m`` (``[C < x_i]``:
    ``|x_i - C|``) of each clamp's ``2 m`` values, the layout C builds before shuffling, and scores row
    ``i`` by ``log |v_i| - log |v_(i+m)|`` (high: a positive margin, label 1). ``values[t]``, ``y[t]``:
    tree ``t``'s values and the labels of its ``m`` sampled rows, in their order; pooled over trees."""
    scores = []
    for vals in values:
        mags = np.log2(np.maximum(np.abs(np.array([float(v) for v in vals])), 1.0))
        m = len(mags) // 2
        scores.append(mags[:m] - mags[m:2 * m])
    return score_auc(np.concatenate([np.asarray(v) for v in y]), np.concatenate(scores))


def lgt_outcomes(values: Sequence[int], truth: Sequence[int]) -> tuple[float, float, float]:
    """``(success, chance, margin)``: how often S's guess ``[v > 0]`` names the comparison's outcome
    ``truth`` (S's order; a test fixes every outcome so the order does not matter), against the larger
    class's share (always guessing the more common outcome); ``margin``: the one-sided 99% binomial band
    of an accuracy at chance over these comparisons."""
    guess = np.array([int(v) > 0 for v in values], dtype=int)
    truth = np.asarray(truth, dtype=int)
    chance = float(max(truth.mean(), 1 - truth.mean()))
    return float(np.mean(guess == truth)), chance, 2.33 * float(np.sqrt(chance * (1 - chance) / len(truth)))


def partition_labels(leaves: Sequence[Sequence[int]], y: np.ndarray, rows: np.ndarray | None = None
                     ) -> tuple[float, float, float]:
    """Labels from instance spaces: ``leaves[t][j]``, the node of row ``j`` at the end of tree ``t``
    (C's view; every participant's is the same). The rows' leaf-membership indicators, centred; their
    leading singular direction is the score (rows sharing leaves score alike; which end is label 1 the
    attacker cannot tell: two-sided). ``rows``: score only these rows."""
    cols = []
    for tree in leaves:
        tree = np.asarray(tree)
        cols += [(tree == leaf).astype(float) for leaf in np.unique(tree)]
    x = np.column_stack(cols)
    x -= x.mean(axis=0)
    u, _, _ = np.linalg.svd(x, full_matrices=False)
    score = u[:, 0]
    if rows is not None:
        score = score[rows]
    return score_auc(y, score)


def margin_features(margins: np.ndarray, own_margins: np.ndarray, feature: np.ndarray) -> tuple[float, float, float]:
    """The LBP's attack on another participant's feature: the federated trees' part of the margins it
    decrypts (``margins - own_margins``, its first tree) as a score for ``feature > median``."""
    secret = (np.asarray(feature) > np.median(feature)).astype(int)
    return score_auc(secret, np.asarray(margins) - np.asarray(own_margins))


def tournament_balance(view_a: Sequence[Sequence[int]], view_b: Sequence[Sequence[int]], draws: int = 2000,
                       seed: int = 0) -> tuple[float, float, float]:
    """S tells which of two trainings has the more skewed labels from its tournament LGT values alone.
    ``view_a[j]``, ``view_b[j]``: the LGT arrays S opened at the same place of each training (tree,
    level, halving; :func:`~ray_vfl.ssxgb.attack.node_tournaments`). A value ``v = s (r d + r')`` of a
    comparison ``d = 2 (y - x) - 1`` of two candidates' cross products has ``log2 |v| ~ log2 |d| +
    kappa``, and ``|d|`` scales with ``H^3 G^2`` of the node: hessians ``p (1 - p)`` shrink as the labels
    skew (0.25 at 50% ones, 0.16 at 80%), so a skewed training's values are shorter. Each value is scored
    by ``-log2 |v|`` less the median of its place in both trainings; ``(one-sided AUC that view_b is the
    skewed one, two-sided AUC, margin)``. ``margin``: the 99th percentile, minus 0.5, of the two-sided AUC
    when the two trainings' arrays are swapped at random place by place (a permutation test that keeps
    the values of one place together, so their correlation counts; an independent-values band is
    narrower than the truth)."""
    if len(view_a) != len(view_b) or any(len(a) != len(b) for a, b in zip(view_a, view_b)) or not view_a:
        raise ValueError("tournament_balance needs two views of matched LGT arrays (same places, same sizes)")
    logs = [(np.array([_log2(v) for v in a]), np.array([_log2(v) for v in b])) for a, b in zip(view_a, view_b)]
    logs = [(a - m, b - m) for a, b in logs for m in [np.median(np.concatenate([a, b]))]]

    def auc_of(flip):
        xs = np.concatenate([b if f else a for (a, b), f in zip(logs, flip)])
        ys = np.concatenate([a if f else b for (a, b), f in zip(logs, flip)])
        return auc_both_ways(np.r_[np.zeros(len(xs)), np.ones(len(ys))], -np.r_[xs, ys])

    one, two = auc_of([False] * len(logs))
    rng = np.random.default_rng(seed)
    null = [auc_of(rng.random(len(logs)) < 0.5)[1] for _ in range(draws)]
    return one, two, float(np.quantile(null, 0.99)) - 0.5


def _log2(v: int) -> float:
    """``log2 |v|`` of a big integer (0 for 0)."""
    v = abs(int(v))
    return 0.0 if v == 0 else float(np.log2(float(v >> max(0, v.bit_length() - 60)))) + max(0, v.bit_length() - 60)
