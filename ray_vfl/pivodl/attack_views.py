"""Attacks on the rows of PIVODL's view table that :mod:`ray_vfl.pivodl.attack` does not cover, each run on
one client's recorded view (:meth:`~ray_vfl.pivodl.protocol.PIVODLModel.recorded_view` of a model trained
with ``record_view=True``), and :func:`attack_results`: every PIVODL attack as
:class:`~ray_vfl.metrics.AttackResult` rows for ``benchmarks/attacks.py``.

- :func:`labelled_rows`: step 1 tells every client which rows each other client labels; it reads them.
- :func:`label_count`: step 2's totals give every client the label sum of all clients: minus its own, the
  others' positive rate.
- :func:`node_sums_guess`: the driver deals split clients as a derangement per node, so every client scores
  one source at *every* node and decrypts that node's totals: minus its own part and the others' ``p``
  (margins are public), the others' positive count in every node. It scores each other row by the
  others' positive rate of the deepest node holding it, summed over trees.
- :func:`membership_order`: a candidate request tells a client which of its own rows go left at each
  record; counting the records a row goes left in orders its rows along the source's features.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..metrics import AttackResult, auc_both_ways, average_ranks
from ..trees.kernels import encoded_gradients
from .attack import _ONE, _grid, _margins, differential_guesses, differential_report, label_guess_report

__all__ = ["labelled_rows", "label_count", "node_sums_guess", "membership_order", "attack_results"]


def _others(view: Mapping) -> np.ndarray:
    mask = np.ones(view["n_rows"], dtype=bool)
    mask[np.asarray(view["own"], dtype=np.int64)] = False
    return mask


def labelled_rows(view: Mapping) -> dict[str, np.ndarray]:
    """Which rows each other client labels, as the client read them in step 1 (``labelled_by``)."""
    return {p: np.asarray(rows) for p, rows in view["labelled_by"].items() if p != view["party"]}


def label_count(view: Mapping) -> float:
    """The others' positive rate: the label sum and count every client learnt in step 2, minus its own."""
    what, total, count = view["totals"][0]
    if what != "base":
        raise ValueError("the recorded view's first totals are not the base score's; record the view from the start")
    y_own = np.asarray(view["y_own"], dtype=np.float64)
    others = count - len(y_own)
    return float((total - y_own.sum()) / others) if others else float("nan")


def node_sums_guess(view: Mapping) -> np.ndarray:
    """Per training row, the sum over trees of the others' positive rate (minus the attacker's estimate of
    the others' base rate) in the deepest node the client scored that holds the row; 0 for its own rows.
    Reads the node totals it decrypted (``sums``), its own part of them, and every row's ``p`` from the
    public margins."""
    n = view["n_rows"]
    others = _others(view)
    base = label_count(view) if view.get("totals") else 0.0
    score = np.zeros(n)
    by_tree: dict[int, list] = {}
    for entry in view["sums"]:
        if entry["tree"] < len(view["released"]) + 1:
            by_tree.setdefault(entry["tree"], []).append(entry)
    for t, entries in by_tree.items():
        p, _ = encoded_gradients(view["objective"], np.zeros(n), _margins(view, t))
        p = _grid(p)
        rate = np.full(n, np.nan)
        for entry in sorted(entries, key=lambda e: len(e["rows"]), reverse=True):  # deeper nodes hold fewer rows
            rows = np.asarray(entry["rows"], dtype=np.int64)
            theirs = rows[others[rows]]
            if not len(theirs):
                continue
            g_theirs = int(_grid(entry["G"])) - int(_grid(entry["own_G"]))
            positives = (int(p[theirs].sum()) - g_theirs) / _ONE  # g = p - y
            rate[theirs] = positives / len(theirs)
        score += np.where(np.isnan(rate), base, rate) - base
    score[~others] = 0.0
    return score


def membership_order(view: Mapping) -> list[dict]:
    """Per node of a candidate request the client received: the source, tree, node, the client's own rows
    of the node (in order) and, per row, the number of offered records it goes left in -- a rank along the
    source's features (the records of one feature are nested sets). The rows of a node are those of the
    node's sums the client decrypted (it scores a source at every node)."""
    own = np.asarray(view["own"], dtype=np.int64)
    node_rows = {(e["tree"], e["node"]): np.asarray(e["rows"], dtype=np.int64) for e in view["sums"]}
    out = []
    for m in view["received"]:
        if m["kind"] != "pivodl_candidate_request":
            continue
        for node, bits in zip(m["payload"]["node"].tolist(), m["payload"]["bits"]):
            rows = node_rows.get((m["tree"], node))
            if rows is None:
                continue
            mine = own[np.isin(own, rows)]
            left = np.unpackbits(bits, axis=1, count=len(mine)) if len(bits) else np.zeros((0, len(mine)), np.uint8)
            out.append({"source": m["sender"], "tree": m["tree"], "node": node, "rows": mine,
                        "count": left.sum(axis=0, dtype=np.int64)})
    return out


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return 0.0
    return float(abs(np.corrcoef(average_ranks(a), average_ranks(b))[0, 1]))


def _order_scores(found: list[dict], features: Mapping, rng: np.random.Generator) -> tuple[float, float]:
    """Mean over requests of the best |Spearman| of the counts with one of the source's features, and the
    same with the counts shuffled (chance)."""
    hit, chance = [], []
    for f in found:
        if len(f["rows"]) < 3:
            continue
        frame = features[f["source"]]
        cols = [np.nan_to_num(np.asarray(frame.iloc[f["rows"]][c], dtype=np.float64), nan=-1e300)
                for c in frame.columns if frame[c].dtype.kind in "if"]
        shuffled = rng.permutation(f["count"])
        hit.append(max((_spearman(f["count"], x) for x in cols), default=0.0))
        chance.append(max((_spearman(shuffled, x) for x in cols), default=0.0))
    return float(np.mean(hit)), float(np.mean(chance))


def attack_results(runtime, quick: bool) -> list[AttackResult]:
    """Every PIVODL attack on the recorded views of a run on the credit data (3 clients labelling 40/30/30%
    of the rows), worst case over the attacking clients: the differential attack with instance threshold 1
    (the attack works where nothing stops it) and with the default, then at the default the paper's
    released-weight guess, the partition label-rate guess, the node-totals guess, the label count, the
    labelled rows and the membership order. Plain backend: the views' decrypted values are the same."""
    from ..data.bundled import load_named
    from ..data.splitting import vertical_split
    from .config import PIVODLConfig
    from .protocol import train

    frame, label, _, _ = load_named("credit")
    rows, trees, depth, bins = (1500, 5, 4, 32) if quick else (6000, 6, 5, 32)
    frame = frame.iloc[:rows].reset_index(drop=True)
    data = vertical_split(frame, 3, label=label, label_owners={"party0": 0.4, "party1": 0.3, "party2": 0.3}, seed=3)
    y = data.label
    setting = f"credit {rows} rows, 3 clients, {trees} trees, depth {depth}, {bins} bins"
    command = "python benchmarks/attacks.py --only pivodl" + (" --quick" if quick else "")
    config = PIVODLConfig(n_trees=trees, max_depth=depth, max_bin=bins, backend="plain")
    out = []

    def row(role, attack, metric, success, chance, two_sided=None, note=""):
        out.append(AttackResult("PIVODL", role, attack, metric, success, chance, two_sided, setting + note, command))

    for threshold in (1, config.instance_threshold):
        model = train(runtime, data, config.replace(instance_threshold=threshold), record_view=True)
        views = {p: model.recorded_view(p) for p in model.order}
        reports = {p: differential_report(v, differential_guesses(v), y) for p, v in views.items()}
        worst = max(reports.values(), key=lambda r: r["auc_two_sided"])
        row("split client", "differential (node)", "AUC of read labels", worst["auc"], 0.5, worst["auc_two_sided"],
            f", threshold {threshold}, {worst['recovered']} rows read")
    others = {p: _others(v) for p, v in views.items()}
    guess = label_guess_report(model.label_guess_scores(), y)
    best = max(guess.values(), key=lambda r: r["auc_two_sided"])
    row("every client", "released weights (paper's Table III)", "AUC", best["auc"], 0.5, best["auc_two_sided"])
    best = max(guess.values(), key=lambda r: r["partition_auc_two_sided"])
    row("every client", "partition label rate", "AUC", best["partition_auc"], 0.5, best["partition_auc_two_sided"])
    aucs = [auc_both_ways(y[others[p]], node_sums_guess(v)[others[p]]) for p, v in views.items()]
    one, two = max(aucs, key=lambda a: a[1])
    row("split client (every client)", "node totals", "AUC", one, 0.5, two)
    errors = []
    for p, v in views.items():
        truth = float(y[others[p]].mean())
        errors.append((1 - abs(label_count(v) - truth), 1 - abs(float(np.mean(v["y_own"])) - truth)))
    success, chance = min(errors, key=lambda e: e[0] - e[1])
    row("every client", "label count", "1 - abs error of the others' positive rate", success, chance,
        note=" (chance: its own rate)")
    owners = np.asarray(data.label_owner)
    accs = []
    for p, v in views.items():
        read = np.full(v["n_rows"], "", dtype=object)
        for q, r in labelled_rows(v).items():
            read[r] = q
        share = max(np.mean(owners[others[p]] == q) for q in model.order if q != p)
        accs.append((float(np.mean(read[others[p]] == owners[others[p]])), float(share)))
    success, chance = min(accs)
    row("every client", "labelled rows", "owner read (accuracy)", success, chance, note=" (chance: largest owner)")
    rng = np.random.default_rng(0)
    scores = [_order_scores(membership_order(v), data.features, rng) for v in views.values()]
    success, chance = max(scores)
    row("k (every client)", "membership order", "abs Spearman with a source feature", success, chance,
        note=" (chance: counts shuffled)")
    return out
