"""The label-guess attack of PIVODL's Table III, and how to score it honestly.

Each honest-but-curious client guesses the labels of the other clients' rows from its own view
only: the leaf weights it received (released by their holders, noisy under partial DP) and the
partitions (which leaf every training row fell in, public among clients). Its score of a row is
the sum over trees of the released weight of the row's leaf; it guesses label 1 where the score is
positive, 0 elsewhere (a positive leaf weight means the leaf's rows have more positive labels than
the model predicted so far).

Going beyond the paper, twice:

- a guess accuracy far below 50% is still a leak (an attacker inverts its guesses), so
  :func:`label_guess_report` also reports the attacker's best achievable ranking score, the two-sided
  AUC ``max(AUC, 1 - AUC)`` of its score. 0.5 means the score tells nothing;
- the weights are not all a client sees. Every client also holds the partitions and the labels of its
  own rows, and the splits were chosen on everyone's labels: the rate of its own labels in a leaf
  predicts the rate of the other clients' rows in it. That second score (``partition``) is reported
  beside the first (``partition_auc``, ``partition_auc_two_sided``). Partial DP noises the released
  weights only, so it does not act on this score except through the trees it changes.

Example
-------
>>> scores = {"bank": {"score": np.array([0.3, -0.2, 0.1, -0.4]), "own": np.array([True, True, False, False]),
...                    "partition": np.array([0.2, -0.1, -0.1, 0.2])}}
>>> label_guess_report(scores, np.array([1.0, 0.0, 1.0, 0.0]))["bank"]
{'rows': 2, 'accuracy': 1.0, 'auc': 1.0, 'auc_two_sided': 1.0, 'partition_auc': 0.0, 'partition_auc_two_sided': 1.0}
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..errors import DataError
from ..metrics import auc

__all__ = ["label_guess_report"]


def label_guess_report(scores: Mapping[str, Mapping[str, np.ndarray]], labels: np.ndarray) -> dict[str, dict[str, float]]:
    """Per attacking client, on the rows it does not label: guess accuracy (label 1 iff score > 0),
    the AUC of its score, and the two-sided AUC; the same two AUCs of its partition score where the
    view holds one. ``scores`` is
    :meth:`~ray_vfl.pivodl.protocol.PIVODLModel.label_guess_scores`; ``labels`` the true 0/1 labels
    (known only to the experimenter of a simulation)."""
    labels = np.asarray(labels, dtype=np.float64)
    out = {}
    for client, view in scores.items():
        score, own = np.asarray(view["score"]), np.asarray(view["own"], dtype=bool)
        if score.shape != labels.shape:
            raise DataError(f"client {client!r} scored {len(score)} rows; {len(labels)} labels were given")
        rows = ~own
        y, s = labels[rows], score[rows]
        ranked = 0 < y.sum() < len(y)  # both classes among the attacked rows (so there are some)
        a = auc(y, s) if ranked else float("nan")
        out[client] = {"rows": int(rows.sum()), "accuracy": float(np.mean((s > 0) == (y == 1))) if rows.any() else float("nan"),
                       "auc": a, "auc_two_sided": max(a, 1 - a)}
        if "partition" in view:
            partition = np.asarray(view["partition"])
            if partition.shape != labels.shape:
                raise DataError(f"client {client!r} gave {len(partition)} partition scores; {len(labels)} labels were given")
            a = auc(y, partition[rows]) if ranked else float("nan")
            out[client].update(partition_auc=a, partition_auc_two_sided=max(a, 1 - a))
    return out
