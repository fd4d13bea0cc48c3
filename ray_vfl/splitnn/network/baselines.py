"""The same network trained in one process: the Local and centralized baselines.

:class:`InProcessSplitNet` encodes each party's columns with that party's own
encoder, builds :class:`~ray_vfl.splitnn.network.models.SplitNet` from the same seeds
as the federated parties and trains it on the same batch schedule, so with
every party it is the single-process twin of :func:`ray_vfl.splitnn.train`
(the centralized upper bound), and with the label party alone it is the
Local baseline.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ...data.dataset import VerticalDataset
from ...errors import DataError, NotFittedError
from ...metrics import auc, logloss
from .config import SplitNNConfig
from .encoding import FeatureEncoder
from .models import SplitNet, batch_schedule, make_optimizer
from .parties import check_binary_labels

__all__ = ["InProcessSplitNet"]


class InProcessSplitNet:
    """Split network in one process over the parties ``parties`` of a dataset.

    Parameters
    ----------
    config : SplitNNConfig
    parties : sequence of str or None
        Parties whose features to use, the label party first; ``None`` uses
        every party (centralized). ``[label_party]`` gives the Local baseline.
    num_threads : int or None
        Torch threads for training (process-wide); ``None`` leaves torch's setting.

    Example
    -------
    >>> local = InProcessSplitNet(SplitNNConfig(), parties=["bank"]).fit(train)   # doctest: +SKIP
    >>> local.evaluate(test)                                                       # doctest: +SKIP
    """

    def __init__(self, config: SplitNNConfig | None = None, parties: Sequence[str] | None = None,
                 num_threads: int | None = None) -> None:
        self.config = config or SplitNNConfig()
        self.parties = None if parties is None else list(parties)
        self.num_threads = num_threads

    def _order(self, data: VerticalDataset) -> list[str]:
        if data.label_party is None:
            raise DataError("the dataset has no label party")
        order = self.parties or [data.label_party] + [p for p in data.party_names if p != data.label_party]
        if order[0] != data.label_party:
            raise DataError(f"the first party must be the label party {data.label_party!r}, got {order[0]!r}")
        missing = [p for p in order if p not in data.features]
        if missing:
            raise DataError(f"parties {missing} are not in the dataset's parties {data.party_names}")
        return order

    def _ids(self, data: VerticalDataset) -> list[torch.Tensor]:
        return [torch.from_numpy(self.encoders_[p].transform(data.features[p], party=p)) for p in self.order_]

    def fit(self, data: VerticalDataset) -> "InProcessSplitNet":
        cfg = self.config
        if self.num_threads is not None:  # torch's thread count is process-wide; set only when asked
            torch.set_num_threads(self.num_threads)
        self.order_ = self._order(data)
        y = torch.as_tensor(check_binary_labels(data.label), dtype=getattr(torch, cfg.dtype))
        self.encoders_ = {
            p: FeatureEncoder(cfg.n_bins, cfg.max_categories).fit(data.features[p], data.categorical.get(p, []), party=p)
            for p in self.order_
        }
        ids = self._ids(data)
        self.net_ = SplitNet(self.encoders_[self.order_[0]].vocab_sizes, [self.encoders_[p].vocab_sizes for p in self.order_[1:]], cfg)
        optimizer = make_optimizer(self.net_.parameters(), cfg)
        self.losses_: list[float] = []
        start = time.perf_counter()
        for rows in batch_schedule(data.n_rows, cfg.batch_size, cfg.epochs, cfg.seed):
            logits = self.net_(ids[0][rows], [x[rows] for x in ids[1:]])
            loss = F.binary_cross_entropy_with_logits(logits, y[rows])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            self.losses_.append(float(loss.detach()))
        self.train_seconds_ = time.perf_counter() - start
        return self

    def predict_proba(self, data: VerticalDataset) -> np.ndarray:
        if not hasattr(self, "net_"):
            raise NotFittedError("call fit before predict_proba")
        ids = self._ids(data)
        with torch.no_grad():
            return torch.sigmoid(self.net_(ids[0], ids[1:])).numpy().astype(np.float64)

    def evaluate(self, data: VerticalDataset) -> dict[str, float]:
        """Test AUC and NLL (log loss)."""
        y = check_binary_labels(data.label)
        p = self.predict_proba(data)
        return {"auc": auc(y, p), "nll": logloss(y, p)}
