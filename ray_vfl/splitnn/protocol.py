"""Split-NN training on Ray (FedAds, Wei et al., SIGIR 2023; split learning, Vepakomma et al. 2018).

A label party holds the labels, some features, its bottom model and the top
model; each non-label party holds other features of the same (aligned) rows
and its bottom model. Both sides derive the batch order from the shared seed;
the defense's randomness comes from the label party's own OS entropy, which
no other party can derive (see :mod:`ray_vfl.splitnn.privacy.defenses`).

Rounds per batch ``b`` (``P`` non-label parties). The table is data:
``tests/test_splitnn_views.py`` checks a run's messages against it both ways and
runs each named attack on the recorded view (no row claims "nothing"):

======  ==========================  ===============================  ================================================
round   sender -> receiver          payload                          what the receiver learns
======  ==========================  ===============================  ================================================
1       non-label -> label          federated embedding (B, d) of    p's bottom-model output for the rows, a
        (embedding)                 b; at prediction, of every row   function of p's features: with some rows'
                                    to score                         values known, the others' are guessed
                                                                     [attack: splitnn.privacy.attacks.embedding_feature_attack]
2       label -> non-label          d loss / d embedding (B, d),     the gradient of its own output, which leaks
        (embedding_grad)            wrapped by the defense           the labels (Li et al., 2022), and through its
                                                                     training its own embeddings do
                                                                     [attack: splitnn.privacy.attacks.norm_attack]
                                                                     [attack: splitnn.privacy.attacks.direction_attack]
                                                                     [attack: splitnn.privacy.attacks.cluster_attack]
predict label -> caller             probabilities, sealed to a key   the predictions it asked for (the caller is
        (splitnn_proba)             the caller made for this call    the label party's side)
======  ==========================  ===============================  ================================================

Prediction: each non-label party sends the embeddings of the rows to score
(``embedding``); nothing comes back. The label party's actor runs the batches with the
non-label parties' actors itself, one round trip per batch: each call to a
non-label party applies the gradient of batch ``b - 1`` and embeds batch
``b``; while it runs, the label party runs its own bottom model on batch
``b``. Training is exactly sequential SGD; the driver makes one call per
``pipeline_depth`` batches (progress, failure checks).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..data.dataset import VerticalDataset
from ..errors import ConfigError, DataError
from ..runtime.actors import Runtime
from ..runtime.comm import CommStats
from ..runtime.party import load_meta, save_parts, warn_unseen_categories
from .privacy.attacks import NonLabelView
from .network.config import SplitNNConfig
from .privacy.defenses import DEFENSES, Defense, NoDefense
from .network.models import batch_schedule
from .unaligned.hybrid import HybridNonLabelParty
from .network.parties import LabelParty, NonLabelParty
from .unaligned.synthesis import UnalignedOptions

__all__ = ["train", "SplitNNModel"]

log = logging.getLogger(__name__)


@dataclass
class SplitNNModel:
    """A trained split network, spread over the party actors.

    Example
    -------
    >>> model = train(Runtime(), data, SplitNNConfig())   # doctest: +SKIP
    >>> model.evaluate(test)                              # doctest: +SKIP
    {'auc': 0.71, 'nll': 0.12}
    """

    runtime: Runtime
    label_party: str
    nonlabel: list[str]
    config: SplitNNConfig
    defense: Defense
    n_rows: int
    comm_stats: CommStats = field(default_factory=CommStats)
    losses: list[float] = field(default_factory=list)
    train_seconds: float = 0.0  # the batch loop alone (actors already up, data encoded)
    # The defense's guarantee for this training (GaussianDP: epsilon from the PLD accountant over every
    # release, delta, releases, sigma); None for defenses that prove none.
    privacy: dict | None = None
    # Trained with unaligned rows (ray_vfl.splitnn.unaligned_protocol): the synthesis and alternation report; else None.
    unaligned: dict | None = None
    # ... and the UnalignedOptions it was trained with (method, pretraining epochs, diffusion model).
    unaligned_options: UnalignedOptions | None = None

    def predict_proba(self, data: VerticalDataset) -> np.ndarray:
        """Federated prediction: probabilities of the positive class for every row of ``data``, handed by
        the label party to the caller (whoever calls this method, on the label party's side) sealed to a
        key the caller's process made for this call (:meth:`ray_vfl.runtime.actors.Runtime.caller_box`)."""
        return self._at_label_party(data, "predict")

    def evaluate(self, data: VerticalDataset) -> dict[str, float]:
        """Test AUC and NLL (log loss), computed by the label party from its own labels of ``data``
        (the driver receives the figures only, so party-held data works as well as a simulation's)."""
        return self._at_label_party(data, "evaluate")

    def _at_label_party(self, data: VerticalDataset, method: str):
        """Every party loads its rows of ``data``; the non-label parties send embeddings; the label
        party runs ``method`` on them; every party drops the rows again."""
        parties = [self.label_party] + self.nonlabel
        if sorted(data.party_names) != sorted(parties):
            raise DataError(f"prediction data must hold the parties {parties}, got {data.party_names}")
        key = f"predict-{uuid.uuid4().hex[:8]}"
        rt = self.runtime
        tables = data.tables(rt)
        def drop() -> None:
            rt.get([(p, rt.actor(p).drop_rows.remote(key)) for p in parties], "cleanup")

        try:
            reports = rt.get([(p, rt.actor(p).load_rows.remote(key, tables[p])) for p in parties], "load prediction rows")
            warn_unseen_categories(parties, reports, "prediction data")
            embs = [rt.actor(p).embed.remote(key) for p in self.nonlabel]
            label = rt.actor(self.label_party)
            if method == "predict":  # probabilities come back sealed to a key made for this call
                box = rt.caller_box()
                sealed = rt.get([(self.label_party, label.predict_for_caller.remote(key, box.public_key, *embs))],
                                "prediction")[0]
                result = box.open(sealed, "splitnn_proba", {"n_rows": data.n_rows}, [self.label_party])
            else:
                result = rt.get([(self.label_party, label.evaluate.remote(key, *embs))], "prediction")[0]
        except (DataError, ConfigError):  # bad input: the parties drop what they loaded and stay ready
            drop()
            raise
        drop()
        records = rt.get([(p, rt.actor(p).comm_records.remote()) for p in parties], "records")
        self.comm_stats.extend(r for batch in records for r in batch)
        return result

    def recorded_view(self, party: str | None = None) -> NonLabelView:
        """What a non-label party saw during training (default: the first one)."""
        party = party or self.nonlabel[0]
        if party not in self.nonlabel:
            raise DataError(f"{party!r} is not a non-label party; those are {self.nonlabel}")
        return self.runtime.get([(party, self.runtime.actor(party).recorded_view.remote())], "view")[0]

    def save(self, directory: str) -> dict[str, str]:
        """Each party writes ``<directory>/<party>.pt``, its own part only, plus ``federation.json`` (roles, config).

        A model trained with unaligned rows saves the same way: the label party's part also holds its
        branch batch norms (``branch_norm="batchnorm"``) and its fitted synthesiser (diffusion model or JPL mapping); ``federation.json``
        names the method and its options.

        Example
        -------
        >>> model.save("model_dir")                                   # doctest: +SKIP
        >>> SplitNNModel.load("model_dir").predict_proba(test)        # doctest: +SKIP
        """
        meta = {"label_party": self.label_party, "nonlabel": self.nonlabel, "config": self.config.to_dict(),
                "defense": {"name": self.defense.name, "params": self.defense.params()}, "n_rows": self.n_rows}
        if self.unaligned_options is not None:
            meta["unaligned"] = {"options": self.unaligned_options.to_dict()}
        return save_parts(self.runtime, [self.label_party] + self.nonlabel, directory, meta, ".pt", kind="splitnn")

    @classmethod
    def load(cls, directory: str, runtime: Runtime | None = None) -> "SplitNNModel":
        """Start one actor per party and have each read its own saved part (for prediction)."""
        meta = load_meta(directory, "SplitNNModel.save", kind="splitnn")
        try:
            config = SplitNNConfig.from_dict(meta["config"])
            label_name, nonlabel = meta["label_party"], list(meta["nonlabel"])
            defense = DEFENSES[meta["defense"]["name"]](**meta["defense"]["params"])
            options = None if meta.get("unaligned") is None else UnalignedOptions.from_dict(
                {"branch_norm": "batchnorm", **meta["unaligned"]["options"]})  # saved before branch_norm: batch norms
        except (KeyError, TypeError, ConfigError) as exc:
            raise DataError(f"{directory!r} holds no split-NN federation file ({type(exc).__name__}: {exc})") from exc
        runtime = runtime or Runtime(timeout_s=config.timeout_s or 600.0)
        runtime.connect([label_name] + nonlabel)
        if options is None:
            label = runtime.spawn(label_name, LabelParty, label_name, None, [], config, nonlabel, defense)
        else:  # its label party: the branch batch norms if any, and the synthesiser
            from .unaligned.label_party import UnalignedLabelParty

            label = runtime.spawn(label_name, UnalignedLabelParty, label_name, None, None, [], config, nonlabel,
                                  defense, options, 0)
        calls = [(label_name, label.load_part.remote(os.path.join(directory, f"{label_name}.pt")))]
        for i, p in enumerate(nonlabel):
            role = HybridNonLabelParty if options is not None and options.method == "fedhssl" else NonLabelParty
            handle = runtime.spawn(p, role, p, None, [], config, label_name, i)
            calls.append((p, handle.load_part.remote(os.path.join(directory, f"{p}.pt"))))
        runtime.get(calls, "load", config.timeout_s)
        runtime.introduce([label_name] + nonlabel, config.timeout_s)
        model = cls(runtime, label_name, nonlabel, config, defense, int(meta.get("n_rows", 0)), privacy=defense.accounting())
        if options is not None:
            model.unaligned_options = options
            model.unaligned = runtime.get([(label_name, label.unaligned_report.remote())], "report", config.timeout_s)[0]
        return model

    def param_grads(self) -> dict[str, dict[str, np.ndarray]]:
        """Every party's parameter gradients from the last batch (diagnostic; used by the tests)."""
        parties = [self.label_party] + self.nonlabel
        grads = self.runtime.get([(p, self.runtime.actor(p).param_grads.remote()) for p in parties], "gradients")
        return dict(zip(parties, grads))


def _check_input(data: VerticalDataset, config: SplitNNConfig, defense: Defense) -> None:
    if not isinstance(config, SplitNNConfig):
        raise DataError(f"config must be a SplitNNConfig, got {type(config).__name__}")
    if not isinstance(defense, Defense):
        raise DataError(f"defense must be a ray_vfl.splitnn Defense (NoDefense, GaussianDP, Marvell, MixPro), got {type(defense).__name__}")
    if data.label_party is None:
        raise DataError("split-NN training needs labels; build the dataset with label= naming the label column")
    data.check_labels("binary:logistic")  # at the label party for party-held data
    if len(data.party_names) < 2:
        raise DataError(f"split-NN training needs a label party and at least one non-label party, got {data.party_names}")
    if data.n_rows < 1:
        raise DataError("no training rows")


def train(
    runtime: Runtime,
    data: VerticalDataset,
    config: SplitNNConfig | None = None,
    defense: Defense | None = None,
    on_window: Callable[[int], None] | None = None,
) -> SplitNNModel:
    """Train a split network on the aligned rows of ``data``, one actor per party.

    Parameters
    ----------
    runtime : Runtime
        Owns the Ray connection and the actors.
    data : VerticalDataset
        Aligned training rows; ``data.label_party`` becomes the label party,
        every other party a non-label party.
    config : SplitNNConfig
        Architecture and training hyper-parameters (FedAds defaults).
    defense : Defense
        Wraps the embedding gradients the label party sends (default: none).
    on_window : callable, optional
        Called with the number of batches done after every window of
        ``config.pipeline_depth`` batches (progress, or fault injection in tests).

    Returns
    -------
    SplitNNModel

    Example
    -------
    >>> from ray_vfl.splitnn import make_fedads_like, SplitNNConfig, GaussianDP  # doctest: +SKIP
    >>> data = make_fedads_like(50_000, seed=0)                                # doctest: +SKIP
    >>> model = train(Runtime(), data.train, SplitNNConfig(), GaussianDP(epsilon=1.0))  # doctest: +SKIP
    >>> model.privacy["epsilon"]                                              # doctest: +SKIP
    1.0
    >>> model.evaluate(data.test)                                              # doctest: +SKIP
    """
    config = config or SplitNNConfig()
    defense = defense if defense is not None else NoDefense()
    _check_input(data, config, defense)
    if config.timeout_s is None:  # the one timeout: the config's if set, else the runtime's
        config = config.replace(timeout_s=runtime.timeout_s)
    label_name = data.label_party
    nonlabel = [p for p in data.party_names if p != label_name]
    # A DP budget covers every release of a row's gradient: once per epoch to each non-label party.
    defense = defense.for_releases(config.epochs * len(nonlabel))
    runtime.connect(data.party_names)
    cats = data.categorical
    tables = data.tables(runtime)  # references: each party's actor fetches its rows from its own store
    label = runtime.spawn(label_name, LabelParty, label_name, tables[label_name], cats.get(label_name, []),
                          config, nonlabel, defense)
    handles = [runtime.spawn(p, NonLabelParty, p, tables[p], cats.get(p, []), config, label_name, i)
               for i, p in enumerate(nonlabel)]
    runtime.get([(p, h.ping.remote()) for p, h in zip([label_name] + nonlabel, [label] + handles)], "setup", config.timeout_s)
    runtime.introduce([label_name] + nonlabel, config.timeout_s)  # public keys, before the first sealed message

    runtime.get([(label_name, label.set_peers.remote(dict(zip(nonlabel, handles))))], "setup", config.timeout_s)
    n_batches = len(batch_schedule(data.n_rows, config.batch_size, config.epochs, config.seed))
    start = time.perf_counter()
    # The label party runs the batches with the non-label parties itself, one window at a time.
    for first in range(0, n_batches, config.pipeline_depth):
        stop = min(first + config.pipeline_depth, n_batches)
        runtime.get([(label_name, label.run_batches.remote(first, stop))], f"batches {first}-{stop - 1}", config.timeout_s)
        if on_window is not None:
            on_window(stop)
    runtime.get([(label_name, label.finish_batches.remote())], "last backward", config.timeout_s)
    seconds = time.perf_counter() - start

    parties = [label_name] + nonlabel
    records = runtime.get([(p, runtime.actor(p).comm_records.remote()) for p in parties], "records")
    losses = runtime.get([(label_name, label.training_losses.remote())], "losses")[0]
    log.info("split-NN trained %d batches over %d aligned rows (defense %s)", n_batches, data.n_rows, defense.name)
    return SplitNNModel(runtime, label_name, nonlabel, config, defense, data.n_rows,
                        CommStats(r for batch in records for r in batch), losses, seconds, defense.accounting())
