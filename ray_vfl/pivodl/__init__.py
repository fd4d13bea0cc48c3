"""PIVODL: federated XGBoost with labels spread over several clients (:mod:`ray_vfl.pivodl.protocol`)."""

from . import messages as _messages  # noqa: F401  (registers the message schemas)
from .config import PIVODLConfig
from .protocol import PIVODLModel, train

__all__ = ["PIVODLConfig", "PIVODLModel", "train"]
