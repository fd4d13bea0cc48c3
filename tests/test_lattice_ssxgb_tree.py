"""One federated SSXGB tree (depth 2, 60 rows, 2 participants) on the lattice engine, split for split
equal to the plain-integer reference (:func:`~ray_vfl.ssxgb.reference.fit_ssxgb_reference`).

Gradients, gain fractions, the candidate tournament and the leaf weights run on
:class:`~ray_vfl.crypto.lattice.two_server.LatticeServerC` with unchanged SSXGB code; only the node and
left sums (slot sums, which the engine cannot do without rotation keys yet) are taken here from the
decrypted gradients and encrypted again. ``SSXGBConfig(engine=...)`` is checked too."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tenseal")
pytest.importorskip("zstandard")

from ray_vfl.crypto.lattice import two_server as lat  # noqa: E402
from ray_vfl.crypto.lattice.keys import LatticeKeys, LatticePublic  # noqa: E402
from ray_vfl.crypto.two_server.server_s import LocalLink, TwoServerConfig  # noqa: E402
from ray_vfl.errors import ConfigError  # noqa: E402
from ray_vfl.ssxgb.approx import FixedPointPlan, leaf_error_units  # noqa: E402
from ray_vfl.ssxgb.config import SSXGBConfig, check_engine_runs  # noqa: E402
from ray_vfl.ssxgb.reference import candidate_list, fit_ssxgb_reference, top_bins  # noqa: E402
from ray_vfl.ssxgb.secure_math import clamped_gradients, leaf_weights  # noqa: E402
from ray_vfl.ssxgb.splits import best_candidates, gain_fractions  # noqa: E402
from ray_vfl.trees.sampling import RowSampler  # noqa: E402


def test_engine_choice():
    assert SSXGBConfig(key_bits=1024, allow_weak_keys=True).engine == "bcp"
    with pytest.raises(ConfigError, match="'bcp', 'lattice'"):
        SSXGBConfig(key_bits=1024, allow_weak_keys=True, engine="bfv")
    with pytest.raises(ConfigError, match="not wired"):
        check_engine_runs(SSXGBConfig(key_bits=1024, allow_weak_keys=True, engine="lattice"))


def test_lattice_tree_equals_reference():
    rng = np.random.default_rng(3)
    n = 60
    bins = [rng.integers(0, 3, size=(n, 1)).astype(np.uint8) for _ in range(2)]
    y = ((bins[0][:, 0] + bins[1][:, 0] + rng.integers(0, 2, n)) > 2).astype(np.int64)
    config = SSXGBConfig(n_trees=2, max_depth=2, max_bin=3, key_bits=1024, allow_weak_keys=True, frac_bits=16,
                         kappa=40, value_bits=136, engine="lattice")
    ref = fit_ssxgb_reference(bins, 0, y, config)
    plan = FixedPointPlan.of(config, n)
    cfg = TwoServerConfig(config.value_bits, config.kappa)
    keys = LatticeKeys(lat.ring_for(cfg))
    c = lat.LatticeServerC(LatticePublic(keys.ring, keys.exported), LocalLink(lat.LatticeServerS(keys, cfg)), cfg)
    f, pk = plan.frac_bits, c.pub
    rows = RowSampler(config.row_subsample, config.seed).rows(n, 1)
    margin = plan.encode(ref.first.margins(bins[0]))
    g, h = clamped_gradients(c, plan, c.encrypt_ints(pk, [margin[i] for i in rows], f),
                             c.encrypt_ints(pk, [int(y[i]) << f for i in rows], f))
    g_row, h_row = np.zeros(n, dtype=object), np.zeros(n, dtype=object)
    g_row[rows], h_row[rows] = lat.decrypt_ints(keys, g), lat.decrypt_ints(keys, h)  # the sums' stand-in
    sampled = np.zeros(n, dtype=bool)
    sampled[rows] = True
    cands = [(p, ft, b) for p in range(2) for ft, b in candidate_list(top_bins(bins[p], 3), np.arange(1))]
    k = len(cands)
    node_of_row, open_nodes, next_id, splits = np.zeros(n, dtype=np.int64), [0], 1, {}
    for _ in range(config.max_depth):
        gl, hl, gn, hn = [], [], [], []
        for node in open_nodes:
            s = (node_of_row == node) & sampled
            for p, ft, b in cands:
                left = s & (bins[p][:, ft] <= b)
                gl.append(int(g_row[left].sum()))
                hl.append(int(h_row[left].sum()))
                gn.append(int(g_row[s].sum()))
                hn.append(int(h_row[s].sum()))
        enc = [c.encrypt_ints(pk, v, f) for v in (gl, hl, gn, hn)]
        num, den = gain_fractions(c, *enc, plan.lam, plan.sum_bits)
        idx, _ = best_candidates(c, num, den, len(open_nodes), k, plan.sum_bits, [p for p, _, _ in cands])
        children = []
        for node, best in zip(open_nodes, lat.decrypt_ints(keys, idx)):
            p, ft, b = cands[best]
            go = bins[p][:, ft] <= b
            in_node = node_of_row == node
            node_of_row[in_node & go], node_of_row[in_node & ~go] = next_id, next_id + 1
            splits[node] = (p, ft, b, next_id, next_id + 1)
            children += [next_id, next_id + 1]
            next_id += 2
        open_nodes = children
    assert splits == ref.splits[0]
    G = [int(g_row[(node_of_row == lf) & sampled].sum()) for lf in open_nodes]
    H = [int(h_row[(node_of_row == lf) & sampled].sum()) for lf in open_nodes]
    counts = [int(((node_of_row == lf) & sampled).sum()) for lf in open_nodes]
    w = lat.decrypt_ints(keys, leaf_weights(c, plan, c.encrypt_ints(pk, G, f), c.encrypt_ints(pk, H, f), counts))
    for lf, got, a, b, cnt in zip(open_nodes, w, G, H, counts):
        assert abs(got - ref.leaves[0][lf]) <= leaf_error_units(plan, a, b, cnt, margin_error=3 * cnt) + 2
