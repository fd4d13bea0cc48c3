"""The label party's unaligned rows: Diffu-AT's diffusion model, its baselines and FedHSSL's pretraining.

:mod:`.diffusion` (the conditional diffusion model over federated embeddings), :mod:`.synthesis`
(:class:`~.synthesis.UnalignedOptions` and the synthesisers: Diffu-AT, HeuristicVFL, JPL, FedCVT),
:mod:`.hybrid` (FedHSSL: cross-party and guided local SimSiam, secure average) and :mod:`.label_party`
(:class:`~.label_party.UnalignedLabelParty`: both branches). Builds on :mod:`ray_vfl.splitnn.network`;
the driver, :func:`ray_vfl.splitnn.unaligned_protocol.train_unaligned`, sits above it next to
:mod:`ray_vfl.splitnn.protocol`, since a trained model (:class:`~ray_vfl.splitnn.SplitNNModel`) loads
either kind.
"""
