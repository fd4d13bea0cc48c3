"""SecureBoost: federated gradient boosting with one label party (Cheng et al.).

``train`` and ``FederatedModel`` load on first use: a party's process imports the modules it runs
(``.passive``, ``.active``) without the driver's (``.protocol``).
"""

from .. import _lazy_exports

_EXPORTS = {"train": ".protocol", "FederatedModel": ".model"}
__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
