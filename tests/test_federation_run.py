"""Across organisations, end to end on one machine (issue 39): two Ray clusters on loopback, the bank's
(this test session's) and the shop's, started by the shop's own ``python -m ray_vfl.serve`` process with
its own RAY_TMPDIR and HOME; the parties joined by gateways over mutual TLS.

One serve process and one coordinator runtime for the module, several checks in order: PSI aligns 260 of
the bank's 300 IDs (after ``jobs/train.py --federation`` ran end to end with its own runtime); SecureBoost across
the two clusters grows the trees, margins and message bytes of the one-cluster run on the same files; last, the shop's serve
process killed by its PID ends the next call with PartyFailedError naming "shop" within seconds."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import REPO, load_job
from ray_vfl import BoostConfig, PartyFailedError, VerticalDataset
from ray_vfl.data.bundled import load_credit
from ray_vfl.runtime.federation.certs import write_test_certificates
from ray_vfl.runtime.federation.coordinator import FederatedRuntime
from ray_vfl.secureboost.protocol import train

_START_S = 90.0  # the shop's serve process: Python, imports and its own Ray


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _files(folder: Path) -> tuple[Path, Path, str]:
    """The bank's 300 credit rows (IDs, 11 features, label) and the shop's other 12 features for 260 of those
    IDs plus 20 IDs the bank does not have, shuffled."""
    frame = load_credit().iloc[:300].reset_index(drop=True)
    label = frame.columns[-1]
    features = [c for c in frame.columns if c not in ("ID", label)]
    bank = frame[["ID"] + features[:11] + [label]]
    shop = frame[["ID"] + features[11:]].iloc[:260]
    extra = shop.iloc[:20].assign(ID=shop["ID"].iloc[:20] + 10**6)
    shop = pd.concat([shop, extra]).sample(frac=1.0, random_state=0)
    bank_path, shop_path = folder / "bank.csv", folder / "shop.parquet"
    bank.to_csv(bank_path, index=False)
    shop.to_parquet(shop_path, index=False)
    return bank_path, shop_path, label


def _same_trees(ours, theirs) -> None:
    assert len(ours) == len(theirs) > 0
    for a, b in zip(ours, theirs):
        for f in dataclasses.fields(a):
            np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name), err_msg=f.name)


def _aligned_in_memory(bank_path: Path, shop_path: Path, label: str) -> VerticalDataset:
    """The rows PSI aligns (common IDs, ascending), held in memory: the one-cluster reference."""
    bank, shop = pd.read_csv(bank_path), pd.read_parquet(shop_path)
    common = np.sort(np.intersect1d(bank["ID"], shop["ID"]))
    bank = bank.set_index("ID").loc[common].reset_index()
    shop = shop.set_index("ID").loc[common].reset_index()
    return VerticalDataset.from_frames({"bank": bank, "shop": shop}, id_column="ID", label=label)


def _wait_for_serving(c: dict) -> None:
    deadline = time.monotonic() + _START_S
    while b"serving party 'shop'" not in c["log"].read_bytes():
        if c["proc"].poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the shop's serve process did not start:\n{c['log'].read_text()[-3000:]}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def two_clusters(request, tmp_path_factory):
    """The shop's serve process, started before this session's Ray (they start side by side)."""
    folder = tmp_path_factory.mktemp("federation")
    certs = write_test_certificates(str(folder / "certs"), ["bank", "shop"])
    bank_path, shop_path, label = _files(folder)
    fed_path = folder / "federation.yaml"
    fed_path.write_text(f"parties:\n  bank: {{gateway: '127.0.0.1:{_free_port()}'}}\n"
                        f"  shop: {{gateway: '127.0.0.1:{_free_port()}'}}\n")
    ray_tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # short: Ray's socket paths must stay under 107 characters
    home = tempfile.mkdtemp(prefix="vflshop")
    Path(home, "ray_bootstrap_config.yaml").write_text("provider: {type: local}\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=ray_tmp, HOME=home, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled",
               PYTHONPATH=str(REPO))
    shop = certs["shop"]
    log_path = folder / "serve.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ray_vfl.serve", "--federation", str(fed_path), "--party", "shop",
             "--data", str(shop_path), "--id-column", "ID", "--cert", shop["cert"], "--key", shop["key"],
             "--ca", shop["ca"], "--num-cpus", "1", "--timeout", "60"],
            cwd=str(folder), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        request.getfixturevalue("ray_session")  # the bank's cluster, while the shop's starts
        yield {"fed": str(fed_path), "certs": certs, "bank": bank_path, "shop": shop_path, "label": label,
               "proc": proc, "folder": folder, "log": log_path}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        try:  # whatever the serve process left in its own session (its Ray's processes after a SIGKILL)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)
        shutil.rmtree(ray_tmp, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def test_the_train_job_runs_across_organisations(two_clusters, reference):
    """The job's own runtime (a session of its own at the shop, beside the module's runtime) stops the roles it
    started at the shop when it ends; the module's runtime's roles are its own and keep running."""
    c = two_clusters
    _wait_for_serving(c)
    bank = c["certs"]["bank"]
    report = load_job("train").main(["--federation", c["fed"], "--party", "bank", "--cert", bank["cert"],
                                     "--key", bank["key"], "--ca", bank["ca"],
                                     "--party-files", f"bank={c['bank']}", "shop=shop.parquet", "--id-column", "ID",
                                     "--label", c["label"], "--backend", "plain", "--trees", "2", "--depth", "3",
                                     "--quiet", "--test-size", "0.3"])
    assert report["psi"]["aligned_rows"] == 260 and report["trees"] == 2 and 0.0 <= report["test_auc"] <= 1.0


@pytest.fixture(scope="module")
def reference(two_clusters, runtime):
    """The one-cluster run on the rows PSI aligns (both parties' actors in this session's Ray), trained while the
    shop's serve process starts."""
    c = two_clusters
    local = _aligned_in_memory(c["bank"], c["shop"], c["label"])
    return local, train(runtime, local, _CONFIG)


@pytest.fixture(scope="module")
def federated(two_clusters, reference):
    """The bank's FederatedRuntime joined to the shop's serve process and the PSI-aligned data, made once for
    the module, with the one-cluster reference."""
    c = two_clusters
    local, one = reference
    _wait_for_serving(c)
    rt = FederatedRuntime(c["fed"], "bank", c["certs"]["bank"], timeout_s=60)
    try:
        data = VerticalDataset.from_files({"bank": str(c["bank"]), "shop": "shop.parquet"}, id_column="ID",
                                          label=c["label"], align="psi", runtime=rt)
        yield {"rt": rt, "data": data, "local": local, "one": one, "state": {}}
    finally:
        rt.shutdown()


_CONFIG = BoostConfig(n_trees=2, max_depth=3, max_bin=16, backend="plain")


def test_psi_aligns_the_common_ids_across_organisations(federated):
    data, local = federated["data"], federated["local"]
    assert data.n_rows == local.n_rows == 260 and data.unaligned == {"bank": 40, "shop": 20}


def test_secureboost_across_organisations_grows_the_one_cluster_model(federated):
    f = federated
    model = train(f["rt"], f["data"], _CONFIG)
    _same_trees(model.trees(), f["one"].trees())
    np.testing.assert_array_equal(model.predict_margin(f["data"]), f["one"].predict_margin(f["local"]))
    assert model.comm_stats.total_bytes == f["one"].comm_stats.total_bytes > 0
    f["state"]["model"] = model


def test_killing_the_serving_partys_process_names_it_within_the_timeout(two_clusters, federated):
    """Last in the module: the shop's serve process killed by its PID (SIGKILL: no goodbye) ends the
    coordinator's next call with PartyFailedError naming "shop", in seconds, not the 60 s timeout."""
    c, f = two_clusters, federated
    model = f["state"].get("model") or train(f["rt"], f["data"], _CONFIG)
    assert model.predict_margin(f["data"]).shape == (260,)  # the shop's roles answer until its process is killed
    os.kill(c["proc"].pid, signal.SIGKILL)  # the shop's organisation goes away
    c["proc"].wait(10)
    start = time.monotonic()
    with pytest.raises(PartyFailedError) as failed:
        model.predict_margin(f["data"])
    assert failed.value.party == "shop" and time.monotonic() - start < 15, failed.value
