"""What server S could infer of a leaf's hessian sum from the values it opens: the factoring attack on a
multiplicatively blinded divisor.

A division that opens ``M = D r`` to S (``D = H + lambda``, ``r`` uniform in ``[2^(rho-1), 2^rho)``, as
SSXGB's Reciprocal once did) shows S a multiple of ``D``: every divisor ``D'`` of ``M`` in the range ``D``
can take (``[lo, hi]``, public: it follows from the row count) whose cofactor ``M / D'`` has ``rho`` bits
is a candidate, and ``D`` is always one of them. S factors ``M`` far enough to list them
(:func:`divisor_candidates`: only prime factors up to ``hi`` matter, found by trial division and
Pollard's rho). :func:`factoring_attack` runs it on every value S opened in each trial and scores how
often ``D`` is among the candidates, the only one, or one of at most three.

SSXGB's division (:mod:`ray_vfl.crypto.two_server.reciprocal`) opens only additively
masked values; ``tests/test_ssxgb_privacy.py`` runs this attack on them (``D`` found in none of 40
trials) and on ``M = D r`` (``D`` among the candidates in every trial, often alone).

:func:`attack_results` runs every attack on SSXGB's views (this one and those of
:mod:`ray_vfl.ssxgb.attack_views`) for ``benchmarks/attacks.py``; :func:`recorded_run` trains once with
the views recorded (also the fixture of ``tests/test_ssxgb_views.py``).

Example
-------
>>> divisor_candidates(91 * 1_000_003, 50, 200, 20)  # 1_000_003 is prime, of 20 bits
[91]
>>> factoring_attack([[91 * 1_000_003], [12345]], [91, 101], 50, 200, 20)
DivisionAttack(trials=2, found=1, pinned=1, at_most_3=1)
"""

from __future__ import annotations

import math
import random
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gmpy2
import numpy as np
import pandas as pd
from gmpy2 import mpz

from ..metrics import AttackResult

__all__ = ["DivisionAttack", "RecordedRun", "attack_results", "divisor_candidates", "factoring_attack",
           "node_tournaments", "prime_factors_below", "recorded_run", "tournament_game", "tournament_values",
           "winner_notes_attack"]

_SMALL = [2]  # the primes below 2^12, for trial division
while _SMALL[-1] < 1 << 12:
    _SMALL.append(int(gmpy2.next_prime(_SMALL[-1])))


def _rho(n: mpz, cap: int, c: int) -> mpz | None:
    """A proper factor of the composite ``n`` by Brent's variant of Pollard's rho (``x -> x^2 + c``), or
    ``None`` after ``cap`` steps (no prime factor below about ``(cap / 4)^2``, with high probability)."""
    y, r, q, g, x, ys = mpz(2), 1, mpz(1), mpz(1), mpz(2), mpz(2)
    steps = 0
    while g == 1:
        x = y
        for _ in range(r):
            y = (y * y + c) % n
        k = 0
        while k < r and g == 1:
            ys = y
            for _ in range(min(128, r - k)):
                y = (y * y + c) % n
                q = q * abs(x - y) % n
            g = gmpy2.gcd(q, n)
            k += 128
        steps += r
        r *= 2
        if steps > cap:
            return None
    if g == n:  # the batch overshot: step one at a time from its start
        while True:
            ys = (ys * ys + c) % n
            g = gmpy2.gcd(abs(x - ys), n)
            if g > 1:
                break
    return None if g == n else g


def prime_factors_below(m: int, bound: int) -> list[int]:
    """The prime factors ``p <= bound`` of ``m > 0``, with multiplicity (those above may be missed, and
    one below is missed with probability below ``e^-8`` per factor)."""
    m = mpz(m)
    out = []
    for p in _SMALL:
        while m % p == 0:
            out.append(p)
            m //= p
    cap = 16 * math.isqrt(max(1, bound)) + 4096
    stack = [m] if m > 1 else []
    while stack:
        n = stack.pop()
        if n <= bound and gmpy2.is_prime(n):
            out.append(int(n))
            continue
        if gmpy2.is_prime(n):
            continue
        for c in (1, 3, 5, 7):
            f = _rho(n, cap, c)
            if f is not None:
                stack += [f, n // f]
                break
    return sorted(out)


def divisor_candidates(m: int, lo: int, hi: int, rho: int) -> list[int]:
    """Every ``D`` in ``[lo, hi]`` dividing ``m`` with ``m / D`` in ``[2^(rho-1), 2^rho)``: what S can
    conclude about ``D`` from an opened ``m = D r``."""
    if m <= 0:
        return []
    lo, hi = max(lo, -(-m >> rho) if m >> rho else 1), min(hi, m >> (rho - 1))
    if lo > hi:
        return []
    divisors = {1}
    for p in prime_factors_below(m, hi):
        divisors |= {d * p for d in divisors if d * p <= hi}
    return sorted(d for d in divisors if lo <= d and m % d == 0 and (1 << (rho - 1)) <= m // d < (1 << rho))


@dataclass(frozen=True)
class DivisionAttack:
    """Of ``trials``: how often ``D`` was among the candidates of some opened value (``found``), the
    only candidate (``pinned``), or one of at most three (``at_most_3``)."""

    trials: int
    found: int
    pinned: int
    at_most_3: int


def factoring_attack(views: Sequence[Sequence[int]], secrets: Sequence[int], lo: int, hi: int,
                     rho: int) -> DivisionAttack:
    """The attack on each trial: ``views[t]``, the integers S opened in trial ``t``; ``secrets[t]``, that
    trial's ``D`` (to score the attack; S does not have it). An opened value can name ``D`` only if ``D``
    divides it with a ``rho``-bit cofactor, so the candidates are listed for those values alone."""
    found = pinned = few = 0
    for vals, d in zip(views, secrets):
        sizes = [len(divisor_candidates(v, lo, hi, rho)) for v in vals
                 if v > 0 and v % d == 0 and lo <= d <= hi and (1 << (rho - 1)) <= v // d < (1 << rho)]
        if sizes:
            found += 1
            pinned += min(sizes) == 1
            few += min(sizes) <= 3
    return DivisionAttack(len(secrets), found, pinned, few)


# -- the harness: a recorded run, the in-process games, the table's rows ------------------------------------
COLUMNS = {"party0": ["a", "b"], "party1": ["c"], "party2": ["d"]}  # party0: the LBP
COMMAND = "python benchmarks/attacks.py --only ssxgb"


def _config():
    from .config import SSXGBConfig
    return SSXGBConfig(n_trees=3, max_depth=2, learning_rate=0.3, max_bin=4, key_bits=1024, allow_weak_keys=True,
                       row_subsample=0.8, seed=3)


def frame_of(n: int, seed: int = 0, positive: float = 0.5) -> pd.DataFrame:
    """Four normal features, the label a noisy linear rule on ``a``, ``c``, ``d`` (three participants'),
    shifted so that about ``positive`` of the rows are 1."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4))
    z = x[:, 0] + 0.8 * x[:, 2] - 0.6 * x[:, 3] + 0.4 * rng.normal(size=n)
    frame = pd.DataFrame(x, columns=list("abcd"))
    frame["y"] = (z > np.quantile(z, 1 - positive)).astype(float)
    return frame


@dataclass
class RecordedRun:
    """One training with every view recorded: ``s_train`` / ``s_predict``, what S opened during training
    and during one prediction of the training rows (``(tree, depth, step, integers, modulus)``); ``c``,
    C's view (:meth:`~ray_vfl.ssxgb.server_c.ServerCRole.view`); ``margins[t]``, the training rows'
    margins before federated tree ``t`` (``t = 1 ..``), and the last entry after all trees; ``public``:
    the public parameters and keys every party saw."""

    model: Any
    data: Any
    frame: pd.DataFrame
    s_train: list
    s_predict: list
    c: dict
    margins: list[np.ndarray]
    records: list
    public: list[int] = field(default_factory=list)


def recorded_run(runtime, frame: pd.DataFrame, config) -> RecordedRun:
    """Train SSXGB on ``frame`` (columns :data:`COLUMNS`, labels at ``party0``) with the views recorded."""
    import ray

    from ray_vfl import vertical_split

    from .protocol import train
    data = vertical_split(frame, COLUMNS, label="y")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = train(runtime, data, config, record_view=True)
    timeout = runtime.timeout_s
    s_train = ray.get(runtime.actor("server_s").view.remote(), timeout=timeout)["opened"]
    c_view = ray.get(runtime.actor("server_c").view.remote(), timeout=timeout)
    margins = [model.predict_margin(data, t) for t in range(1, model.n_trees + 1)]
    s_all = ray.get(runtime.actor("server_s").view.remote(), timeout=timeout)["opened"]
    n_pred = len(s_all) - len(s_train)
    s_predict = s_all[len(s_train):len(s_train) + n_pred // len(margins)]  # the first prediction's TransDec
    part = ray.get(runtime.actor("party1").model_part.remote(), timeout=timeout)
    c_part = ray.get(runtime.actor("server_c").model_part.remote(), timeout=timeout)
    public = [int(v) for v in part["params"]] + [int(v) for v in c_part["user_keys"].values()] + [int(c_part["joint"])]
    roles = model.order + ["server_c", "server_s"]
    later = ray.get([runtime.actor(p).comm_records.remote() for p in roles], timeout=timeout)  # the predictions'
    records = list(model.comm_stats.records) + [r for rs in later for r in rs]
    return RecordedRun(model, data, frame, s_train, s_predict, c_view, margins, records, public)


def _two_server(kappa: int = 80, frac_bits: int = 24):
    """Servers C and S in this process (1024-bit key), S recording what it opens."""
    from ..crypto.two_server.bcp import keygen, setup
    from ..crypto.two_server.server_c import ServerC
    from ..crypto.two_server.server_s import LocalLink, ServerS, TwoServerConfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        params, mk = setup(1024, allow_weak=True)
    users = [keygen(params) for _ in range(3)]
    cfg = TwoServerConfig(256, kappa)
    s = ServerS(mk, cfg, frac_bits=frac_bits, record_view=True)
    c = ServerC(params, LocalLink(s), cfg, frac_bits)
    return params, mk, users, s, c, c.register([pk for pk, _ in users])


def winner_notes_attack(world, trials: int) -> tuple[float, float, float, int]:
    """A non-owner's notes (:func:`~ray_vfl.ssxgb.splits.winner_notes`): participant 1 of three (4, 3, 5
    candidates) scores ``trials`` nodes won by participant 0's second candidate against ``trials`` won by
    participant 2's fourth by its decrypted note; returns the AUC one- and two-sided, its chance margin,
    and how many of its notes fell among its own indices (a node it would take for its own)."""
    from .attack_views import score_auc
    from .splits import winner_notes
    params, _, users, _, c, jpk = world
    counts, offsets = [4, 3, 5], [0, 4, 7]
    winners = [1] * trials + [10] * trials
    owner = [j for j, k in enumerate(counts) for _ in range(k)]
    notes = winner_notes(c, c.encrypt_ints(jpk, winners), c.encrypt_ints(jpk, [owner[w] for w in winners]), offsets,
                         [pk for pk, _ in users])
    seen = c.bcp.decrypt_residues(users[1][1], notes[1])
    one, two, margin = score_auc(np.array([0] * trials + [1] * trials), np.array([v / params.n for v in seen]))
    return one, two, margin, sum(v < counts[1] for v in seen)


def tournament_lgt(world, nodes: int, k: int = 8) -> tuple[list[int], list[int]]:
    """S's LGT values of two tournaments (:func:`~ray_vfl.ssxgb.splits.best_candidates`) whose every
    comparison has a known outcome (gains falling along the index: all 0; rising: all 1), and those
    outcomes."""
    from .splits import best_candidates
    _, _, _, s, c, jpk = world
    values, truth = [], []
    for outcome in (0, 1):
        gains = [(k - j if outcome == 0 else j + 1) for _ in range(nodes) for j in range(k)]
        s.view.clear()
        best_candidates(c, c.encrypt_ints(jpk, gains), c.encrypt_ints(jpk, [1] * len(gains)), nodes, k, 8, [0] * k)
        got = [v for step, vals in s.view if step == "lgt" for v in vals]
        values += got
        truth += [outcome] * len(got)
    return values, truth


def tournament_values(opened: Sequence) -> list[tuple[tuple[int, int, int], list[int]]]:
    """S's LGT arrays of the level tournaments in its recorded view (``opened``: ``(tree, depth, step,
    integers, modulus)``, as :attr:`RecordedRun.s_train`), each keyed ``(tree, depth, halving)``: where
    S opened it, all it can tell of a value (C shuffles each array: not which node, nor which pair).
    The clamp's LGT values (depth -1) are left out; the division opens no LGT value."""
    out, seen = [], Counter()
    for tree, depth, step, vals, _ in opened:
        if step == "lgt" and depth >= 0:
            out.append(((tree, depth, seen[tree, depth]), [int(v) for v in vals]))
            seen[tree, depth] += 1
    return out


def node_tournaments(run_a: RecordedRun, run_b: RecordedRun) -> tuple[list[list[int]], list[list[int]]]:
    """Two recorded trainings' tournament arrays, matched by where S opened them (the same tree, level
    and halving, of the same size: the candidate counts and the row sample are public); arrays without
    a match in the other training are left out."""
    b = dict(tournament_values(run_b.s_train))
    pairs = [(v, b[key]) for key, v in tournament_values(run_a.s_train) if len(b.get(key, ())) == len(v)]
    return [a for a, _ in pairs], [v for _, v in pairs]


def tournament_game(world, share: float, calls: int, nodes: int = 2, k: int = 8, rows: int = 40,
                    seed: int = 0, frac_bits: int = 24) -> list[list[int]]:
    """S's LGT arrays of ``calls`` in-process tournaments (:func:`~ray_vfl.ssxgb.splits.best_candidates`)
    of ``nodes`` nodes each: ``rows`` rows per node, a ``share`` of them labelled 1, margins near the
    labels' log-odds (``p`` as after a calibrated base score), ``k`` candidates splitting a feature
    ``y + N(0, 1)`` at its quantiles; fresh rows per node. The gain fractions are the integers
    :func:`~ray_vfl.ssxgb.splits.gain_fractions` computes, encrypted directly (their Mults open only
    masked values)."""
    from .approx import FixedPointPlan
    from .config import SSXGBConfig
    from .splits import best_candidates
    _, _, _, s, c, jpk = world
    f = frac_bits
    plan = FixedPointPlan.of(SSXGBConfig(kappa=c.config.kappa, frac_bits=f), rows)
    lam = plan.lam
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(calls):
        num, den = [], []
        for _ in range(nodes):
            y = rng.permutation(np.arange(rows) < round(share * rows)).astype(float)
            p = 1 / (1 + np.exp(-(np.log(share / (1 - share)) + 0.3 * rng.normal(size=rows))))
            g, h = np.array(plan.encode(p - y)), np.array(plan.encode(p * (1 - p)))
            x = y + rng.normal(size=rows)
            gt, ht = int(g.sum()), int(h.sum())
            for q in np.quantile(x, (np.arange(k) + 1) / (k + 1)):
                gl, hl = int(g[x < q].sum()), int(h[x < q].sum())
                num.append((gl * (ht - hl + lam) - (gt - gl) * (hl + lam)) ** 2)
                den.append((hl + lam) * (ht - hl + lam))
        s.view.clear()
        best_candidates(c, c.encrypt_ints(jpk, num, 4 * f), c.encrypt_ints(jpk, den, 2 * f), nodes, k,
                        plan.sum_bits, [0] * k)
        out += [[int(v) for v in vals] for step, vals in s.view if step == "lgt"]
    return out


def division_attack(world, trials: int) -> tuple[DivisionAttack, DivisionAttack, int, int]:
    """The factoring attack on ``trials`` leaves (30 sampled rows each, of 240): on the ``D r`` the old
    division opened, and on every value this division opens (``rho`` = 80 and 40); with ``D``'s range."""
    from .approx import FixedPointPlan
    from .config import SSXGBConfig
    from .secure_math import leaf_weights
    _, _, _, s, c, jpk = world
    plan = FixedPointPlan.of(SSXGBConfig(kappa=c.config.kappa), 240)
    lo, hi = plan.leaf_range(30)
    rng = random.Random(3)
    gs = [rng.randrange(-30 << 24, 30 << 24) for _ in range(trials)]
    ds = [rng.randrange(lo, hi + 1) for _ in range(trials)]
    old = factoring_attack([[d * ((1 << 79) | rng.getrandbits(79))] for d in ds], ds, lo, hi, 80)
    s.view.clear()
    leaf_weights(c, plan, c.encrypt_ints(jpk, gs, 24), c.encrypt_ints(jpk, [d - plan.lam for d in ds], 24), [30] * trials)
    views = [[vals[t] for _, vals in s.view] for t in range(trials)]
    new = [factoring_attack(views, ds, lo, hi, rho) for rho in (80, 40)]
    return old, max(new, key=lambda a: a.found), lo, hi


def attack_results(runtime, quick: bool, run: RecordedRun | None = None,
                   skewed: RecordedRun | None = None) -> list[AttackResult]:
    """Every attack on SSXGB's views: one recorded training (quick: 64 rows, 3 trees; else 240 rows,
    5 trees; depth 2, 1024-bit keys; or ``run``, recorded by :func:`recorded_run`), a second one on
    the same features with 80% ones (or ``skewed``) for the label-skew attack, and the in-process
    games of the two-server steps."""
    from .approx import FixedPointPlan
    from .attack_views import lgt_magnitudes, lgt_outcomes, lgt_signs, margin_features, partition_labels, \
        tournament_balance, within
    n, trees = (64, 3) if quick else (240, 5)
    config = _config().replace(n_trees=trees)
    if run is None:
        run = recorded_run(runtime, frame_of(n), config)
    if skewed is None:
        skewed = recorded_run(runtime, frame_of(len(run.frame), positive=0.8), run.model.config)
    n, config = len(run.frame), run.model.config
    trees = config.n_trees
    y = run.frame["y"].to_numpy().astype(int)
    setting = f"{n} rows, 3 participants, {trees} trees of depth 2, 1024-bit BCP"
    out = []

    def row(role, attack, metric, success, chance, two=None, margin=0.0, where=setting):
        out.append(AttackResult("SSXGB", role, attack, metric, float(success), float(chance), two, where,
                                COMMAND + (" --quick" if quick else ""), float(margin)))

    plan = FixedPointPlan.of(config, n)
    found = signs = 0.0
    pooled = []
    tr = sorted({t for t, d, step, _, _ in run.s_train if step == "lgt" and d == -1})
    from ..trees.sampling import RowSampler
    for t in tr:
        vals = [v for tt, d, step, vs, _ in run.s_train if step == "lgt" and tt == t and d == -1 for v in vs]
        rows = RowSampler(config.row_subsample, config.seed).rows(n, t)
        truth = np.minimum(np.abs(run.margins[t - 1][rows]), config.sigmoid_range)
        est = lgt_magnitudes(vals, config.kappa, plan.clamp) / plan.one
        ok, chance = within(est, truth, 0.25)
        found, signs = found + ok / len(tr), signs + chance / len(tr)
        pooled.append((vals, y[rows]))
    row("S", "margin sizes from the clamp's LGT (multiset)", "ranks within 0.25 of |margin|", found, signs)
    one, two, margin = lgt_signs([v for v, _ in pooled], [yy for _, yy in pooled])
    row("S", "labels from the clamp's LGT, paired by position", "AUC", one, 0.5, two, margin)
    one, two, margin = partition_labels(run.c["leaves"], y)
    row("C; every participant", "labels from the instance spaces", "AUC", one, 0.5, two, margin)
    own = run.margins[0]
    for feature, party in (("c", "party1"), ("d", "party2")):
        one, two, margin = margin_features(run.margins[-1], own, run.frame[feature].to_numpy())
        row("LBP", f"{party}'s feature {feature} > median from the margins", "AUC", one, 0.5, two, margin)
    one, two, margin = tournament_balance(*node_tournaments(run, skewed))
    share = float(skewed.frame["y"].mean())
    row("S", f"which training is label-skewed ({y.mean():.0%} vs {share:.0%} ones), from the tournament's LGT "
        "bit lengths", "AUC", one, 0.5, two, margin, where=f"two trainings: {setting}")
    world = _two_server()
    values, truth = tournament_lgt(world, 4 if quick else 16)
    ok, chance, margin = lgt_outcomes(values, truth)
    row("S", "comparison outcome from the LGT value's sign", "accuracy", ok, chance, margin=margin,
        where=f"{len(values)} tournament comparisons, in process")
    trials = 30 if quick else 100
    one, two, margin, wins = winner_notes_attack(world, trials)
    row("non-owner", "where the winner sits, from its note", "AUC", one, 0.5, two, margin,
        where=f"{2 * trials} nodes, in process")
    row("non-owner", "takes another's node for its own", "notes in [0, k_i)", wins, 0.0,
        where=f"{2 * trials} nodes, in process")
    old, new, lo, hi = division_attack(world, 10 if quick else 40)
    where = f"{old.trials} leaves of 30 rows, in process"
    row("S", "factoring the old division's D r", "D among the candidates", old.found / old.trials, 1 / (hi - lo + 1),
        where=where)
    row("S", "factoring every value the division opens", "D among the candidates", new.found / new.trials,
        1 / (hi - lo + 1), where=where)
    return out
