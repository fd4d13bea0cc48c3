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
- Clustering attack (Sun et al. 2022, as in FedAds): k-means (k=2) on the
  federated embeddings; the smaller cluster is taken as positive; the score is
  ``distance to the larger cluster's centre - distance to the smaller one's``.

LeakAUC is the ROC AUC of the scores, computed per batch (as Li et al.) and
averaged over batches that hold both classes; ``dLeakAUC = (LeakAUC_defense -
LeakAUC_none) / LeakAUC_none``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from ..errors import DataError
from ..metrics import auc

__all__ = ["NonLabelView", "norm_attack", "cluster_attack", "leak_auc", "d_leak_auc", "ATTACKS"]


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
    """

    party: str
    rows: list[np.ndarray] = field(default_factory=list)
    embeddings: list[np.ndarray] = field(default_factory=list)
    gradients: list[np.ndarray] = field(default_factory=list)

    @property
    def n_batches(self) -> int:
        return len(self.gradients)

    def describe(self) -> dict:
        """Shapes of what was received, never values (for audits)."""
        return {"gradients": sorted({(str(g.dtype), g.shape[1]) for g in self.gradients})}


def norm_attack(view: NonLabelView) -> list[np.ndarray]:
    """Per batch, the L2 norm of each received gradient row."""
    return [np.linalg.norm(g, axis=1) for g in view.gradients]


def cluster_attack(view: NonLabelView, seed: int = 0, source: str = "embeddings") -> list[np.ndarray]:
    """Per batch, k-means (k=2) on the federated embeddings; the smaller cluster is positive.

    ``source="gradients"`` clusters the received gradients instead.
    """
    if source not in ("embeddings", "gradients"):
        raise DataError(f"source must be 'embeddings' or 'gradients', got {source!r}")
    from sklearn.cluster import KMeans  # imported here: party actors never need scikit-learn

    scores = []
    for batch in getattr(view, source)[: view.n_batches]:
        x = np.asarray(batch, dtype=np.float64)
        if len(x) < 2 or np.allclose(x, x[0]):
            scores.append(np.zeros(len(x)))
            continue
        km = KMeans(n_clusters=2, n_init=3, random_state=seed).fit(x)
        small = int(np.argmin(np.bincount(km.labels_, minlength=2)))
        dist = km.transform(x)  # distances to both centres
        scores.append(dist[:, 1 - small] - dist[:, small])
    return scores


def leak_auc(scores: list[np.ndarray], rows: list[np.ndarray], labels: np.ndarray, per_batch: bool = True) -> float:
    """AUC of attack scores against the true labels of the rows they belong to.

    ``per_batch=True`` averages the AUC of the batches that hold both classes;
    otherwise one AUC over all rows pooled.

    Example
    -------
    >>> leak_auc([np.array([0.1, 0.9, 0.2])], [np.array([0, 1, 2])], np.array([0, 1, 0]))
    1.0
    """
    if len(scores) != len(rows):
        raise DataError(f"{len(scores)} score batches for {len(rows)} row batches")
    if per_batch:
        values = [auc(labels[r], s) for s, r in zip(scores, rows)]
        values = [v for v in values if np.isfinite(v)]
        if not values:
            raise DataError("no batch holds both classes; LeakAUC is undefined (use per_batch=False or larger batches)")
        return float(np.mean(values))
    return auc(labels[np.concatenate(rows)], np.concatenate(scores))


def d_leak_auc(leak_defended: float, leak_none: float) -> float:
    """Relative change of LeakAUC a defense brings: ``(defended - none) / none``."""
    return (leak_defended - leak_none) / leak_none


ATTACKS = {"norm": norm_attack, "cluster": cluster_attack}
