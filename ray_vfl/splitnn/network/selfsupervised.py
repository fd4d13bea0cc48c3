"""SS-VFL's local step: a party pretrains its bottom model alone, self-supervised, on every row it holds.

SS-VFL (Castiglia, Wang & Patterson, "Self-Supervised Vertical Federated Learning", NeurIPS 2022
Workshop on Federated Learning) uses the rows VFL leaves unused: before the supervised split-NN
training on the aligned rows, each party trains its own bottom model with SimSiam (Chen & He,
"Exploring Simple Siamese Representation Learning", CVPR 2021) on all the rows it holds, aligned or
not; then the parties train VanillaVFL on the aligned rows from these weights. The label party's
unaligned rows enter only through this step, without their labels (SS-VFL is for rows nobody
labelled). No message crosses parties during it.

SimSiam on a party's rows: two views of a batch go through the bottom model ``f`` and a projector
``g`` (``z = g(f(x))``) and a predictor ``h`` (``p = h(z)``); the loss is the symmetrised negative
cosine ``-(cos(p1, sg(z2)) + cos(p2, sg(z1))) / 2`` with a stop-gradient ``sg`` on the targets. The
projector and predictor are thrown away afterwards. For the tables here (every field an integer ID,
:mod:`~ray_vfl.splitnn.network.encoding`) a view masks a random ``mask_rate`` of the row's fields to ID 0,
the encoder's reserved missing/unseen ID, as FedHSSL's CTR augmentation masks fields to a reserved
token (its ``CtrDataTransform``: the row and one masked view, 30 % of the fields); we mask both views
independently, SimSiam's two augmentations. Collapse (every row mapped to one point, SimSiam's
failure mode) is measured as the paper does: the standard deviation over rows of the normalised
projector output, about ``1/sqrt(width)`` when the rows spread and 0 when they collapse.

The masks hide nothing from anyone (the rows and the model never leave the party), so they come from
a generator seeded by the configuration, which makes the pretraining reproducible.

Example
-------
>>> from ray_vfl.splitnn.network.models import BottomModel
>>> _ = torch.manual_seed(0)
>>> bottom = BottomModel([5, 5, 5], embedding_dim=4, hidden=[16])
>>> ids = torch.randint(1, 5, (512, 3))
>>> report = simsiam_pretrain(bottom, ids, epochs=2, batch_size=128, learning_rate=1e-3, seed=0)
>>> report["ssl_rows"], report["ssl_loss_last"] < 0
(512, True)
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...errors import DataError

__all__ = ["SimSiamHead", "mask_fields", "negative_cosine", "output_spread", "simsiam_pretrain"]


class SimSiamHead(nn.Module):
    """SimSiam's projector and predictor over a bottom model's output of width ``in_width`` (default ``width``).

    Projector: two linear layers with batch norm (the last without affine parameters, as SimSiam's),
    ``in_width -> width -> width``; predictor: a bottleneck of ``width // 4`` (at least 8) wide, as
    SimSiam's 2048 -> 512 -> 2048. FedHSSL's cross-party heads map each party's own width to a common one.
    """

    def __init__(self, width: int, in_width: int | None = None) -> None:
        super().__init__()
        inner = max(8, width // 4)
        self.projector = nn.Sequential(nn.Linear(in_width or width, width, bias=False), nn.BatchNorm1d(width), nn.ReLU(),
                                       nn.Linear(width, width, bias=False), nn.BatchNorm1d(width, affine=False))
        self.predictor = nn.Sequential(nn.Linear(width, inner, bias=False), nn.BatchNorm1d(inner), nn.ReLU(),
                                       nn.Linear(inner, width))

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.projector(h)
        return z, self.predictor(z)


def mask_fields(ids: torch.Tensor, mask_rate: float, rng: np.random.Generator) -> torch.Tensor:
    """A view of ``ids`` (rows by fields) with ``round(mask_rate * fields)`` random fields per row set to 0.

    Example
    -------
    >>> view = mask_fields(torch.ones(4, 10, dtype=torch.int64), 0.3, np.random.default_rng(0))
    >>> (view == 0).sum(1).tolist()
    [3, 3, 3, 3]
    """
    n, fields = ids.shape
    k = int(round(mask_rate * fields))
    if k == 0:
        return ids.clone()
    # per row, the k fields with the smallest random keys: k distinct fields, uniformly
    keys = rng.random((n, fields))
    cols = np.argpartition(keys, k - 1, axis=1)[:, :k]
    view = ids.clone()
    view[torch.arange(n).unsqueeze(1), torch.as_tensor(cols)] = 0
    return view


def negative_cosine(p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """SimSiam's ``D(p, z)``: minus the mean cosine of ``p`` and ``z`` over rows, with a stop-gradient on ``z``."""
    return -F.cosine_similarity(p, z.detach(), dim=1).mean()


def output_spread(encoder, head: SimSiamHead, ids: torch.Tensor, rng: np.random.Generator) -> float:
    """The collapse check: the standard deviation over up to 4,096 rows of ``ids`` of the normalised projector
    output, averaged over its dimensions (``1/sqrt(width)`` when the rows spread, 0 when they collapse)."""
    head.eval()
    with torch.no_grad():
        sample = ids[torch.as_tensor(rng.choice(len(ids), min(len(ids), 4096), replace=False))]
        return float(F.normalize(head.projector(encoder(sample)), dim=1).std(0).mean())


def simsiam_pretrain(bottom: nn.Module, ids: torch.Tensor, epochs: int, batch_size: int, learning_rate: float,
                     seed: int, mask_rate: float = 0.3) -> dict[str, Any]:
    """Train ``bottom`` in place with SimSiam on the rows ``ids``; returns a report.

    ``bottom`` maps ``(B, fields)`` IDs to ``(B, width)`` (its ``out_width``). Adam at ``learning_rate``
    over ``bottom`` and a fresh :class:`SimSiamHead`; ``epochs`` passes over the rows in random batches
    of ``batch_size`` (a last batch of one row is skipped: batch norm needs two). The report holds
    ``ssl_rows``, ``ssl_epochs``, ``ssl_loss_first`` and ``ssl_loss_last`` (mean loss of the first and
    last epoch; -1 is perfect agreement), ``ssl_output_std`` (collapse check, see the module docstring)
    and ``ssl_s``.
    """
    if len(ids) < 2:
        raise DataError(f"self-supervised pretraining needs at least 2 rows, got {len(ids)}")
    if not 0.0 < mask_rate < 1.0:
        raise DataError(f"mask_rate must be in (0, 1), got {mask_rate!r}")
    start = time.perf_counter()
    dtype = next(bottom.parameters()).dtype
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = SimSiamHead(int(bottom.out_width)).to(dtype)
    optimizer = torch.optim.Adam(list(bottom.parameters()) + list(head.parameters()), lr=learning_rate)
    rng = np.random.default_rng([seed, 6151])
    losses: list[float] = []
    bottom.train()
    head.train()
    for _ in range(epochs):
        order, total, count = rng.permutation(len(ids)), 0.0, 0
        for first in range(0, len(ids), batch_size):
            rows = torch.as_tensor(order[first : first + batch_size])
            if len(rows) < 2:
                continue
            x = ids[rows]
            z1, p1 = head(bottom(mask_fields(x, mask_rate, rng)))
            z2, p2 = head(bottom(mask_fields(x, mask_rate, rng)))
            loss = (negative_cosine(p1, z2) + negative_cosine(p2, z1)) / 2
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total, count = total + float(loss.detach()) * len(rows), count + len(rows)
        losses.append(total / max(count, 1))
    spread = output_spread(bottom, head, ids, rng)
    return {"ssl_rows": len(ids), "ssl_epochs": epochs, "ssl_loss_first": losses[0] if losses else None,
            "ssl_loss_last": losses[-1] if losses else None, "ssl_output_std": spread,
            "ssl_s": round(time.perf_counter() - start, 3)}
