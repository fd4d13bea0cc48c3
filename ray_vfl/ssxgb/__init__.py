"""SSXGB: multi-party federated XGBoost outsourced to two non-colluding servers with BCP encryption
(:mod:`ray_vfl.ssxgb.protocol` has the paper, the rounds and the view table).

Its public names load on first use: a party's or server's process imports the modules it runs
(``.participant``, ``.server_c``, ``.server_s``), not the driver's estimator and scikit-learn.
"""

from .. import _lazy_exports
from . import messages as _messages  # noqa: F401  (registers the message schemas)

_EXPORTS = {"SSXGBConfig": ".config", "SSXGBClassifier": ".estimator", "SSXGBModel": ".protocol", "train": ".protocol"}
__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
