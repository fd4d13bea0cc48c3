"""ray_vfl: vertical federated learning on Ray.

Example
-------
>>> from ray_vfl import SecureBoostClassifier, vertical_split, load_credit       # doctest: +SKIP
>>> data = vertical_split(load_credit().drop(columns="ID"), 2, label="default.payment.next.month")  # doctest: +SKIP
>>> train, test = data.train_test_split(0.2, seed=0)                                # doctest: +SKIP
>>> clf = SecureBoostClassifier(n_estimators=10).fit(train, eval_set=[test])       # doctest: +SKIP
"""

import importlib
from typing import Any

# Public names and the module each lives in. They load on first use (PEP 562): a party's actor or
# crypto task imports ``ray_vfl.secureboost.passive`` (say) without paying for scikit-learn and pandas,
# which the user-level names need (importing all of them took 2.7 s per process, 1.4 s of it scikit-learn).
_EXPORTS = {
    "EarlyStopping": ".callbacks", "EvaluationLogger": ".callbacks", "ProgressBar": ".callbacks",
    "TrainingCallback": ".callbacks",
    "CommStats": ".comm",
    "BoostConfig": ".config",
    "VerticalDataset": ".dataset", "read_table": ".dataset", "vertical_split": ".dataset",
    "load_credit": ".datasets",
    "AlignedDataset": ".psi", "PsiResult": ".psi", "private_set_intersection": ".psi",
    "ConfigError": ".errors", "CryptoError": ".errors", "DataError": ".errors", "NotFittedError": ".errors",
    "PartyFailedError": ".errors", "VFLError": ".errors",
    "SecureBoostClassifier": ".estimator", "SecureBoostRegressor": ".estimator",
    "Runtime": ".runtime",
    "FederatedModel": ".secureboost", "train": ".secureboost",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ray_vfl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__version__ = "0.1.0"

__all__ = sorted(_EXPORTS)
