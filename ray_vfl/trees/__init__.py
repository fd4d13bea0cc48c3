"""What every federated tree protocol shares.

:mod:`.config` (:class:`BoostConfig`), :mod:`.kernels` (gradients, histograms, gains, leaf weights:
pure numpy), :mod:`.reference` (the centralized trainer a federated run must equal),
:mod:`.feature_groups` (joint cells of a party's features), :mod:`.callbacks` (progress, logging,
early stopping).
"""

from .. import _lazy_exports

_EXPORTS = {
    "BoostConfig": ".config",
    "TrainingCallback": ".callbacks", "ProgressBar": ".callbacks", "EvaluationLogger": ".callbacks",
    "EarlyStopping": ".callbacks", "CallbackList": ".callbacks",
}
__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
