"""Label-inference attacks of an honest-but-curious non-label party, and LeakAUC.

An attack is a pure function of a :class:`NonLabelView`: what the non-label
party received (embedding gradients) and what it computed and sent itself
(its federated embeddings), batch by batch, with the positions of the rows in
the shared training order. It returns one score per row, larger meaning
"more likely positive"; nothing else reaches it, so it cannot use privileged
state. Only the evaluation, :func:`leak_auc`, pairs the scores with the true
labels.

- Norm attack (Li et al., ICLR 2022): the score is the gradient's L2 norm. With
  rare positives, a positive row's loss gradient ``p - 1`` dwarfs a negative's ``p``.
- Direction attack (Li et al., ICLR 2022, without a known positive): the
  score is the cosine between a received gradient row and the batch mean of
  the received rows, oriented per batch so that the minority side scores
  high (positives are rare: a positive's loss gradient ``(p - 1) dz/dh``
  points against a negative's ``p dz/dh``).
- Feature attack of the label party (:func:`embedding_feature_attack`): it received every row's
  federated embedding; knowing a few rows' values of a non-label feature (auxiliary data), it fits a
  ridge regression from embedding to value and predicts the feature of every other row.
- Clustering attack (Sun et al. 2022, as in FedAds): k-means (k=2) on the
  party's own federated embeddings, each row by its latest one (what the
  trained bottom model outputs), compared by direction (cosine); the smaller cluster is taken as
  positive; the score is ``distance to the larger cluster's centre - distance
  to the smaller one's``.

LeakAUC is the ROC AUC of the scores, computed per batch (as Li et al.) and
averaged over batches that hold both classes; ``dLeakAUC = (LeakAUC_defense -
LeakAUC_none) / LeakAUC_none``. Every attack is reported two ways
(:func:`leak_aucs`): one-sided, the AUC of the scores as the attack orients
them, and two-sided, ``max(AUC, 1 - AUC)`` per batch, what an attacker who
inverts its guess when that separates better achieves. A defense that flips
the ranking from batch to batch (MixPro with a one-layer top) looks perfect
one-sided (~0.5) and is not. Two-sided figures have a chance level above 0.5
when batches hold few positives (``E max(a, 1 - a)`` for random scores);
:func:`two_sided_chance` measures it on the same batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import DataError
from ...metrics import auc

__all__ = ["NonLabelView", "norm_attack", "direction_attack", "cluster_attack", "latest_rows", "leak_auc", "leak_aucs",
           "two_sided_chance", "d_leak_auc", "embedding_feature_attack", "ATTACKS"]


@dataclass
class NonLabelView:
    """Everything a non-label party saw during training, batch by batch.

    Attributes
    ----------
    party : str
        The non-label party.
    rows : list of ndarray
        Positions (in the shared training order) of each batch's rows.
    embeddings : list of ndarray
        The federated embeddings it sent, ``(B, d)`` per batch.
    gradients : list of ndarray
        The embedding gradients it received, ``(B, d)`` per batch.
    final_embeddings : ndarray or None
        What its bottom model outputs for every training row once training
        is over, ``(n_rows, d)`` (row ``i`` = position ``i``); computed by the
        party itself from its own model and features, never sent.
    """

    party: str
    rows: list[np.ndarray] = field(default_factory=list)
    embeddings: list[np.ndarray] = field(default_factory=list)
    gradients: list[np.ndarray] = field(default_factory=list)
    final_embeddings: np.ndarray | None = None

    @property
    def n_batches(self) -> int:
        return len(self.gradients)

    def describe(self) -> dict:
        """Shapes of what was received, never values (for audits)."""
        return {"gradients": sorted({(str(g.dtype), g.shape[1]) for g in self.gradients})}


def norm_attack(view: NonLabelView) -> list[np.ndarray]:
    """Per batch, the L2 norm of each received gradient row."""
    return [np.linalg.norm(g, axis=1) for g in view.gradients]


def direction_attack(view: NonLabelView) -> list[np.ndarray]:
    """Per batch, the cosine of each received gradient row with the batch mean of the received rows,
    signed so that the rows on the less populated side (cosine below or above 0) score high.

    Example
    -------
    >>> g = np.vstack([np.full((2, 3), -1.0), np.full((30, 3), 0.1)])  # two rows against the rest
    >>> view = NonLabelView("shop", rows=[np.arange(32)], gradients=[g])
    >>> leak_auc(direction_attack(view), view.rows, (np.arange(32) < 2).astype(float))
    1.0
    """
    scores = []
    for g in view.gradients:
        g = np.asarray(g, dtype=np.float64)
        mean = g.mean(axis=0)
        norms = np.linalg.norm(g, axis=1) * np.linalg.norm(mean)
        cos = (g @ mean) / np.maximum(norms, 1e-300)
        scores.append(-cos if (cos < 0).sum() <= (cos > 0).sum() else cos)
    return scores


def latest_rows(view: NonLabelView, source: str = "embeddings") -> tuple[np.ndarray, np.ndarray]:
    """Every row's most recent vector in the view: ``(row ids, (n, d) vectors)``.

    For embeddings that is the trained model's output (``final_embeddings``)
    when the view holds it, else each row's embedding from the last pass;
    for gradients the last gradient received for the row.
    """
    if source not in ("embeddings", "gradients"):
        raise DataError(f"source must be 'embeddings' or 'gradients', got {source!r}")
    batches = getattr(view, source)[: view.n_batches]
    if not batches:
        raise DataError(f"party {view.party!r} recorded no {source}; train before attacking")
    rows = np.concatenate(view.rows[: len(batches)])
    if source == "embeddings" and view.final_embeddings is not None:
        ids = np.unique(rows)
        return ids, np.asarray(view.final_embeddings, dtype=np.float64)[ids]
    vectors = np.concatenate(batches).astype(np.float64)
    # the last occurrence of each row id: unique over the reversed order
    ids, first_in_reversed = np.unique(rows[::-1], return_index=True)
    return ids, vectors[len(rows) - 1 - first_in_reversed]


def cluster_attack(view: NonLabelView, seed: int = 0, source: str = "embeddings", metric: str = "cosine",
                   max_fit_rows: int = 50_000) -> list[np.ndarray]:
    """Embedding clustering (Sun et al. 2022): k-means (k=2) on the party's own federated embeddings.

    Each row is represented by its latest embedding in the view (the
    trained bottom model's output, or else the last epoch's embedding; see
    :func:`latest_rows`); ``metric="cosine"``
    clusters directions (rows scaled to unit length), ``"euclidean"`` the raw
    vectors. The smaller cluster is taken as positive (positives are rare)
    and a row's score is the soft assignment ``distance to the larger
    centre - distance to the smaller one``. Scores come back per batch of the
    view (a row seen in several epochs gets the same score each time), ready
    for :func:`leak_auc`. ``source="gradients"`` clusters the received
    gradients instead. Only the view is used; at most ``max_fit_rows`` rows
    (a seeded sample) fit the centres, every row is scored.

    Example
    -------
    >>> rng = np.random.default_rng(0)
    >>> emb = np.vstack([rng.normal([5, 0], 0.3, (6, 2)), rng.normal([0, 5], 0.3, (58, 2))])
    >>> view = NonLabelView("shop", rows=[np.arange(64)], embeddings=[emb], gradients=[np.zeros((64, 2))])
    >>> leak_auc(cluster_attack(view), view.rows, (np.arange(64) < 6).astype(float))
    1.0
    """
    if metric not in ("cosine", "euclidean"):
        raise DataError(f"metric must be 'cosine' or 'euclidean', got {metric!r}")
    from sklearn.cluster import (
        KMeans,  # imported here: party actors never need scikit-learn
    )

    ids, x = latest_rows(view, source)
    if metric == "cosine":
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300)
    score = np.zeros(len(ids))
    if len(x) >= 2 and not np.allclose(x, x[0]):
        rng = np.random.default_rng(seed)
        fit = x if len(x) <= max_fit_rows else x[rng.choice(len(x), max_fit_rows, replace=False)]
        km = KMeans(n_clusters=2, n_init=10, random_state=seed).fit(fit)
        small = int(np.argmin(np.bincount(km.labels_, minlength=2)))
        dist = km.transform(x)
        score = dist[:, 1 - small] - dist[:, small]
    position = {int(r): i for i, r in enumerate(ids)}
    return [score[[position[int(r)] for r in rows]] for rows in view.rows[: view.n_batches]]


def leak_auc(scores: list[np.ndarray], rows: list[np.ndarray], labels: np.ndarray, per_batch: bool = True,
             two_sided: bool = False) -> float:
    """AUC of attack scores against the true labels of the rows they belong to.

    ``per_batch=True`` averages the AUC of the batches that hold both classes;
    otherwise one AUC over all rows pooled. ``two_sided=True`` counts a
    batch's AUC ``a`` as ``max(a, 1 - a)``: how well the scores separate the
    classes whichever way round (an upper bound on what an attacker who must
    guess the orientation per batch achieves; it exposes defenses such as
    MixPro that flip the ranking from batch to batch instead of removing it).

    Example
    -------
    >>> leak_auc([np.array([0.1, 0.9, 0.2])], [np.array([0, 1, 2])], np.array([0, 1, 0]))
    1.0
    """
    if len(scores) != len(rows):
        raise DataError(f"{len(scores)} score batches for {len(rows)} row batches")
    if per_batch:
        values = [auc(labels[r], s) for s, r in zip(scores, rows)]
        values = [max(v, 1.0 - v) if two_sided else v for v in values if np.isfinite(v)]
        if not values:
            raise DataError("no batch holds both classes; LeakAUC is undefined (use per_batch=False or larger batches)")
        return float(np.mean(values))
    value = auc(labels[np.concatenate(rows)], np.concatenate(scores))
    return max(value, 1.0 - value) if two_sided else value


def leak_aucs(scores: list[np.ndarray], rows: list[np.ndarray], labels: np.ndarray) -> dict[str, float]:
    """Per-batch LeakAUC both ways: ``{"one_sided": ..., "two_sided": ...}`` (see :func:`leak_auc`)."""
    return {"one_sided": leak_auc(scores, rows, labels), "two_sided": leak_auc(scores, rows, labels, two_sided=True)}


def two_sided_chance(rows: list[np.ndarray], labels: np.ndarray, seed: int = 0, repeats: int = 5) -> float:
    """The two-sided per-batch LeakAUC of random scores on these batches: the level that means "no leak".

    With ``k`` positives in a batch a random score's AUC spreads about 0.5 by
    roughly ``1 / sqrt(12 k)``; ``max(a, 1 - a)`` turns that spread into a bias.
    """
    rng = np.random.default_rng(seed)
    return float(np.mean([leak_auc([rng.random(len(r)) for r in rows], rows, labels, two_sided=True)
                          for _ in range(repeats)]))


def d_leak_auc(leak_defended: float, leak_none: float) -> float:
    """Relative change of LeakAUC a defense brings: ``(defended - none) / none``."""
    return (leak_defended - leak_none) / leak_none


def embedding_feature_attack(view: NonLabelView, known_rows: np.ndarray, known_values: np.ndarray,
                             ridge: float = 1e-2) -> tuple[np.ndarray, np.ndarray]:
    """The label party's guess of a non-label feature from the embeddings it received: ``(row ids,
    guesses)``. Each row is represented by the last embedding the label party received for it (never
    ``final_embeddings``, which the non-label party computes and keeps); a ridge regression (with an
    intercept) fitted on the rows of ``known_rows`` whose values it knows predicts the others. Any
    per-row vectors a party received serve the same way (``view.embeddings``: what it received, per
    batch of ``view.rows``): FedHSSL's projections, for one (:mod:`ray_vfl.splitnn.unaligned_attack`).

    >>> emb = np.arange(20, dtype=float).reshape(10, 2)
    >>> view = NonLabelView("shop", rows=[np.arange(10)], embeddings=[emb], gradients=[np.zeros((10, 2))])
    >>> ids, guess = embedding_feature_attack(view, np.array([0, 9]), np.array([0.0, 9.0]))
    >>> np.round(guess[[3, 5]], 2).tolist()
    [3.0, 5.0]
    """
    received = NonLabelView(view.party, view.rows, view.embeddings, view.gradients)  # what the label party got
    ids, x = latest_rows(received, "embeddings")
    position = {int(r): i for i, r in enumerate(ids)}
    fit = np.array([position[int(r)] for r in known_rows])
    design = np.hstack([x, np.ones((len(x), 1))])
    a = design[fit]
    coef = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ np.asarray(known_values, dtype=np.float64))
    return ids, design @ coef


ATTACKS = {"norm": norm_attack, "direction": direction_attack, "cluster": cluster_attack}
