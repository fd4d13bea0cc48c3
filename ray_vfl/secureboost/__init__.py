"""SecureBoost: federated gradient boosting with one label party (Cheng et al.)."""

from typing import Any

__all__ = ["train", "FederatedModel"]


def __getattr__(name: str) -> Any:
    """``train`` and ``FederatedModel`` load on first use: a party's process imports the modules it
    runs (``.passive``, ``.active``) without the driver's (``.protocol``)."""
    if name not in __all__:
        raise AttributeError(f"module 'ray_vfl.secureboost' has no attribute {name!r}")
    from . import protocol

    value = globals()[name] = getattr(protocol, name)  # later lookups skip this function
    return value
