"""ray_vfl: vertical federated learning on Ray.

Example
-------
>>> from ray_vfl import SecureBoostClassifier, vertical_split, load_credit       # doctest: +SKIP
>>> data = vertical_split(load_credit().drop(columns="ID"), 2, label="default.payment.next.month")  # doctest: +SKIP
>>> train, test = data.train_test_split(0.2, seed=0)                                # doctest: +SKIP
>>> clf = SecureBoostClassifier(n_estimators=10).fit(train, eval_set=[test])       # doctest: +SKIP
"""

import importlib
import sys
from typing import Any, Callable


def _lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """PEP 562 ``__getattr__`` and ``__dir__`` for ``package``, whose public names (``name -> module``,
    relative to the package) load on first use; a loaded name is kept, so later lookups skip this."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__


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


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)

__version__ = "0.1.0"

__all__ = sorted(_EXPORTS)
