"""Torch modules of the split network and the pure helpers both training paths share.

The same builders make the models inside the party actors and in one process
(the Local and centralized baselines, and the reference the tests compare the
federated gradients with), so a seed gives bit-identical initial weights in
both places.

=============  =======================================  ============================
module         input                                    output
=============  =======================================  ============================
BottomModel    feature IDs ``(B, F)`` of one party      ``(B, hidden[-1])``
TopModel       concatenated bottom outputs              one logit per row
SplitNet       every party's IDs                        one logit per row
=============  =======================================  ============================
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from .config import SplitNNConfig

__all__ = [
    "BottomModel",
    "TopModel",
    "SplitNet",
    "build_bottom",
    "build_top",
    "make_optimizer",
    "batch_schedule",
    "torch_dtype",
    "LABEL_BOTTOM_SEED",
    "TOP_SEED",
    "nonlabel_seed",
    "seeded",
]

# Offsets added to config.seed so that every module has its own, reproducible initialisation.
LABEL_BOTTOM_SEED = 0
TOP_SEED = 1


def nonlabel_seed(index: int) -> int:
    """Seed offset of the ``index``-th non-label party's bottom model."""
    return 2 + index


def torch_dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "float64": torch.float64}[name]


class BottomModel(nn.Module):
    """An 8-dim (configurable) embedding per feature, concatenated, then a ReLU DNN.

    One embedding table holds every feature's rows at per-feature offsets, so
    the lookup is a single gather.
    """

    def __init__(self, vocab_sizes: Sequence[int], embedding_dim: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.vocab_sizes = list(vocab_sizes)
        self.embedding = nn.Embedding(int(sum(vocab_sizes)), embedding_dim)
        self.register_buffer("offsets", torch.as_tensor(np.cumsum([0] + self.vocab_sizes[:-1]), dtype=torch.int64))
        layers: list[nn.Module] = []
        width = embedding_dim * len(self.vocab_sizes)
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        self.dnn = nn.Sequential(*layers)
        self.out_width = width

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        emb = self.embedding(ids + self.offsets)
        return self.dnn(emb.reshape(ids.shape[0], -1))


class TopModel(nn.Module):
    """Over the concatenated bottom outputs: a ReLU DNN of widths ``hidden`` (none by default: FedAds'
    single logistic layer), then one logistic layer (returns logits)."""

    def __init__(self, in_width: int, hidden: Sequence[int] = ()) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for h in hidden:
            layers += [nn.Linear(in_width, h), nn.ReLU()]
            in_width = h
        self.dnn = nn.Sequential(*layers)  # empty: the identity, no parameters (saved parts stay as before)
        self.linear = nn.Linear(in_width, 1)

    def forward(self, parts: Sequence[torch.Tensor]) -> torch.Tensor:
        return self.linear(self.dnn(torch.cat(list(parts), dim=1))).squeeze(1)


def seeded(seed: int, make):
    """``make()`` under ``torch.manual_seed(seed)``; the caller's global torch RNG is left untouched (fork_rng)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return make()


def build_bottom(vocab_sizes: Sequence[int], hidden: Sequence[int], config: SplitNNConfig, seed_offset: int) -> BottomModel:
    """A bottom model initialised from ``config.seed + seed_offset``."""
    model = seeded(config.seed * 1009 + seed_offset, lambda: BottomModel(vocab_sizes, config.embedding_dim, hidden))
    return model.to(torch_dtype(config.dtype))


def build_top(in_width: int, config: SplitNNConfig) -> TopModel:
    return seeded(config.seed * 1009 + TOP_SEED, lambda: TopModel(in_width, config.top_hidden)).to(torch_dtype(config.dtype))


def make_optimizer(params, config: SplitNNConfig) -> torch.optim.Optimizer:
    params = list(params)
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.learning_rate)
    if config.optimizer == "adagrad":
        return torch.optim.Adagrad(params, lr=config.learning_rate)
    return torch.optim.SGD(params, lr=config.learning_rate)


def batch_schedule(n_rows: int, batch_size: int, epochs: int, seed: int) -> list[np.ndarray]:
    """The shared batch order: every party derives it from the seed, nothing is sent.

    Example
    -------
    >>> [b.tolist() for b in batch_schedule(5, 2, 1, seed=0)]
    [[2, 4], [3, 0], [1]]
    """
    batches = []
    for epoch in range(epochs):
        order = np.random.default_rng([seed, epoch]).permutation(n_rows)
        batches += [order[i : i + batch_size] for i in range(0, n_rows, batch_size)]
    return batches


class SplitNet(nn.Module):
    """The whole split network in one process: label bottom, non-label bottoms, top.

    Built from the same seeds as the federated parties, so it is the
    single-process twin of a federation (and, with all features, the
    centralized baseline; with no non-label bottoms, the Local baseline).
    """

    def __init__(self, label_vocab: Sequence[int], nonlabel_vocabs: Sequence[Sequence[int]], config: SplitNNConfig) -> None:
        super().__init__()
        self.label_bottom = build_bottom(label_vocab, config.label_hidden, config, LABEL_BOTTOM_SEED)
        self.nonlabel_bottoms = nn.ModuleList(
            build_bottom(v, config.nonlabel_hidden, config, nonlabel_seed(i)) for i, v in enumerate(nonlabel_vocabs)
        )
        width = self.label_bottom.out_width + sum(b.out_width for b in self.nonlabel_bottoms)
        self.top = build_top(width, config)

    def forward(self, label_ids: torch.Tensor, nonlabel_ids: Sequence[torch.Tensor] = ()) -> torch.Tensor:
        parts = [self.label_bottom(label_ids)] + [b(x) for b, x in zip(self.nonlabel_bottoms, nonlabel_ids)]
        return self.top(parts)
