"""SSXGB trained end to end on the lattice engine (``engine="lattice"``): Ray actors, sealed messages,
the lattice message kinds; split for split equal to the plain-integer reference, and predictions
(in bulk: one spread and one switch for all rows) near the reference's margins."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("tenseal")
pytest.importorskip("zstandard")

from ray_vfl import vertical_split  # noqa: E402
from ray_vfl.data.binning import PartyBinner  # noqa: E402
from ray_vfl.ssxgb import SSXGBConfig, train  # noqa: E402
from ray_vfl.ssxgb.reference import fit_ssxgb_reference  # noqa: E402

COLUMNS = {"party0": ["a", "b"], "party1": ["c"]}
CONFIG = SSXGBConfig(n_trees=2, max_depth=2, max_bin=4, key_bits=1024, allow_weak_keys=True, frac_bits=16, kappa=40,
                     value_bits=136, row_subsample=0.8, feature_subsample=1.0, seed=3, engine="lattice")


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
    assert np.abs(margins - ref.predict_margin(bins, 0)).max() < 0.05
