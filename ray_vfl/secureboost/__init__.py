"""SecureBoost: federated gradient boosting with one label party (Cheng et al.)."""

from .protocol import FederatedModel, train

__all__ = ["train", "FederatedModel"]
