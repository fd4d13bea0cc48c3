"""The view-table parser and checker (:mod:`ray_vfl.runtime.view_table`), and the distribution check the
privacy tests share (``tests/view_checks.py``), each shown to fail where it must."""

from __future__ import annotations

import numpy as np
import pytest
from view_checks import independent_of_secret

from ray_vfl.errors import VFLError
from ray_vfl.runtime.view_table import check_views, view_table

DOC = """
=====  ======================  ==========================  ============================================
round  sender -> receiver      payload                     what the receiver learns
=====  ======================  ==========================  ============================================
once   active -> passive       public key                  nothing secret
       (public_key)
per d  passive -> active       Enc(bin sums)               bin sums of g and h
       (encrypted_histograms,  per node                    [attack: secureboost.attack.bin_sums]
       layout)
local  driver -> every         the deal                    who scores what
=====  ======================  ==========================  ============================================
"""


def test_rows_read_roles_kinds_and_attacks():
    rows = view_table(DOC)
    assert [r.round for r in rows] == ["once", "per d", "local"]
    assert rows[1].kinds == ("encrypted_histograms", "layout") and rows[1].attacks == ("secureboost.attack.bin_sums",)
    assert rows[0].learns_nothing and not rows[1].learns_nothing
    assert rows[2].kinds == () and rows[2].receivers == ("every",)
    assert rows[1].payload == "Enc(bin sums) per node"


def test_check_views_both_ways():
    rows = view_table(DOC)
    roles = {"p0": "active", "p1": "passive"}
    sent = [("p0", "p1", "public_key"), ("p1", "p0", "encrypted_histograms"), ("p1", "p0", "layout")]
    assert check_views(rows, sent, roles) == []
    assert check_views(rows, sent[:2], roles) == ["in the table but never sent: passive -> active (layout)"]
    assert check_views(rows, sent[:2], roles, optional=["layout"]) == []
    assert check_views(rows, sent + [("p0", "p1", "labels")], roles) == ["recorded but not in the table: "
                                                                         "active -> passive (labels)"]


def test_a_table_that_does_not_parse_is_named():
    with pytest.raises(VFLError, match="holds 0 view table"):
        view_table("no table here")
    with pytest.raises(VFLError, match="'role -> role'"):
        view_table(DOC.replace("active -> passive      ", "active to passive      "))


def test_independence_fails_on_a_leaky_view_and_passes_on_a_masked_one():
    rng = np.random.default_rng(0)
    modulus = (1 << 127) - 1
    secret_a, secret_b = rng.integers(0, 100, 400), rng.integers(200, 300, 400)
    masked = [[(int(s) + int.from_bytes(rng.bytes(24), "big")) % modulus for s in secret] for secret in (secret_a, secret_b)]
    assert independent_of_secret(*masked, modulus=modulus) > 1e-3
    short = [[int(s) + int(rng.integers(0, 1000)) for s in secret] for secret in (secret_a, secret_b)]
    with pytest.raises(AssertionError, match="depends on the secret"):
        independent_of_secret(*short)
    with pytest.raises(AssertionError, match="not uniform"):  # the same for both secrets, yet far from uniform
        independent_of_secret([1 + s * 7 for s in secret_a], [1 + s * 7 for s in secret_a], modulus=modulus)
