"""The split network itself: its configuration, torch modules, feature encoding and party actors.

:mod:`.config` (:class:`~.config.SplitNNConfig`), :mod:`.models` (bottom, top and the whole
:class:`~.models.SplitNet`, the seeds and batch order both training paths share), :mod:`.encoding` (each
party's feature IDs), :mod:`.parties` (:class:`~.parties.LabelParty`, :class:`~.parties.NonLabelParty`),
:mod:`.selfsupervised` (a party's SimSiam pretraining of its own bottom model, which SS-VFL and FedHSSL
use) and :mod:`.baselines` (the same network in one process: Local and centralized). Builds on
:mod:`ray_vfl.splitnn.privacy` (a party records its view and applies the defense).
"""
