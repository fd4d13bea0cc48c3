"""ray_vfl: vertical federated learning on Ray.

Example
-------
>>> from ray_vfl import SecureBoostClassifier, vertical_split, load_credit       # doctest: +SKIP
>>> data = vertical_split(load_credit().drop(columns="ID"), 2, label="default.payment.next.month")  # doctest: +SKIP
>>> train, test = data.train_test_split(0.2, seed=0)                                # doctest: +SKIP
>>> clf = SecureBoostClassifier(n_estimators=10).fit(train, eval_set=[test])       # doctest: +SKIP
"""

from .callbacks import EarlyStopping, EvaluationLogger, ProgressBar, TrainingCallback
from .comm import CommStats
from .config import BoostConfig
from .dataset import VerticalDataset, read_table, vertical_split
from .datasets import load_credit
from .psi import AlignedDataset, PsiResult, private_set_intersection
from .errors import ConfigError, CryptoError, DataError, NotFittedError, PartyFailedError, VFLError
from .estimator import SecureBoostClassifier, SecureBoostRegressor
from .runtime import Runtime
from .secureboost import FederatedModel, train

__version__ = "0.1.0"

__all__ = [
    "BoostConfig",
    "CommStats",
    "ConfigError",
    "CryptoError",
    "DataError",
    "EarlyStopping",
    "EvaluationLogger",
    "FederatedModel",
    "NotFittedError",
    "PartyFailedError",
    "ProgressBar",
    "Runtime",
    "SecureBoostClassifier",
    "SecureBoostRegressor",
    "TrainingCallback",
    "VFLError",
    "VerticalDataset",
    "AlignedDataset",
    "PsiResult",
    "private_set_intersection",
    "load_credit",
    "read_table",
    "train",
    "vertical_split",
]
