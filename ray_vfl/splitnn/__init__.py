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

Its public names load on first use: a party's process imports the modules it runs (``.network.parties``,
``.unaligned.label_party``), not the driver's data loaders, estimator and scikit-learn.
"""

from .. import _lazy_exports

_EXPORTS = {
    "SplitNNData": ".data", "load_credit_vfl": ".data", "load_fedads": ".data", "load_ipinyou": ".data", "load_open_bandit": ".data", "make_fedads_like": ".data",
    "SplitNNClassifier": ".estimator",
    "InProcessSplitNet": ".network.baselines",
    "SplitNNConfig": ".network.config",
    "LabelParty": ".network.parties", "NonLabelParty": ".network.parties",
    "NonLabelView": ".privacy.attacks", "cluster_attack": ".privacy.attacks", "d_leak_auc": ".privacy.attacks", "direction_attack": ".privacy.attacks", "leak_auc": ".privacy.attacks", "leak_aucs": ".privacy.attacks", "norm_attack": ".privacy.attacks", "two_sided_chance": ".privacy.attacks",
    "Defense": ".privacy.defenses", "GaussianDP": ".privacy.defenses", "Marvell": ".privacy.defenses", "MixPro": ".privacy.defenses", "NoDefense": ".privacy.defenses", "analytic_gaussian_sigma": ".privacy.defenses",
    "SplitNNModel": ".protocol", "train": ".protocol",
    "ConditionalDiffusion": ".unaligned.diffusion", "DiffusionConfig": ".unaligned.diffusion",
    "UnalignedOptions": ".unaligned.synthesis",
    "split_aligned": ".unaligned_protocol", "train_unaligned": ".unaligned_protocol",
}
__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
