"""Attacks of honest-but-curious SecureBoost parties, each run on the view the party recorded.

The leaks :mod:`ray_vfl.secureboost.protocol`'s view table admits, measured. Every attack takes a
:class:`~ray_vfl.secureboost.views.PartyView` (what the party opened and sent, recorded in its own
actor) and what the attacker holds itself; only the scoring pairs its guesses with the truth.

- :func:`leaf_label_scores`, a passive party against the labels. ``level_step`` hands it the children
  of every split and the partitions of the nodes others split (SecureBoost's instance spaces), so it
  knows which rows share a node, down to the last level it advanced to, in every tree. Those nodes are
  chosen to separate the labels. Knowing a few rows' labels (say its own customers who defaulted),
  it scores every other row by the label rate of the known rows at its node, averaged over the trees.
- :func:`feature_bounds`, the active party against a passive party's features. It chose every split
  the passive party won (feature and bin index, never the threshold) and got back the partition of
  the node's rows: each row's bin of that feature is at most the split's bin (left) or above it
  (right). Intersecting those intervals over the trees orders the rows by the passive feature.
- :func:`histogram_bins`, the active party against a passive party's features from the bin sums it
  decrypts: each node's hessian-weighted mean bin of a feature, the rows of the node known to it.
- At prediction, the same two leaks on new rows: :func:`route_label_scores` (the passive party knows
  which of its records each queried row reached and which way it sent it, and the label rate of its
  known training rows there) and :func:`route_feature_bounds` (the active party's bounds on the passive
  features of the rows from the answers).

:func:`attack_results` trains SecureBoost on the credit data with the views recorded and reports
each attack against chance (AUC 0.5), one- and two-sided.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..data.bundled import load_named
from ..data.splitting import vertical_split
from ..errors import VFLError
from ..metrics import AttackResult, auc_both_ways
from ..trees.config import BoostConfig
from .protocol import train
from .views import PartyView, RecordViews, node_rows, recorded_view

__all__ = ["leaf_label_scores", "feature_bounds", "histogram_bins", "route_label_scores", "route_feature_bounds",
           "attack_results", "recorded_run", "results", "QUICK", "FULL"]


def _deepest(nodes: Mapping[int, np.ndarray], n_rows: int) -> np.ndarray:
    """Each row's deepest known node (nodes are listed top-down)."""
    at = np.zeros(n_rows, dtype=np.int64)
    for node, rows in nodes.items():
        at[rows] = node
    return at


def leaf_label_scores(view: PartyView, n_rows: int, known_rows: np.ndarray, known_labels: np.ndarray,
                      prior_weight: float = 2.0) -> np.ndarray:
    """A passive party's score of every training row (higher: more likely label 1), from the instance
    spaces in its view and the labels of ``known_rows`` it knows. Per tree, a row scores the smoothed
    label rate of the known rows at its deepest known node (``prior_weight`` pseudo-rows at the known
    rows' overall rate); the score is the mean over trees.

    >>> from ray_vfl.secureboost.views import Event
    >>> from ray_vfl.secureboost.levels import pack_partition
    >>> from ray_vfl.secureboost.messages import LevelStep, SplitOrders
    >>> none = SplitOrders(*[np.zeros(0, dtype=int)] * 5, np.zeros((0, 4), dtype=np.uint8))
    >>> step = LevelStep(none, np.array([[0, 1, 2]]), pack_partition([0], [np.array([1, 1, 0, 0], bool)]), True)
    >>> view = PartyView("p", [Event("in", "a", "encrypted_gh", 0, 0, None), Event("in", "a", "level_step", 0, 0, step)])
    >>> leaf_label_scores(view, 4, np.array([0, 2]), np.array([1.0, 0.0]), prior_weight=0).tolist()
    [1.0, 1.0, 0.0, 0.0]
    """
    known_rows, known_labels = np.asarray(known_rows), np.asarray(known_labels, dtype=np.float64)
    prior = float(known_labels.mean()) if len(known_labels) else 0.5
    trees = node_rows(view, n_rows)
    score = np.zeros(n_rows)
    for nodes in trees.values():
        at = _deepest(nodes, n_rows)
        size = int(at.max()) + 1
        pos = np.bincount(at[known_rows], weights=known_labels, minlength=size)
        cnt = np.bincount(at[known_rows], minlength=size)
        rate = (pos + prior_weight * prior) / np.maximum(cnt + prior_weight, 1e-12)
        score += rate[at]
    return score / max(len(trees), 1)


def _orders(view: PartyView, party: str) -> dict[tuple[int, int], tuple[int, int]]:
    """``(tree, node) -> (feature, bin)`` of every split ``party`` won, from the level steps sent to it."""
    out = {}
    for e in view.of_kind("level_step", "out"):
        if e.peer != party:
            continue
        o = e.payload.orders
        for node, f, b in zip(o.node.tolist(), o.feature.tolist(), o.bin.tolist()):
            out[(e.tree, node)] = (f, b)
    return out


def feature_bounds(view: PartyView, party: str, n_rows: int, max_bin: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """The active party's bounds on every row's bin of each of ``party``'s features it saw split:
    ``{feature: (lowest bin, highest bin)}`` per row, from the partitions ``party`` sent back. (A row in
    the missing bin follows the split's default side; the bounds then speak of the bins of the rows
    that have a value.)"""
    orders, trees = _orders(view, party), node_rows(view, n_rows)
    bounds: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for e in view.of_kind("partition", "in"):
        if e.peer != party:
            continue
        part = e.payload
        bits = np.unpackbits(part.bits, count=int(part.counts.sum())).astype(bool)
        for node, left in zip(part.node.tolist(), np.split(bits, np.cumsum(part.counts)[:-1])):
            feature, b = orders[(e.tree, node)]
            rows = trees[e.tree][node]
            lo, hi = bounds.setdefault(feature, (np.zeros(n_rows), np.full(n_rows, float(max_bin - 1))))
            hi[rows[left]] = np.minimum(hi[rows[left]], b)
            lo[rows[~left]] = np.maximum(lo[rows[~left]], b + 1)
    return bounds


def histogram_bins(view: PartyView, party: str, n_rows: int, n_bins: int) -> dict[int, np.ndarray]:
    """The active party's guess of every row's bin of each of ``party``'s features from the histograms
    it decrypted: per tree, the hessian-weighted mean bin of the row's deepest node whose histogram it
    holds, averaged over trees. ``{feature: score per row}``.

    The decrypted sums are recorded as the active party reads them (``decrypted_histograms`` events:
    ``(sender, {node: (G, H)})`` per level, every cell of every feature)."""
    trees = node_rows(view, n_rows)
    sums: dict[int, np.ndarray] = {}
    counts = np.zeros(n_rows)
    for tree, nodes in trees.items():
        hists = {}
        for e in view.of_kind("decrypted_histograms"):
            if e.tree == tree and e.peer == party:
                hists.update(e.payload)
        at = np.zeros(n_rows, dtype=np.int64) - 1
        for node, rows in nodes.items():
            if node in hists:
                at[rows] = node
        seen = at >= 0
        counts += seen
        for node in np.unique(at[seen]).tolist():
            H = np.asarray(hists[node][1]).reshape(-1, n_bins)[:, :n_bins - 1]  # the missing bin left out
            mean = (H * np.arange(n_bins - 1)).sum(axis=1) / np.maximum(H.sum(axis=1), 1e-12)
            for f, m in enumerate(mean.tolist()):
                sums.setdefault(f, np.zeros(n_rows))[at == node] += m
    return {f: s / np.maximum(counts, 1) for f, s in sums.items()}


def _answered(view: PartyView, party: str, query_way: str) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(rows, records, went left)`` of every prediction round between the active party and ``party``:
    the k-th route query paired with the k-th answer."""
    answer_way = "out" if query_way == "in" else "in"
    queries = [e.payload for e in view.of_kind("route_query", query_way) if e.peer == party or query_way == "in"]
    answers = [e.payload for e in view.of_kind("route_answer", answer_way) if e.peer == party or answer_way == "out"]
    return [(q.row, q.record, np.unpackbits(a.bits, count=a.count).astype(bool)) for q, a in zip(queries, answers)]


def route_label_scores(view: PartyView, n_rows: int, known_rows: np.ndarray, known_labels: np.ndarray,
                       n_queried: int, prior_weight: float = 2.0) -> np.ndarray:
    """A passive party's score of every prediction row from the route queries it answered: a row that
    reached its record ``r`` and went left (its own answer) scores the label rate of the known training
    rows that went left at ``r``'s node in training (or right), averaged over the records it reached;
    rows it never saw score the known rows' overall rate. ``n_queried``: rows of the prediction set."""
    known_rows, known_labels = np.asarray(known_rows), np.asarray(known_labels, dtype=np.float64)
    prior = float(known_labels.mean()) if len(known_labels) else 0.5
    trees = node_rows(view, n_rows)
    node_of = {}
    for e in view.of_kind("level_step", "in"):
        o = e.payload.orders
        node_of.update({r: (e.tree, n) for n, r in zip(o.node.tolist(), o.record.tolist())})
    own = {}
    for e in view.of_kind("partition", "out"):
        part = e.payload
        bits = np.unpackbits(part.bits, count=int(part.counts.sum())).astype(bool)
        own.update({(e.tree, n): b for n, b in zip(part.node.tolist(), np.split(bits, np.cumsum(part.counts)[:-1]))})
    is_known = np.zeros(n_rows, dtype=bool)
    is_known[known_rows] = True
    label = np.zeros(n_rows)
    label[known_rows] = known_labels
    rates = {}
    for record, (tree, node) in node_of.items():
        rows, left = trees[tree][node], own[(tree, node)]
        rates[record] = [(label[r][is_known[r]].sum() + prior_weight * prior) / (is_known[r].sum() + prior_weight)
                         for r in (rows[~left], rows[left])]
    total, count = np.zeros(n_queried), np.zeros(n_queried)
    for rows, records, left in _answered(view, view.party, "in"):
        np.add.at(total, rows, [rates[r][int(g)] for r, g in zip(records.tolist(), left.tolist())])
        np.add.at(count, rows, 1)
    return np.where(count > 0, total / np.maximum(count, 1), prior)


def route_feature_bounds(view: PartyView, party: str, n_queried: int, max_bin: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """The active party's bounds on every prediction row's bin of ``party``'s features, from the answers
    to its route queries: a row that went left at a record of feature ``f`` and bin ``b`` has ``bin <= b``."""
    split_of = {}
    for e in view.of_kind("level_step", "out"):
        if e.peer == party:
            o = e.payload.orders
            split_of.update({r: (f, b) for f, b, r in zip(o.feature.tolist(), o.bin.tolist(), o.record.tolist())})
    bounds: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for rows, records, left in _answered(view, party, "out"):
        for row, record, went_left in zip(rows.tolist(), records.tolist(), left.tolist()):
            feature, b = split_of[record]
            lo, hi = bounds.setdefault(feature, (np.zeros(n_queried), np.full(n_queried, float(max_bin - 1))))
            if went_left:
                hi[row] = min(hi[row], b)
            else:
                lo[row] = max(lo[row], b + 1)
    return bounds


def recorded_run(runtime, n_rows: int, n_trees: int, max_depth: int, max_bin: int = 16, seed: int = 0,
                 n_test: int = 1000, labels: np.ndarray | None = None):
    """Train on the first ``n_rows`` credit rows (with ``labels`` instead of theirs, if given) and predict
    the next ``n_test``, every party's view recorded from the first tree on; returns ``(train data, test
    data, model, {party: PartyView})``. ``model.comm_stats`` holds the prediction's messages too."""
    frame, label, _, _ = load_named("credit")
    if labels is not None:
        frame = frame.copy()
        frame.loc[frame.index[:n_rows], label] = np.asarray(labels, dtype=frame[label].dtype)
    data = vertical_split(frame, 2, label=label, seed=seed)
    train_data, test_data = data.take(np.arange(n_rows)), data.take(np.arange(n_rows, n_rows + n_test))
    config = BoostConfig(n_trees=n_trees, max_depth=max_depth, max_bin=max_bin, backend="paillier", key_bits=1024,
                         allow_weak_keys=True)
    model = train(runtime, train_data, config, callbacks=[RecordViews(runtime, data.party_names)])
    model.predict_margin(test_data)
    records = runtime.get([(p, runtime.actor(p).comm_records.remote()) for p in data.party_names], "records")
    model.comm_stats.extend(r for party_records in records for r in party_records)
    return train_data, test_data, model, {p: recorded_view(runtime, p) for p in data.party_names}


QUICK, FULL = (2000, 3, 3), (10_000, 5, 4)  # rows, trees, depth


def attack_results(runtime, quick: bool = True) -> list[AttackResult]:
    """Train SecureBoost on credit (2 parties, Paillier 1024 bits) with every view recorded, predict 1,000
    rows, and run each attack (:data:`QUICK` or :data:`FULL`; the passive party knows 2% of the labels,
    the active party's guesses are scored as the AUC of rows above a feature's median)."""
    n_rows, n_trees, depth = QUICK if quick else FULL
    command = "python benchmarks/attacks.py --only secureboost" + (" --quick" if quick else "")
    return results(*recorded_run(runtime, n_rows, n_trees, depth), command=command)


def results(data, test, model, views, command: str = "") -> list[AttackResult]:
    """Every attack of :mod:`.attack` on the views of one :func:`recorded_run`, against chance."""
    n_rows, max_bin = data.n_rows, model.config.max_bin
    active, passive = model.label_party, model.passives[0]
    y = np.asarray(data.label, dtype=np.float64)
    setting = (f"credit, {n_rows} rows, {model.n_trees} trees of depth {model.config.max_depth}, {max_bin} bins, "
               "Paillier")
    rows = []

    rng = np.random.default_rng(0)
    known = rng.choice(n_rows, max(20, n_rows // 50), replace=False)
    score = leaf_label_scores(views[passive], n_rows, known, y[known])
    unknown = np.setdiff1d(np.arange(n_rows), known)
    one, two = auc_both_ways(y[unknown], score[unknown])
    rows.append(AttackResult("SecureBoost", "passive", "leaf_label_scores", "label AUC", one, 0.5, two,
                             setting + f"; knows {len(known)} labels", command, 0.02))

    y_test = np.asarray(test.label, dtype=np.float64)
    score = route_label_scores(views[passive], n_rows, known, y[known], test.n_rows)
    one, two = auc_both_ways(y_test, score)
    rows.append(AttackResult("SecureBoost", "passive", "route_label_scores", "label AUC (prediction rows)", one, 0.5,
                             two, setting + f"; knows {len(known)} training labels, {test.n_rows} rows predicted",
                             command, 0.02))

    column, lo, hi = _most_split(views[active], passive, n_rows, max_bin)
    truth = data.features[passive].iloc[:, column].to_numpy(dtype=np.float64)
    above = (truth > np.median(truth)).astype(float)
    one, two = auc_both_ways(above, (lo + hi) / 2)
    name = data.features[passive].columns[column]
    rows.append(AttackResult("SecureBoost", "active", "feature_bounds", f"AUC of {name} > median", one, 0.5, two,
                             setting, command, 0.02))
    guess = histogram_bins(views[active], passive, n_rows, max_bin + 1)[column]
    one, two = auc_both_ways(above, guess)
    rows.append(AttackResult("SecureBoost", "active", "histogram_bins", f"AUC of {name} > median", one, 0.5, two,
                             setting, command, 0.02))
    lo, hi = route_feature_bounds(views[active], passive, test.n_rows, max_bin).get(column, (None, None))
    if lo is not None:
        truth = test.features[passive].iloc[:, column].to_numpy(dtype=np.float64)
        one, two = auc_both_ways((truth > np.median(truth)).astype(float), (lo + hi) / 2)
        rows.append(AttackResult("SecureBoost", "active", "route_feature_bounds", f"AUC of {name} > median "
                                 "(prediction rows)", one, 0.5, two, setting + f", {test.n_rows} rows predicted",
                                 command, 0.02))
    return rows


def _most_split(view, passive: str, n_rows: int, max_bin: int) -> tuple[int, np.ndarray, np.ndarray]:
    """The passive feature whose bounds narrow the most rows, and those bounds."""
    bounds = feature_bounds(view, passive, n_rows, max_bin)
    if not bounds:
        raise VFLError(f"the passive party {passive!r} won no split: nothing to attack; train more trees")
    column = max(bounds, key=lambda f: int(np.count_nonzero((bounds[f][1] - bounds[f][0]) < max_bin - 1)))
    return (column, *bounds[column])
