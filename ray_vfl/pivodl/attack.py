"""Attacks of honest-but-curious PIVODL clients on the labels of the others, each run on what the
attacker holds, and how to score them honestly.

The other rows of the view table have their attacks in :mod:`ray_vfl.pivodl.attack_views`, with
:func:`~ray_vfl.pivodl.attack_views.attack_results` (every PIVODL attack, for ``benchmarks/attacks.py``).

**The label guess of the paper's Table III** (:func:`label_guess_report`). Each client guesses the
labels of the other clients' rows from its own view only: the leaf weights it received (released by
their holders, noisy under partial DP) and the partitions (which leaf every training row fell in,
public among clients). Its score of a row is the sum over trees of the released weight of the row's
leaf; it guesses label 1 where the score is positive, 0 elsewhere (a positive leaf weight means the
leaf's rows have more positive labels than the model predicted so far).

Going beyond the paper, twice:

- a guess accuracy far below 50% is still a leak (an attacker inverts its guesses), so
  :func:`label_guess_report` also reports the attacker's best achievable ranking score, the two-sided
  AUC ``max(AUC, 1 - AUC)`` of its score. 0.5 means the score tells nothing;
- the weights are not all a client sees. Every client also holds the partitions and the labels of its
  own rows, and the splits were chosen on everyone's labels: the rate of its own labels in a leaf
  predicts the rate of the other clients' rows in it. That second score (``partition``) is reported
  beside the first (``partition_auc``, ``partition_auc_two_sided``). Partial DP noises the released
  weights only, so it does not act on this score except through the trees it changes.

**The split client's differential attack** (:func:`differential_guesses`, scored by
:func:`differential_report`). A split client decrypts, per node it scores, the summed gradients of
every offered candidate's left branch and the node's totals; it holds its own rows' part of each sum
(it computed it), and it can compute every training row's margin (base score, released weights,
public partitions), hence every row's hessian ``h = p (1 - p)`` and ``p``. For every pair of sets it
decrypted for one node -- left branches, right branches (total minus left), the node, the empty set --
it subtracts the sums, and its own part; where the hessian difference equals the hessian of exactly
one other client's row of the node and no other, and ``p - dG`` is a label (0 or 1), it has isolated
that row's gradient and reads the label. It needs neither the candidates' features nor their order:
it tries every pair. The instance threshold (:mod:`ray_vfl.pivodl.threshold`) is what stops it.
``scope="tree"`` goes further: every two sums the client decrypted in one tree, across nodes, which
the threshold does not rule out (a difference of many rows whose other rows cancel, rows with the same
margin and label having the same gradient pair).

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
from ..trees.kernels import GRADIENT_FRAC_BITS, base_margin, encoded_gradients

__all__ = ["label_guess_report", "differential_guesses", "differential_report"]

_ONE = 1 << GRADIENT_FRAC_BITS  # 1.0 on the gradients' fixed-point grid


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


def _grid(x) -> np.ndarray:
    """Values on the gradients' grid as exact integers (every sum of gradient pairs is on it)."""
    return np.rint(np.asarray(x, dtype=np.float64) * _ONE).astype(np.int64)


def _margins(view: Mapping, trees: int) -> np.ndarray:
    """Every training row's margin before tree ``trees``, added up as every client adds its own."""
    margin = np.full(view["n_rows"], base_margin(view["objective"], view["base_score"]))
    for weights, leaf in zip(view["released"][:trees], view["leaf_of_row"][:trees]):
        lookup = np.zeros(max(weights) + 1)
        lookup[list(weights)] = list(weights.values())
        margin = margin + lookup[leaf]
    return margin


def _isolate(G: np.ndarray, H: np.ndarray, rows: np.ndarray, p: np.ndarray, h: np.ndarray) -> list[tuple[int, int]]:
    """``(row, label)`` for every pair of sets whose difference is one of ``rows`` (by its hessian, unique among
    ``rows``) with a label that fits; ``G``, ``H`` are the sets' sums as grid integers, the empty set included."""
    values, first, counts = np.unique(h[rows], return_index=True, return_counts=True)
    single = counts == 1
    values, owner = values[single], rows[first[single]]
    out: list[tuple[int, int]] = []
    if not len(values):
        return out
    step = max(1, (1 << 22) // len(H))  # pairs in chunks of about 4M
    for i in range(0, len(H), step):
        dH = H[i:i + step, None] - H[None, :]
        dG = G[i:i + step, None] - G[None, :]
        pos = np.searchsorted(values, dH)
        hit = (dH > 0) & (pos < len(values))
        hit[hit] = values[pos[hit]] == dH[hit]
        row = owner[pos[hit]]
        label = p[row] - dG[hit]  # g = p - y on the grid
        fits = (label == 0) | (label == _ONE)
        out += zip(row[fits].tolist(), (label[fits] // _ONE).tolist())
    return out


def _their_sums(entry: Mapping) -> tuple[np.ndarray, np.ndarray]:
    """The sums of one node's decrypted sets -- left branches, right branches, the node -- without the
    attacker's own part, as grid integers."""
    kept = ~np.asarray(entry["dropped"], dtype=bool)
    sums = []
    for total, left, own_total, own_left in (("G", "GL", "own_G", "own_GL"), ("H", "HL", "own_H", "own_HL")):
        theirs = _grid(entry[left])[kept] - _grid(entry[own_left])[kept]
        whole = int(_grid(entry[total])) - int(_grid(entry[own_total]))
        sums.append(np.concatenate([theirs, whole - theirs, [whole]]))
    return sums[0], sums[1]


def differential_guesses(view: Mapping, scope: str = "node") -> np.ndarray:
    """The split client's differential attack (see the module docstring) on its recorded view
    (:meth:`~ray_vfl.pivodl.protocol.PIVODLModel.recorded_view` of a model trained with
    ``record_view=True``): per training row, the label it isolated (0 or 1), NaN where it isolated
    none. Reads only what the client holds: the sums it decrypted with its own part of each, the
    rows of each node, the base score, released weights and partitions.

    ``scope="node"`` subtracts the sums of one node from each other (the attack the instance threshold
    is built against); ``scope="tree"`` also every two sums the client decrypted in one tree, across
    nodes (a row is then isolated by a hessian unique among the rows of all those nodes).

    Example
    -------
    >>> view = {"objective": "binary:logistic", "n_rows": 3, "base_score": 0.5, "own": np.array([0]),
    ...         "released": [], "leaf_of_row": [], "sums": [{"tree": 0, "rows": np.arange(3),
    ...         "GL": np.array([0.5, 0.0]), "HL": np.array([0.5, 0.25]), "G": 0.0, "H": 0.75,
    ...         "own_GL": np.array([0.5, 0.0]), "own_HL": np.array([0.25, 0.0]), "own_G": 0.5, "own_H": 0.25,
    ...         "dropped": np.array([False, False])}]}
    >>> differential_guesses(view).tolist()  # all hessians equal: the rows cannot be told apart
    [nan, nan, nan]
    """
    if view["objective"] != "binary:logistic":
        raise DataError(f"the differential attack reads 0/1 labels (binary:logistic); this model is {view['objective']!r}")
    if scope not in ("node", "tree"):
        raise DataError(f"scope must be 'node' or 'tree', got {scope!r}")
    n_rows = view["n_rows"]
    own = np.zeros(n_rows, dtype=bool)
    own[np.asarray(view["own"], dtype=np.int64)] = True
    groups: dict = {}
    for i, entry in enumerate(view["sums"]):
        if entry["tree"] <= len(view["released"]):  # later trees were dropped with their margins
            groups.setdefault((entry["tree"], i), []).append(entry)
            if scope == "tree":
                groups.setdefault((entry["tree"], -1), []).append(entry)
    claims: dict[int, list[int]] = {}
    gradients: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for (t, _), entries in groups.items():
        if t not in gradients:
            g0, h = encoded_gradients(view["objective"], np.zeros(n_rows), _margins(view, t))
            gradients[t] = (_grid(g0), _grid(h))
        sums = [_their_sums(e) for e in entries]
        G = np.concatenate([g for g, _ in sums] + [[0]])  # the empty set: a single sum is a difference too
        H = np.concatenate([h for _, h in sums] + [[0]])
        rows = np.unique(np.concatenate([np.asarray(e["rows"], dtype=np.int64) for e in entries]))
        for row, label in _isolate(G, H, rows[~own[rows]], *gradients[t]):
            claims.setdefault(row, []).append(label)
    out = np.full(n_rows, np.nan)
    for row, labels in claims.items():
        out[row] = float(np.bincount(labels, minlength=2).argmax())
    return out


def differential_report(view: Mapping, guesses: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Score :func:`differential_guesses` against the true 0/1 ``labels`` (known only to the experimenter),
    on the rows the attacker does not label. Where it isolated no row it guesses its own majority label.
    ``recovered``: rows it isolated, ``recovered_accuracy``: how many of those it got right; ``accuracy``
    against ``chance`` (the majority share of the attacked rows); ``auc`` of the guesses (0.5 where none)
    and ``auc_two_sided`` = ``max(auc, 1 - auc)``, against chance 0.5."""
    labels = np.asarray(labels, dtype=np.float64)
    guesses = np.asarray(guesses, dtype=np.float64)
    if labels.shape != guesses.shape or len(labels) != view["n_rows"]:
        raise DataError(f"{len(guesses)} guesses and {len(labels)} labels for {view['n_rows']} training rows")
    attacked = np.ones(len(labels), dtype=bool)
    attacked[np.asarray(view["own"], dtype=np.int64)] = False
    y, guess = labels[attacked], guesses[attacked]
    found = ~np.isnan(guess)
    y_own = np.asarray(view.get("y_own", []), dtype=np.float64)
    prior = float(y_own.mean() >= 0.5) if len(y_own) else 0.0
    said = np.where(found, guess, prior)
    score = np.where(found, guess, 0.5)
    ranked = 0 < y.sum() < len(y)
    a = auc(y, score) if ranked else float("nan")
    return {"rows": int(attacked.sum()), "recovered": int(found.sum()),
            "recovered_accuracy": float(np.mean(guess[found] == y[found])) if found.any() else float("nan"),
            "accuracy": float(np.mean(said == y)) if len(y) else float("nan"),
            "chance": float(max(y.mean(), 1 - y.mean())) if len(y) else float("nan"),
            "auc": a, "auc_two_sided": max(a, 1 - a)}


