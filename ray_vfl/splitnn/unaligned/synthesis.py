"""Federated embeddings for the label party's unaligned rows: Diffu-AT's diffusion model and two baselines.

Every synthesiser runs inside the label party on what it holds: the embeddings ``h_N`` it received for
the aligned training rows, its own representation ``h_L`` of every row, and its labels ``y``.

==============  ================================================================================
method          synthetic ``h_N`` of an unaligned row
==============  ================================================================================
``diffu-at``    a sample of the conditional diffusion model ``p(h_N | y, h_L)``
                (FedAds, :mod:`ray_vfl.splitnn.unaligned.diffusion`)
``heuristic``   HeuristicVFL: the mean ``h_N`` of the aligned rows of the same user (a label-party
                column naming the user); the mean of all aligned rows for a user never aligned
``jpl``         JPL (Li et al., "Vertical Semi-Federated Learning for Efficient Online Advertising",
                2022): a mapping ``h_L -> h_N`` trained on the aligned rows to imitate the federated
                embedding (its "federated equivalence imitation", mean squared error). Its second
                constraint, cross-branch rank alignment, ties a *local-serving* student to the
                federated model; FedAds serves with the federated branch, so it is left out here.
``fedcvt``      FedCVT's representation estimation (Kang, Liu & Liang, "FedCVT: Semi-supervised
                Vertical Federated Learning with Cross-view Training", ACM TIST 2022): scaled
                dot-product attention with the unaligned row's ``h_L`` as query, the aligned rows'
                ``h_L`` as keys and their ``h_N`` as values
==============  ================================================================================

FedCVT, as far as it applies here: in FedCVT both parties have unaligned rows, many unlabelled, so each
party estimates the other's missing representations and unlabelled rows get confidence-filtered pseudo
labels; three classifiers (each party's view and the joint one) train together. In FedAds' setting only
the label party has unaligned rows and they carry labels, so what applies is the label party's estimate
of ``h_N`` (built here, refreshed every alternating epoch with the current representations, as FedCVT
re-estimates per iteration), trained through the same alternating branches as every method. Its
pseudo-labelling and the non-label party's estimation have nothing to act on, and are left out.

SS-VFL and FedHSSL synthesise no ``h_N``: each party pretrains its bottom model self-supervised on all
its rows (SS-VFL: :mod:`ray_vfl.splitnn.network.selfsupervised`, ``method="ss-vfl"``), FedHSSL with a second,
cross-party SimSiam between the parties over the aligned rows and a secure average of the local
encoders' upper layers (:mod:`ray_vfl.splitnn.unaligned.hybrid`, ``method="fedhssl"``). Left out: VFL-MPD, which
no source we could read here describes precisely enough to build it faithfully (see the README's
split-NN section).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from ...config import ValidatedConfig, check_float, check_int
from ...errors import ConfigError, DataError
from .diffusion import ConditionalDiffusion, DiffusionConfig

__all__ = ["UnalignedOptions", "METHODS", "SELF_SUPERVISED", "branch_sequence", "synthesize", "heuristic_embeddings",
           "ImitationMap", "AttentionEstimate"]

METHODS = ("diffu-at", "heuristic", "jpl", "fedcvt", "ss-vfl", "fedhssl")
SELF_SUPERVISED = ("ss-vfl", "fedhssl")  # methods that pretrain self-supervised instead of synthesising
BRANCH_NORMS = ("moments", "batchnorm", "none")


@dataclass(frozen=True)
class UnalignedOptions(ValidatedConfig):
    """How the unaligned rows are used.

    Parameters
    ----------
    method : str
        ``"diffu-at"`` (default), ``"heuristic"`` (needs ``user_column``), ``"jpl"``, ``"fedcvt"`` or
        ``"ss-vfl"`` (no synthesis: each party pretrains its bottom model self-supervised on all its rows,
        :mod:`ray_vfl.splitnn.network.selfsupervised`, then VanillaVFL trains on the aligned rows) or ``"fedhssl"``
        (no synthesis: every party pretrains two encoders, one with the other parties over the aligned rows
        and one on all its rows, :mod:`ray_vfl.splitnn.unaligned.hybrid`, then VanillaVFL).
    pretrain_epochs : int
        VanillaVFL epochs on the aligned rows before the synthesis (the split-NN config's ``epochs``
        counts these plus the alternating ones).
    diffusion : DiffusionConfig
        The diffusion model (``diffu-at``).
    user_column : str or None
        Label-party column naming the user (``heuristic``).
    imitation_epochs : int
        Epochs of JPL's mapping.
    refresh : bool or None
        Resynthesise the unaligned rows' ``h_N`` at the start of every alternating epoch after the first,
        refitting the synthesiser on the ``h_N`` the label party received in the previous epoch's
        federated steps (one per aligned row, each from the live non-label bottom model) with the
        current ``h_L``. Nothing new crosses parties: those embeddings are the federated branch's own
        messages. Without it the synthetic ``h_N`` stay those of the pretrained bottom while the real
        one keeps training. ``None`` (default): on for ``diffu-at``, off for ``heuristic`` and ``jpl``,
        what measured best for each on the FedAds-like generator (benchmarks/RESULTS.md, "Diffu-AT variants
        measured with the earlier batch norms", with the batch norms per branch and the unclipped sampler
        of then: Diffu-AT 0.7890 -> 0.7941 AUC, JPL 0.7936 -> 0.7891, HeuristicVFL 0.7934 -> 0.7944);
        on for ``fedcvt``, which re-estimates with the current representations as FedCVT does.
    local_weight : float
        Weight of the local branch's loss (1: as the federated branch's).
    label_smoothing : float
        ``s`` in [0, 1): when the diffusion model is fitted (``diffu-at``), each aligned row's ``y`` in the
        condition is replaced with probability ``s`` by a draw from the aligned rows' label rate, so the
        model learns ``p(h_N | y~, h_L)`` with a noisy label ``y~`` (a soft label, smoothed towards the
        base rate; an affine ``y (1 - s) + s / 2`` would be undone by the condition's standardisation);
        sampling conditions on the true labels. 0: the labels as they are.
    samples_per_row : int
        Synthetic ``h_N`` drawn per unaligned row (``diffu-at``); each local step takes one of them per
        row at random.
    ssl_epochs : int
        Self-supervised epochs before the federated training (``ss-vfl``: over each party's rows;
        ``fedhssl``: each a cross-party, a local and an aggregation round).
    ssl_mask_rate : float
        Fraction of a row's fields a SimSiam view masks (``ss-vfl``, ``fedhssl``; FedHSSL's CTR masking: 0.3).
    branch_norm : str
        How the federated branch's real ``h_N`` and the local branch's synthetic ``h_N`` are brought to one
        scale (FedAds keeps separate batch norms for the two branches, for the same reason). ``"moments"``
        (default): each synthesis is shifted and scaled per dimension to the mean and standard deviation of
        the real ``h_N`` it was fitted on, and the federated branch is VanillaVFL's network unchanged (no
        parameter is added). ``"batchnorm"``: one batch norm per branch over ``h_N`` before the top (the
        local one starts as a copy of the federated one), the federated one serving predictions.
        ``"none"``: the synthetic ``h_N`` as synthesised. On the FedAds-like generator a batch norm over
        ``h_N`` costs VanillaVFL and ORACLE alike about 0.006 AUC and Diffu-AT 0.012-0.015; "moments" costs
        nothing (benchmarks/RESULTS.md, "Diffu-AT's samples clipped to the fitted range"). SS-VFL and FedHSSL
        synthesise nothing: "batchnorm" adds the federated batch norm to them, the others leave them as
        VanillaVFL.
    ssl_guidance : float
        ``fedhssl``: weight ``g`` in [0, 1) of the pull of the local encoder towards the party's own
        cross-party one (the local loss is ``(1 - g) * SimSiam + g * guidance``; 0 is the authors' code's
        default, 0.5 weighs both terms equally).

    Example
    -------
    >>> UnalignedOptions(method="heuristic")
    Traceback (most recent call last):
    ...
    ray_vfl.errors.ConfigError: method='heuristic' needs user_column= naming the label party's user ID column
    """

    method: str = "diffu-at"
    pretrain_epochs: int = 1
    diffusion: DiffusionConfig = field(default_factory=DiffusionConfig)
    user_column: str | None = None
    imitation_epochs: int = 20
    refresh: bool | None = None
    local_weight: float = 1.0
    label_smoothing: float = 0.0
    samples_per_row: int = 1
    ssl_epochs: int = 5
    ssl_mask_rate: float = 0.3
    ssl_guidance: float = 0.5
    branch_norm: str = "moments"

    def __post_init__(self) -> None:
        if isinstance(self.diffusion, dict):
            object.__setattr__(self, "diffusion", DiffusionConfig.from_dict(self.diffusion))
        if self.method not in METHODS:
            raise ConfigError(f"method must be one of {METHODS}, got {self.method!r}")
        check_int("pretrain_epochs", self.pretrain_epochs, 1, 1000)
        if not isinstance(self.diffusion, DiffusionConfig):
            raise ConfigError(f"diffusion must be a DiffusionConfig, got {type(self.diffusion).__name__}")
        if self.method == "heuristic" and not self.user_column:
            raise ConfigError("method='heuristic' needs user_column= naming the label party's user ID column")
        check_int("imitation_epochs", self.imitation_epochs, 1, 100_000)
        if self.refresh is not None and not isinstance(self.refresh, bool):
            raise ConfigError(f"refresh must be True, False or None (per method), got {self.refresh!r}")
        check_float("local_weight", self.local_weight, 0.0, 100.0)
        check_float("label_smoothing", self.label_smoothing, 0.0, 1.0)
        if self.label_smoothing >= 1.0:
            raise ConfigError("label_smoothing must be below 1 (at 1 the condition would carry no label), got 1.0")
        check_int("samples_per_row", self.samples_per_row, 1, 64)
        check_int("ssl_epochs", self.ssl_epochs, 1, 10_000)
        check_float("ssl_mask_rate", self.ssl_mask_rate, 0.0, 1.0)
        if not 0.0 < self.ssl_mask_rate < 1.0:
            raise ConfigError(f"ssl_mask_rate must be strictly between 0 and 1 (0 gives two equal views, 1 two "
                              f"empty ones), got {self.ssl_mask_rate!r}")
        check_float("ssl_guidance", self.ssl_guidance, 0.0, 1.0)
        if self.ssl_guidance >= 1.0:
            raise ConfigError("ssl_guidance must be below 1 (at 1 the local encoder would learn nothing of its own "
                              "rows' views), got 1.0")
        if self.branch_norm not in BRANCH_NORMS:
            raise ConfigError(f"branch_norm must be one of {BRANCH_NORMS}, got {self.branch_norm!r}")
        if self.method in SELF_SUPERVISED and self.refresh:
            raise ConfigError(f"refresh=True has nothing to refit for method={self.method!r} (it synthesises no h_N); "
                              "leave refresh=None")

    @property
    def refreshes(self) -> bool:
        """Whether the synthetic ``h_N`` are refitted every alternating epoch (``refresh``, per method if None)."""
        return self.method in ("diffu-at", "fedcvt") if self.refresh is None else self.refresh


def branch_sequence(n_federated: int, n_local: int, rng: np.random.Generator) -> np.ndarray:
    """The alternation: per step, True for the federated branch; ``n_federated`` and ``n_local`` steps in all.

    A uniformly random interleaving of the two branches' batches: at every step the federated branch
    comes with probability ``n_federated / (n_federated + n_local)``, proportional to its rows when the
    batches are (FedAds: each step picks a branch with probability proportional to its row count).
    Unlike independent draws, every batch is used exactly once per epoch, so a DP defense's count of
    releases is exact.

    Example
    -------
    >>> steps = branch_sequence(20, 80, np.random.default_rng(0))
    >>> int(steps.sum()), len(steps)
    (20, 100)
    """
    if n_federated < 1 or n_local < 1:
        raise DataError(f"both branches need batches: {n_federated} federated, {n_local} local")
    steps = np.zeros(n_federated + n_local, dtype=bool)
    steps[rng.choice(len(steps), n_federated, replace=False)] = True
    return steps


def heuristic_embeddings(h_n: np.ndarray, users: np.ndarray, users_u: np.ndarray) -> tuple[np.ndarray, float]:
    """HeuristicVFL: per unaligned row the mean ``h_N`` of the aligned rows of its user (else of all rows).

    Returns the embeddings and the fraction of unaligned rows whose user has aligned rows.

    Example
    -------
    >>> h, hit = heuristic_embeddings(np.array([[0.0], [2.0], [10.0]]), np.array([1, 1, 2]), np.array([1, 3]))
    >>> h.ravel().tolist(), hit
    ([1.0, 4.0], 0.5)
    """
    keys, inverse = np.unique(np.asarray(users).astype(str), return_inverse=True)
    sums = np.zeros((len(keys), h_n.shape[1]))
    np.add.at(sums, inverse, h_n)
    means = sums / np.bincount(inverse, minlength=len(keys))[:, None]
    lookup = {k: i for i, k in enumerate(keys.tolist())}
    idx = np.array([lookup.get(u, -1) for u in np.asarray(users_u).astype(str).tolist()], dtype=np.int64)
    out = np.where((idx >= 0)[:, None], means[np.maximum(idx, 0)], h_n.mean(0))
    return out, float(np.mean(idx >= 0)) if len(idx) else 0.0


class ImitationMap:
    """JPL's federated-equivalence imitation: an MLP ``h_L -> h_N`` fitted by mean squared error."""

    def __init__(self, hidden: int = 128, epochs: int = 20, batch_size: int = 256, seed: int = 0) -> None:
        self.hidden, self.epochs, self.batch_size, self.seed = hidden, epochs, batch_size, seed

    def fit(self, h_l: np.ndarray, h_n: np.ndarray) -> "ImitationMap":
        x, y = torch.as_tensor(h_l, dtype=torch.float32), torch.as_tensor(h_n, dtype=torch.float32)
        self.mean_, self.std_ = x.mean(0), x.std(0).clamp_min(1e-6)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.net_ = nn.Sequential(nn.Linear(x.shape[1], self.hidden), nn.ReLU(), nn.Linear(self.hidden, y.shape[1]))
        opt = torch.optim.Adam(self.net_.parameters(), lr=1e-3)
        gen = torch.Generator().manual_seed(self.seed)
        xs = (x - self.mean_) / self.std_
        self.losses_: list[float] = []
        for _ in range(self.epochs):
            order, total = torch.randperm(len(x), generator=gen), 0.0
            for i in range(0, len(x), self.batch_size):
                rows = order[i : i + self.batch_size]
                loss = torch.mean((self.net_(xs[rows]) - y[rows]) ** 2)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(rows)
            self.losses_.append(total / len(x))
        return self

    def predict(self, h_l: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.net_((torch.as_tensor(h_l, dtype=torch.float32) - self.mean_) / self.std_).numpy()

    def to_state(self) -> dict[str, Any]:
        """The fitted mapping as tensors and plain values (``torch.load(..., weights_only=True)`` reads it back)."""
        first, last = self.net_[0], self.net_[-1]
        return {"hidden": self.hidden, "epochs": self.epochs, "batch_size": self.batch_size, "seed": self.seed,
                "in_dim": first.in_features, "out_dim": last.out_features, "mean": self.mean_, "std": self.std_,
                "net": {k: v.detach().clone() for k, v in self.net_.state_dict().items()},
                "losses": [float(v) for v in self.losses_]}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "ImitationMap":
        """The mapping :meth:`to_state` described: it predicts as the fitted one did."""
        out = cls(int(state["hidden"]), int(state["epochs"]), int(state["batch_size"]), int(state["seed"]))
        out.net_ = nn.Sequential(nn.Linear(int(state["in_dim"]), out.hidden), nn.ReLU(),
                                 nn.Linear(out.hidden, int(state["out_dim"])))
        out.net_.load_state_dict(state["net"])
        out.mean_, out.std_, out.losses_ = state["mean"], state["std"], list(state["losses"])
        return out


class AttentionEstimate:
    """FedCVT's estimate of a missing representation: ``softmax(q K^T / sqrt(d)) V`` with the unaligned
    row's ``h_L`` as query ``q``, the aligned rows' ``h_L`` as keys ``K`` and their ``h_N`` as values ``V``.

    Example
    -------
    >>> est = AttentionEstimate().fit(np.array([[8.0, 0.0], [0.0, 8.0]]), np.array([[1.0], [-1.0]]))
    >>> np.round(est.predict(np.array([[8.0, 0.0], [0.0, 0.0]])), 3).ravel().tolist()
    [1.0, 0.0]
    """

    def __init__(self, chunk: int = 1024) -> None:
        self.chunk = chunk

    def fit(self, h_l: np.ndarray, h_n: np.ndarray) -> "AttentionEstimate":
        self.keys_ = torch.as_tensor(np.asarray(h_l), dtype=torch.float32)
        self.values_ = torch.as_tensor(np.asarray(h_n), dtype=torch.float32)
        return self

    def predict(self, h_l: np.ndarray) -> np.ndarray:
        """The estimates, ``self.chunk`` queries at a time (memory ``chunk x aligned rows``)."""
        q = torch.as_tensor(np.asarray(h_l), dtype=torch.float32)
        scale = 1.0 / np.sqrt(self.keys_.shape[1])
        with torch.no_grad():
            parts = [torch.softmax(q[i : i + self.chunk] @ self.keys_.T * scale, dim=1) @ self.values_
                     for i in range(0, len(q), self.chunk)]
        return torch.cat(parts).numpy() if parts else np.zeros((0, self.values_.shape[1]), dtype=np.float32)

    def to_state(self) -> dict[str, Any]:
        """Keys and values (the aligned rows' ``h_L`` and ``h_N``, which the label party holds)."""
        return {"chunk": self.chunk, "keys": self.keys_.clone(), "values": self.values_.clone()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "AttentionEstimate":
        out = cls(int(state["chunk"]))
        out.keys_, out.values_ = state["keys"], state["values"]
        return out


def synthesize(options: UnalignedOptions, h_n: np.ndarray, h_l: np.ndarray, y: np.ndarray, h_l_u: np.ndarray,
               y_u: np.ndarray, users: tuple[np.ndarray, np.ndarray] | None = None,
               seed_offset: int = 0, return_model: bool = False) -> tuple:
    """Synthetic ``h_N`` for the unaligned rows ``(h_l_u, y_u)`` from the aligned ``(h_n, h_l, y)``; and a report.

    The embeddings have shape ``(n_u, width)``, or ``(samples_per_row, n_u, width)`` for ``diffu-at``
    with ``options.samples_per_row > 1``. ``seed_offset`` varies the models' seeds between refreshes.
    ``return_model=True`` adds a third item: the fitted synthesiser (:class:`ConditionalDiffusion` for
    ``diffu-at``, :class:`ImitationMap` for ``jpl``, :class:`AttentionEstimate` for ``fedcvt``, ``None``
    for ``heuristic``, which fits no model).
    """
    if len(h_n) < 2:
        raise DataError(f"need at least 2 aligned rows to learn the federated embeddings from, got {len(h_n)}")
    if len(h_l_u) < 1:
        raise DataError("no unaligned rows to synthesise embeddings for")
    if len(h_n) != len(h_l) or len(h_l) != len(y):
        raise DataError(f"aligned rows disagree: {len(h_n)} embeddings, {len(h_l)} representations, {len(y)} labels")
    if h_l.shape[1] != h_l_u.shape[1]:
        raise DataError(f"h_L of the aligned rows has width {h_l.shape[1]} but of the unaligned rows {h_l_u.shape[1]}")
    report: dict[str, Any] = {"method": options.method, "aligned_rows": len(h_n), "unaligned_rows": len(h_l_u)}
    if options.method == "diffu-at":
        diffusion = options.diffusion.replace(seed=(options.diffusion.seed + 1009 * seed_offset) % 2**31)
        y_fit = np.asarray(y, dtype=np.float64)
        if options.label_smoothing > 0:
            rng = np.random.default_rng([diffusion.seed, 5501])
            swap = rng.random(len(y_fit)) < options.label_smoothing
            y_fit = np.where(swap, rng.random(len(y_fit)) < y_fit.mean(), y_fit).astype(np.float64)
        model = ConditionalDiffusion(diffusion).fit(h_n, np.column_stack([y_fit, h_l]))
        start = time.perf_counter()
        cond = np.column_stack([y_u, h_l_u])
        k = options.samples_per_row
        out = model.sample(cond) if k == 1 else np.stack(
            [model.sample(cond, seed=diffusion.seed + 1 + 7 * i) for i in range(k)])
        seconds = time.perf_counter() - start
        report.update(diffusion_loss_first=model.losses_[0], diffusion_loss_last=model.losses_[-1],
                      synthesis_s=round(seconds, 3), embeddings_per_s=round(k * len(cond) / max(seconds, 1e-9)))
    elif options.method == "heuristic":
        if users is None:
            raise DataError("HeuristicVFL needs the user IDs of the aligned and unaligned rows (user_column)")
        out, hit = heuristic_embeddings(h_n, users[0], users[1])
        report["user_hit_rate"] = round(hit, 4)
        model = None
    elif options.method == "fedcvt":
        model = AttentionEstimate().fit(h_l, h_n)
        start = time.perf_counter()
        out = model.predict(h_l_u)
        report["synthesis_s"] = round(time.perf_counter() - start, 3)
    else:
        model = ImitationMap(epochs=options.imitation_epochs, seed=options.diffusion.seed + seed_offset).fit(h_l, h_n)
        out = model.predict(h_l_u)
        report["imitation_mse"] = model.losses_[-1]
    out = np.asarray(out, dtype=np.float32)
    if options.branch_norm == "moments":
        out = match_moments(out, h_n)
    report["branch_norm"] = options.branch_norm
    return (out, report, model) if return_model else (out, report)


def match_moments(synthetic: np.ndarray, real: np.ndarray) -> np.ndarray:
    """``synthetic`` shifted and scaled per dimension (the last axis) to ``real``'s mean and standard deviation.

    A dimension the synthesis left constant takes ``real``'s mean. Example:

    >>> out = match_moments(np.array([[0.0, 5.0], [2.0, 5.0]]), np.array([[10.0, 1.0], [14.0, 3.0]]))
    >>> out.tolist()
    [[10.0, 2.0], [14.0, 2.0]]
    """
    synthetic, real = np.asarray(synthetic, dtype=np.float64), np.asarray(real, dtype=np.float64)
    axes = tuple(range(synthetic.ndim - 1))
    mean, std = synthetic.mean(axis=axes), synthetic.std(axis=axes)
    scale = np.divide(real.std(0), std, out=np.zeros_like(std), where=std > 0)
    return ((synthetic - mean) * scale + real.mean(0)).astype(np.float32)
