"""SSXGB trained end to end on the lattice engine (``engine="lattice"``): Ray actors, sealed messages,
the lattice message kinds (:mod:`ray_vfl.ssxgb.lattice_messages`); split for split equal to the
plain-integer reference, predictions (in bulk: one broadcast, one switch for all rows) within the
fixed point's error of the reference's margins, and the recorded messages equal the view table of
:mod:`ray_vfl.ssxgb.lattice_roles` both ways. Small fixed point (``frac_bits=8``, ``kappa=40``: 5
plaintext primes) to keep it cheap."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import ray

pytest.importorskip("tenseal")
pytest.importorskip("zstandard")

from ray_vfl import vertical_split  # noqa: E402
from ray_vfl.data.binning import PartyBinner  # noqa: E402
from ray_vfl.errors import ConfigError  # noqa: E402
from ray_vfl.runtime.view_table import check_views, view_table  # noqa: E402
from ray_vfl.ssxgb import SSXGBConfig, lattice_roles, train  # noqa: E402
from ray_vfl.ssxgb.config import check_engine_runs  # noqa: E402
from ray_vfl.ssxgb.reference import fit_ssxgb_reference  # noqa: E402

COLUMNS = {"party0": ["a", "b"], "party1": ["c"]}
CONFIG = SSXGBConfig(n_trees=2, max_depth=2, max_bin=3, key_bits=1024, allow_weak_keys=True, frac_bits=8, kappa=40,
                     value_bits=100, row_subsample=0.8, feature_subsample=1.0, seed=3, engine="lattice")
ROLES = {"party0": "LBP", "party1": "i", "server_c": "C", "server_s": "S", "caller": "caller"}


def test_engine_choice():
    assert SSXGBConfig(key_bits=1024, allow_weak_keys=True).engine == "bcp"
    with pytest.raises(ConfigError, match="'bcp', 'lattice'"):
        SSXGBConfig(key_bits=1024, allow_weak_keys=True, engine="bfv")
    check_engine_runs(CONFIG)  # tenseal and zstandard are installed (the module skips otherwise)


def test_lattice_ssxgb_trains_and_predicts(runtime):
    rng = np.random.default_rng(5)
    n = 100
    x = rng.normal(size=(n, 3))
    frame = pd.DataFrame(x, columns=list("abc"))
    frame["y"] = (x[:, 0] + 0.8 * x[:, 2] + 0.4 * rng.normal(size=n) > 0).astype(float)
    data = vertical_split(frame, COLUMNS, label="y")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = train(runtime, data, CONFIG)
    bins = [PartyBinner(CONFIG.max_bin).fit_transform(frame[cols], [], party=p) for p, cols in COLUMNS.items()]
    ref = fit_ssxgb_reference(bins, 0, frame["y"].to_numpy(), CONFIG)
    assert model.assembled_splits() == ref.splits
    margins = model.predict_margin(data)
    assert np.abs(margins - ref.predict_margin(bins, 0)).max() < 0.05  # 2^-8 units: truncations and division
    later = ray.get([runtime.actor(p).comm_records.remote() for p in ROLES if p != "caller"], timeout=60)
    records = list(model.comm_stats.records) + [r for rs in later for r in rs]
    assert check_views(view_table(lattice_roles.__doc__), records, ROLES) == []
    with pytest.raises(ConfigError, match="not supported yet"):
        model.save("/nonexistent-lattice-model")
