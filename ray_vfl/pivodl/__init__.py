"""PIVODL: federated XGBoost with labels spread over several clients (:mod:`ray_vfl.pivodl.protocol`)."""

from . import messages as _messages  # noqa: F401  (registers the message schemas)
from .attack import differential_guesses, differential_report, label_guess_report
from .config import PIVODLConfig
from .estimator import PIVODLClassifier, PIVODLRegressor
from .protocol import PIVODLModel, train

__all__ = ["PIVODLConfig", "PIVODLModel", "PIVODLClassifier", "PIVODLRegressor", "train", "label_guess_report",
           "differential_guesses", "differential_report"]
