"""FedHSSL: the pretraining between the party actors, its messages, its secure average, save and load."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ray_vfl import ConfigError, VerticalDataset  # noqa: E402
from ray_vfl.splitnn import SplitNNClassifier, make_fedads_like  # noqa: E402
from ray_vfl.splitnn.unaligned.synthesis import UnalignedOptions  # noqa: E402

LABEL, OTHER = "bank", "shop"
EPOCHS, BATCH = 3, 128


@pytest.fixture(scope="module")
def fedhssl_run(runtime, unaligned_at_both):
    """Both parties keep rows outside the intersection (in-process PSI); FedHSSL pretrains, then VanillaVFL."""
    aligned, n_bank = unaligned_at_both
    clf = SplitNNClassifier(unaligned="fedhssl", ssl_epochs=EPOCHS, epochs=1, batch_size=BATCH, runtime=runtime,
                            nonlabel_hidden=(16, 8), label_hidden=(16, 12)).fit(aligned)
    return clf, aligned, n_bank, list(clf.comm_stats_.records)  # (predictions add records later)


def test_fedhssl_pretrains_on_each_partys_rows_and_learns(fedhssl_run):
    clf, aligned, n_label_rows, _ = fedhssl_run
    rep = clf.unaligned_report_
    assert rep["method"] == "fedhssl"
    assert rep["hssl_rows"] == n_label_rows  # the label party's aligned + unaligned rows, labels unused
    other = rep["nonlabel_ssl"][OTHER]
    assert other["hssl_rows"] == aligned.n_rows + 300  # the shop's aligned rows + those PSI left out
    for r in (rep, other):
        assert len(r["hssl_cross_loss"]) == len(r["hssl_local_loss"]) == EPOCHS
        assert -1.0 <= r["hssl_cross_loss"][-1] < min(r["hssl_cross_loss"][0], 0)  # negative cosine falls
        assert -1.0 <= r["hssl_local_loss"][-1] < min(r["hssl_local_loss"][0], 0)
        assert r["ssl_output_std"] > 0.3 / np.sqrt(8)  # no collapse: spread rows give 1/sqrt(width)
    # the partial model aggregation left the same local upper layers and heads at both parties
    assert rep["hssl_shared_sha256"] == other["hssl_shared_sha256"]
    assert rep["federated_steps"] == rep["steps"] == -(-aligned.n_rows // BATCH)
    proba = clf.predict_proba(aligned)
    assert proba.shape == (aligned.n_rows, 2) and np.isfinite(proba).all()


def test_fedhssl_messages_match_its_view_table(fedhssl_run):
    """Projections both ways per cross-party batch, a key each way once, per epoch a nonce, one masked share
    (uint64) and the mean; then VanillaVFL's messages, each embedding twice VanillaVFL's width."""
    _, aligned, _, records = fedhssl_run
    batches = -(-aligned.n_rows // BATCH)
    count = {}
    for r in records:
        count[(r.kind, r.sender, r.receiver)] = count.get((r.kind, r.sender, r.receiver), 0) + 1
    assert count == {
        ("hssl_mask_key", LABEL, OTHER): 1, ("hssl_mask_key", OTHER, LABEL): 1,
        ("ssl_projection", LABEL, OTHER): EPOCHS * batches, ("ssl_projection", OTHER, LABEL): EPOCHS * batches,
        ("hssl_nonce", LABEL, OTHER): EPOCHS, ("hssl_share", OTHER, LABEL): EPOCHS,
        ("hssl_average", LABEL, OTHER): EPOCHS,
        ("embedding", OTHER, LABEL): 2 * batches, ("embedding_grad", LABEL, OTHER): 2 * batches,
    }
    shapes = {r.kind: r.shape for r in records}
    assert shapes["hssl_share"][1] == "uint64"
    assert shapes["ssl_projection"][2][1] == 8  # the common width W: the non-label parties' embedding width
    assert shapes["embedding"][2][1] == 16  # cross-party and local encoders side by side


def test_fedhssl_save_and_load_predict_the_same(fedhssl_run, tmp_path, runtime):
    clf, aligned, _, _ = fedhssl_run
    clf.save_model(str(tmp_path / "m"))
    again = SplitNNClassifier.load_model(str(tmp_path / "m"), runtime)
    assert np.allclose(again.predict_proba(aligned), clf.predict_proba(aligned))


def test_fedhssl_options_checked():
    assert not UnalignedOptions(method="fedhssl").refreshes
    with pytest.raises(ConfigError, match="nothing to refit for method='fedhssl'"):
        UnalignedOptions(method="fedhssl", refresh=True)
    with pytest.raises(ConfigError, match="ssl_guidance must be below 1"):
        UnalignedOptions(method="fedhssl", ssl_guidance=1.0)
    with pytest.raises(ConfigError, match="ssl_guidance"):
        UnalignedOptions(method="fedhssl", ssl_guidance=-0.1)


def test_fedhssl_with_two_nonlabel_parties_averages_over_all_three(runtime):
    """Three parties: every pair agrees a mask key, the label party averages three vectors; all end equal."""
    data = make_fedads_like(2_000, aligned_fraction=0.5, seed=5, label_party=LABEL, nonlabel_party=OTHER)
    shop = data.train.features[OTHER]
    half = list(shop.columns[: len(shop.columns) // 2])
    rest = [c for c in shop.columns if c not in half]
    frames = {LABEL: data.train.features[LABEL], OTHER: shop[half], "party2": shop[rest]}
    cats = {LABEL: data.train.categorical[LABEL], OTHER: [c for c in data.train.categorical[OTHER] if c in half],
            "party2": [c for c in data.train.categorical[OTHER] if c in rest]}
    train = VerticalDataset(frames, data.train.ids, data.train.label, LABEL, cats)
    clf = SplitNNClassifier(unaligned="fedhssl", ssl_epochs=2, epochs=1, batch_size=BATCH, runtime=runtime,
                            nonlabel_hidden=(16, 8), label_hidden=(16, 12)).fit(train, data.label_only)
    rep = clf.unaligned_report_
    shas = {rep["hssl_shared_sha256"]} | {r["hssl_shared_sha256"] for r in rep["nonlabel_ssl"].values()}
    assert len(shas) == 1 and set(rep["nonlabel_ssl"]) == {OTHER, "party2"}
    pairs = {(r.sender, r.receiver) for r in clf.comm_stats_.records if r.kind == "hssl_mask_key"}
    parties = {LABEL, OTHER, "party2"}
    assert pairs == {(a, b) for a in parties for b in parties if a != b}
    shares = sorted(r.sender for r in clf.comm_stats_.records if r.kind == "hssl_share")
    assert shares == sorted([OTHER, "party2"] * 2)  # one share per non-label party per epoch, to the label party
    assert np.isfinite(clf.predict_proba(train)).all()
