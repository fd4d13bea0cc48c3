"""SS-VFL: SimSiam's masking and learning laws, and the federated run where both parties keep unaligned rows."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ray_vfl import ConfigError, DataError  # noqa: E402
from ray_vfl.splitnn import SplitNNClassifier  # noqa: E402
from ray_vfl.splitnn.network.models import BottomModel  # noqa: E402
from ray_vfl.splitnn.network.selfsupervised import mask_fields, simsiam_pretrain  # noqa: E402
from ray_vfl.splitnn.unaligned.synthesis import UnalignedOptions  # noqa: E402

LABEL, OTHER = "bank", "shop"


def test_a_view_masks_exactly_its_share_of_fields_uniformly():
    ids = torch.arange(1, 11).repeat(6000, 1)  # 6000 rows of 10 fields, no zero
    view = mask_fields(ids, 0.3, np.random.default_rng(0))
    masked = (view == 0).numpy()
    assert (masked.sum(1) == 3).all()  # round(0.3 * 10) fields per row, always distinct
    assert (view[~torch.as_tensor(masked)] == ids[~torch.as_tensor(masked)]).all()  # the rest untouched
    # every field equally likely: chi-square over 10 fields (9 dof), 0.1 % false-alarm level 27.9
    counts = masked.sum(0)
    expected = masked.sum() / 10
    assert ((counts - expected) ** 2 / expected).sum() < 27.9
    assert (mask_fields(ids[:5, :2], 0.2, np.random.default_rng(0)) == ids[:5, :2]).all()  # round(0.4) = 0 fields


def _clustered(n: int, seed: int):
    """Rows of 12 fields, each a noisy copy of one of 8 cluster codes: the structure SimSiam should find."""
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 8, n)
    return torch.as_tensor((c[:, None] * 3 + rng.integers(0, 3, (n, 12))) % 20 + 1), c


def _probe_accuracy(bottom, ids, c) -> float:
    from sklearn.linear_model import LogisticRegression

    with torch.no_grad():
        h = bottom(ids).numpy()
    half = len(c) // 2
    probe = LogisticRegression(max_iter=500).fit(h[:half], c[:half])
    return float(probe.score(h[half:], c[half:]))


def test_simsiam_learns_the_clusters_without_collapse():
    """No label is used; a linear probe reads the cluster from the pretrained output much better than from
    the initial one, and the normalised outputs keep their spread (no collapse to one point)."""
    torch.set_num_threads(1)
    ids, c = _clustered(8000, 0)
    torch.manual_seed(0)
    bottom = BottomModel([21] * 12, 4, [32, 8])  # a narrow output, so the initial one reads the cluster badly
    before = _probe_accuracy(bottom, ids, c)
    report = simsiam_pretrain(bottom, ids, epochs=4, batch_size=256, learning_rate=2e-3, seed=0)
    after = _probe_accuracy(bottom, ids, c)
    assert after > before + 0.1, (before, after)
    assert report["ssl_loss_last"] < report["ssl_loss_first"] < 0
    assert report["ssl_output_std"] > 0.5 / np.sqrt(8), report  # collapse would give 0; spread rows 1/sqrt(8)
    assert report["ssl_rows"] == 8000 and report["ssl_epochs"] == 4


def test_ss_vfl_pretrains_each_party_on_all_its_rows_and_sends_nothing_more(runtime, unaligned_at_both):
    """Both parties keep rows outside the intersection (in-process PSI); each pretrains alone on all of its
    own, the label party without their labels; the only messages are VanillaVFL's batches."""
    aligned, n_bank = unaligned_at_both
    n_a = aligned.n_rows
    assert len(aligned.unaligned[OTHER]) == 300 and len(aligned.unaligned[LABEL]) == n_bank - n_a
    clf = SplitNNClassifier(unaligned="ss-vfl", ssl_epochs=2, epochs=1, batch_size=128, runtime=runtime,
                            nonlabel_hidden=(16, 8), label_hidden=(16, 8)).fit(aligned)
    rep = clf.unaligned_report_
    assert rep["method"] == "ss-vfl" and rep["ssl_rows"] == n_bank  # aligned + its unaligned rows
    assert rep["nonlabel_ssl"][OTHER]["ssl_rows"] == n_a + 300
    assert np.isfinite([rep["ssl_loss_last"], rep["nonlabel_ssl"][OTHER]["ssl_loss_last"]]).all()
    batches = -(-n_a // 128)
    assert rep["federated_steps"] == rep["steps"] == batches  # the alternation is the federated branch alone
    kinds = [(r.kind, r.sender) for r in clf.comm_stats_.records]
    assert kinds.count(("embedding", OTHER)) == 2 * batches  # pretraining + one more epoch; no synthesis message
    assert {k for k, _ in kinds} == {"embedding", "embedding_grad"}
    proba = clf.predict_proba(aligned)
    assert proba.shape == (n_a, 2) and np.isfinite(proba).all()


def test_ss_vfl_options_checked():
    assert not UnalignedOptions(method="ss-vfl").refreshes
    with pytest.raises(ConfigError, match="nothing to refit for method='ss-vfl'"):
        UnalignedOptions(method="ss-vfl", refresh=True)
    with pytest.raises(ConfigError, match="ssl_mask_rate must be strictly between 0 and 1"):
        UnalignedOptions(method="ss-vfl", ssl_mask_rate=0.0)
    with pytest.raises(ConfigError, match="ssl_epochs"):
        UnalignedOptions(method="ss-vfl", ssl_epochs=0)
    with pytest.raises(DataError, match="at least 2 rows"):
        simsiam_pretrain(BottomModel([3], 2, [4]), torch.ones(1, 1, dtype=torch.int64), 1, 8, 1e-3, 0)
