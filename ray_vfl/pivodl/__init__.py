"""PIVODL: federated XGBoost with labels spread over several clients (:mod:`ray_vfl.pivodl.protocol`).

Its public names load on first use: a client's process imports the modules it runs (``.client``), not
the driver's estimator and scikit-learn.
"""

from .. import _lazy_exports
from . import messages as _messages  # noqa: F401  (registers the message schemas)

_EXPORTS = {
    "PIVODLConfig": ".config", "PIVODLModel": ".protocol", "train": ".protocol",
    "PIVODLClassifier": ".estimator", "PIVODLRegressor": ".estimator",
    "label_guess_report": ".attack", "differential_guesses": ".attack", "differential_report": ".attack",
}
__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
