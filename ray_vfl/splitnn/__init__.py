"""Split neural networks (FedAds): label / non-label party actors, attacks and defenses.

Needs torch (``pip install torch==2.13.0``, the CPU build; or the ``nn`` extra).

Layout, each sub-package importing only those before it: :mod:`.privacy` (attacks and defenses),
:mod:`.network` (config, models, encoding, the party actors, the in-process baselines),
:mod:`.unaligned` (the label party's unaligned rows: diffusion, synthesisers, FedHSSL); above them
the drivers :mod:`.protocol` (:func:`train`, :class:`SplitNNModel`) and :mod:`.unaligned_protocol`
(:func:`train_unaligned`), the estimator, the data loaders (:mod:`.data`) and the FedAds tables
(:mod:`.experiments`).

Example
-------
>>> from ray_vfl import Runtime                                               # doctest: +SKIP
>>> from ray_vfl.splitnn import make_fedads_like, train, SplitNNConfig, Marvell  # doctest: +SKIP
>>> data = make_fedads_like(50_000, seed=0)                                    # doctest: +SKIP
>>> model = train(Runtime(), data.train, SplitNNConfig(), defense=Marvell())   # doctest: +SKIP
>>> model.evaluate(data.test)                                                  # doctest: +SKIP

Or, scikit-learn style: ``SplitNNClassifier(defense=GaussianDP(epsilon=1.0)).fit(data.train)``.
With the label party's unaligned rows (Diffu-AT, needs ``diffusers``):
``SplitNNClassifier(unaligned="diffu-at").fit(data.train, data.label_only)``.
"""

from .privacy.attacks import (
    NonLabelView,
    cluster_attack,
    d_leak_auc,
    direction_attack,
    leak_auc,
    leak_aucs,
    norm_attack,
    two_sided_chance,
)
from .network.baselines import InProcessSplitNet
from .network.config import SplitNNConfig
from .data import (
    SplitNNData,
    load_credit_vfl,
    load_fedads,
    load_ipinyou,
    load_open_bandit,
    make_fedads_like,
)
from .privacy.defenses import (
    Defense,
    GaussianDP,
    Marvell,
    MixPro,
    NoDefense,
    analytic_gaussian_sigma,
)
from .unaligned.diffusion import ConditionalDiffusion, DiffusionConfig
from .estimator import SplitNNClassifier
from .network.parties import LabelParty, NonLabelParty
from .protocol import SplitNNModel, train
from .unaligned.synthesis import UnalignedOptions
from .unaligned_protocol import split_aligned, train_unaligned

__all__ = [
    "ConditionalDiffusion",
    "Defense",
    "DiffusionConfig",
    "GaussianDP",
    "InProcessSplitNet",
    "LabelParty",
    "Marvell",
    "MixPro",
    "NoDefense",
    "NonLabelParty",
    "NonLabelView",
    "SplitNNClassifier",
    "SplitNNConfig",
    "SplitNNData",
    "SplitNNModel",
    "UnalignedOptions",
    "analytic_gaussian_sigma",
    "cluster_attack",
    "d_leak_auc",
    "direction_attack",
    "leak_auc",
    "leak_aucs",
    "load_credit_vfl",
    "load_fedads",
    "load_ipinyou",
    "load_open_bandit",
    "make_fedads_like",
    "norm_attack",
    "split_aligned",
    "train",
    "train_unaligned",
    "two_sided_chance",
]
