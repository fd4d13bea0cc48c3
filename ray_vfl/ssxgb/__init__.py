"""SSXGB: multi-party federated XGBoost outsourced to two non-colluding servers with BCP encryption
(:mod:`ray_vfl.ssxgb.protocol` has the paper, the rounds and the view table)."""

from .config import SSXGBConfig
from .estimator import SSXGBClassifier
from .protocol import SSXGBModel, train

__all__ = ["SSXGBClassifier", "SSXGBConfig", "SSXGBModel", "train"]
