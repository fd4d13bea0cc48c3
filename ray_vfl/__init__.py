"""ray_vfl: vertical federated learning on Ray.

Layers, each importing only those listed before it: :mod:`ray_vfl.errors`, :mod:`ray_vfl.config`
and :mod:`ray_vfl.metrics` (shared by all); :mod:`ray_vfl.runtime` (actors, the metered send path);
:mod:`ray_vfl.crypto`; :mod:`ray_vfl.psi` (ID alignment); :mod:`ray_vfl.data` (party data,
binning); :mod:`ray_vfl.trees` (what every tree protocol shares); then one package per protocol
family: :mod:`ray_vfl.secureboost`, :mod:`ray_vfl.pivodl`, :mod:`ray_vfl.ssxgb`, :mod:`ray_vfl.splitnn`.

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
    "ConfigError": ".errors", "CryptoError": ".errors", "DataError": ".errors", "NotFittedError": ".errors",
    "PartyFailedError": ".errors", "ProtocolError": ".errors", "VFLError": ".errors",
    "VFLWarning": ".errors", "SecurityWarning": ".errors", "DataWarning": ".errors",
    "Runtime": ".runtime.actors", "CommStats": ".runtime.comm",
    "VerticalDataset": ".data.dataset", "read_table": ".data.sources", "PartySource": ".data.sources", "vertical_split": ".data.splitting",
    "AlignedDataset": ".data.dataset", "load_credit": ".data.bundled",
    "PsiResult": ".psi.protocol", "private_set_intersection": ".psi.protocol",
    "BoostConfig": ".trees.config",
    "EarlyStopping": ".trees.callbacks", "EvaluationLogger": ".trees.callbacks", "ProgressBar": ".trees.callbacks",
    "TrainingCallback": ".trees.callbacks", "Checkpoint": ".trees.checkpoint",
    "SecureBoostClassifier": ".secureboost.estimator", "SecureBoostRegressor": ".secureboost.estimator",
    "FederatedModel": ".secureboost.protocol", "train": ".secureboost.protocol",
    "PIVODLClassifier": ".pivodl.estimator", "PIVODLRegressor": ".pivodl.estimator", "PIVODLConfig": ".pivodl.config",
    "SSXGBClassifier": ".ssxgb.estimator", "SSXGBConfig": ".ssxgb.config",
}


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)

__version__ = "0.1.0"

__all__ = sorted(_EXPORTS)
