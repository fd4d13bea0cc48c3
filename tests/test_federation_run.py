"""Across organisations, end to end on one machine (issue 39): three Ray clusters on loopback, the bank's
(this test session's), the shop's and the mall's, each of the last two started by its own
``python -m ray_vfl.serve`` process with its own RAY_TMPDIR and HOME; the parties joined by gateways over
mutual TLS.

Two serve processes and one coordinator runtime for the module, several checks in order: ``jobs/train.py
--federation`` runs end to end with the bank and the shop (two clusters, its own runtime); PSI over the three
aligns the 240 IDs they share; SecureBoost with two passive parties grows the trees, margins and message bytes
of the one-cluster run on the same files; split NN with two feature parties learns the one-cluster weights; PIVODL
with the three as clients (the shop and the mall messaging each other through their gateways) grows the one-cluster
trees; last, the shop's serve process killed by its PID ends the next call with PartyFailedError naming "shop"
within seconds."""

from __future__ import annotations

import dataclasses
import functools
import os
import random
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
from ray_vfl.pivodl import PIVODLConfig
from ray_vfl.pivodl import train as train_pivodl
from ray_vfl.runtime.federation.certs import write_test_certificates
from ray_vfl.runtime.federation.coordinator import FederatedRuntime
from ray_vfl.secureboost.protocol import train
from ray_vfl.splitnn import InProcessSplitNet, SplitNNConfig
from ray_vfl.splitnn.protocol import train as train_network

_START_S = 150.0  # a serve process: Python, imports and its own Ray (up to 3 starts of 30 s on a busy machine)


def _free_port() -> int:
    """A free port between Ray's worker ports (10002-19999) and the kernel's ephemeral ones (32768 up), which
    the Ray processes starting beside the serve processes take at random: the gateway's stays free until bound."""
    rng = random.SystemRandom()
    while True:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", rng.randrange(20_000, 32_000)))
            except OSError:
                continue
            return s.getsockname()[1]


def _files(folder: Path) -> dict:
    """Two parties: the bank's 300 credit rows (IDs, 11 features, label) and the shop's other 12 features for 260
    of those IDs plus 20 IDs the bank does not have, shuffled. Three parties: the bank's IDs, 8 features and the
    label (``bank3.csv``), the shop's next 8 features for its same IDs (``shop3.parquet``), the mall's last 7 for
    250 of the bank's IDs (20 to 269) plus 15 of its own (``mall.parquet``): 240 IDs common to all three."""
    frame = load_credit().iloc[:300].reset_index(drop=True)
    label = frame.columns[-1]
    features = [c for c in frame.columns if c not in ("ID", label)]

    def shuffled_with_extra(rows: pd.DataFrame, extra: int, seed: int) -> pd.DataFrame:
        more = rows.iloc[:extra].assign(ID=rows["ID"].iloc[:extra] + 10**6 * (seed + 1))
        return pd.concat([rows, more]).sample(frac=1.0, random_state=seed)

    shop_rows = shuffled_with_extra(frame.iloc[:260], 20, 0)
    mall_rows = shuffled_with_extra(frame.iloc[20:270], 15, 1)
    paths = {name: folder / name for name in ("bank.csv", "shop.parquet", "bank3.csv", "shop3.parquet", "mall.parquet")}
    frame[["ID"] + features[:11] + [label]].to_csv(paths["bank.csv"], index=False)
    shop_rows[["ID"] + features[11:]].to_parquet(paths["shop.parquet"], index=False)
    frame[["ID"] + features[:8] + [label]].to_csv(paths["bank3.csv"], index=False)
    shop_rows[["ID"] + features[8:16]].to_parquet(paths["shop3.parquet"], index=False)
    mall_rows[["ID"] + features[16:]].to_parquet(paths["mall.parquet"], index=False)
    return {"paths": paths, "label": label}


def _same_trees(ours, theirs) -> None:
    assert len(ours) == len(theirs) > 0
    for a, b in zip(ours, theirs):
        for f in dataclasses.fields(a):
            np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name), err_msg=f.name)


def _aligned_in_memory(paths: dict[str, Path], label: str) -> VerticalDataset:
    """The rows PSI aligns (IDs common to every party, ascending), held in memory: the one-cluster reference."""
    frames = {p: pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path) for p, path in paths.items()}
    common = np.sort(functools.reduce(np.intersect1d, [f["ID"] for f in frames.values()]))
    frames = {p: f.set_index("ID").loc[common].reset_index() for p, f in frames.items()}
    return VerticalDataset.from_frames(frames, id_column="ID", label=label)


def _wait_for_serving(c: dict, party: str = "shop") -> None:
    """Until ``party``'s serve process says it serves (a start of its Ray that misses Ray's 30 s is made
    again by the process itself: ``ray_vfl.runtime.local_ray.START_ATTEMPTS``)."""
    deadline = time.monotonic() + _START_S
    served = c["served"][party]
    while f"serving party '{party}'".encode() not in served["log"].read_bytes():
        if served["proc"].poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{party}'s serve process did not start:\n{served['log'].read_text()[-3000:]}")
        time.sleep(0.2)


def _start_the_mall(c: dict) -> None:
    """The mall's serve process, started once the shop serves: three Rays starting at once on 2 cores can miss
    Ray's fixed 30 s start-up limit. It starts while the train job runs."""
    _wait_for_serving(c, "shop")
    if "mall" not in c["served"]:
        c["served"]["mall"] = _start_serving("mall", [c["paths"]["mall.parquet"]], c)


def _start_serving(party: str, data: list[Path], c: dict) -> dict:
    """``python -m ray_vfl.serve`` for ``party`` in its own session, with its own RAY_TMPDIR and HOME."""
    ray_tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # short: Ray's socket paths must stay under 107 characters
    home = tempfile.mkdtemp(prefix=f"vfl{party}")
    Path(home, "ray_bootstrap_config.yaml").write_text("provider: {type: local}\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=ray_tmp, HOME=home, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled",
               PYTHONPATH=str(REPO))
    cert = c["certs"][party]
    log_path = c["folder"] / f"serve-{party}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ray_vfl.serve", "--federation", c["fed"], "--party", party,
             "--data", *map(str, data), "--id-column", "ID", "--cert", cert["cert"], "--key", cert["key"],
             "--ca", cert["ca"], "--num-cpus", "1", "--timeout", "60"],
            cwd=str(c["folder"]), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return {"proc": proc, "log": log_path, "ray_tmp": ray_tmp, "home": home}


def _stop_serving(served: dict) -> None:
    """The serve process and its Ray, killed as one process group (its own session): what it started goes
    with it, in well under the seconds its graceful stop (SIGTERM, its Ray's shutdown) takes."""
    proc = served["proc"]
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)
    shutil.rmtree(served["ray_tmp"], ignore_errors=True)
    shutil.rmtree(served["home"], ignore_errors=True)


@pytest.fixture(scope="module")
def clusters(request, tmp_path_factory):
    """The shop's serve process, started beside this session's Ray (the mall's: ``_start_the_mall``)."""
    folder = tmp_path_factory.mktemp("federation")
    certs = write_test_certificates(str(folder / "certs"), ["bank", "shop", "mall"])
    files = _files(folder)
    fed_path = folder / "federation.yaml"
    fed_path.write_text("parties:\n" + "".join(f"  {p}: {{gateway: '127.0.0.1:{_free_port()}'}}\n"
                                                for p in ("bank", "shop", "mall")))
    c = {"fed": str(fed_path), "certs": certs, "folder": folder, "label": files["label"], "paths": files["paths"],
         "served": {}}
    paths = files["paths"]
    try:
        c["served"]["shop"] = _start_serving("shop", [paths["shop.parquet"], paths["shop3.parquet"]], c)
        request.getfixturevalue("ray_session")  # the bank's cluster, while the shop's starts
        yield c
    finally:
        for served in c["served"].values():
            _stop_serving(served)


def test_the_train_job_runs_across_organisations(clusters, reference):
    """The job's own runtime (a session of its own at the shop, beside the module's runtime) stops the roles it
    started at the shop when it ends; the module's runtime's roles are its own and keep running."""
    c = clusters
    _start_the_mall(c)
    bank = c["certs"]["bank"]
    report = load_job("train").main(["--federation", c["fed"], "--party", "bank", "--cert", bank["cert"],
                                     "--key", bank["key"], "--ca", bank["ca"],
                                     "--party-files", f"bank={c['paths']['bank.csv']}", "shop=shop.parquet",
                                     "--id-column", "ID", "--label", c["label"], "--backend", "plain", "--trees", "2",
                                     "--depth", "3", "--quiet", "--test-size", "0.3"])
    assert report["psi"]["aligned_rows"] == 260 and report["trees"] == 2 and 0.0 <= report["test_auc"] <= 1.0


@pytest.fixture(scope="module")
def reference(clusters, runtime):
    """The one-cluster run of the three parties on the rows PSI aligns (their actors in this session's Ray),
    trained while the serve processes start: its trees, margins and bytes."""
    c = clusters
    paths = c["paths"]
    local = _aligned_in_memory({"bank": paths["bank3.csv"], "shop": paths["shop3.parquet"],
                                "mall": paths["mall.parquet"]}, c["label"])
    model = train(runtime, local, _CONFIG)
    one = {"local": local, "trees": model.trees(), "margins": model.predict_margin(local),
           "bytes": model.comm_stats.total_bytes}
    pivodl = train_pivodl(runtime, local, _PIVODL)  # the same parties' actors, now PIVODL clients
    one["pivodl"] = _pivodl_outcome(runtime, pivodl, local)
    return one


@pytest.fixture(scope="module")
def federated(clusters, reference):
    """The bank's FederatedRuntime joined to the shop's and the mall's serve processes and the data PSI aligns
    over the three, made once for the module, with the one-cluster reference."""
    c = clusters
    _start_the_mall(c)
    _wait_for_serving(c, "mall")
    rt = FederatedRuntime(c["fed"], "bank", c["certs"]["bank"], timeout_s=60)
    try:
        data = VerticalDataset.from_files({"bank": str(c["paths"]["bank3.csv"]), "shop": "shop3.parquet",
                                           "mall": "mall.parquet"}, id_column="ID", label=c["label"], align="psi",
                                          runtime=rt)
        yield {"rt": rt, "data": data, "state": {}, "one": reference}
    finally:
        rt.shutdown()


_CONFIG = BoostConfig(n_trees=2, max_depth=3, max_bin=16, backend="plain")
_PIVODL = PIVODLConfig(n_trees=2, max_depth=3, max_bin=16, backend="plain", instance_threshold=10)


def _pivodl_outcome(rt, model, data) -> dict:
    """What the bank's side of a PIVODL run knows, in a form that does not depend on the run's random draws
    (split clients, record numbers): per tree every split's source and children, the features, bins and
    thresholds of the bank's own splits (its lookup table), every released leaf weight, and the margins."""
    part = rt.get([("bank", rt.actor("bank").model_part.remote())], "bank's part")[0]
    released = rt.get([("bank", rt.actor("bank").released_weights.remote())], "weights")[0]
    trees = []
    for tree in model.skeleton():
        shape = {}
        for node, entry in sorted(tree.items()):
            if entry[0] == "split":
                _, source, record, left, right = entry
                shape[node] = (source, left, right, tuple(part["lookup"][record]) if source == "bank" else None)
            else:
                shape[node] = "leaf"
        trees.append(shape)
    return {"trees": trees, "released": released, "margins": model.predict_margin(data)}


def test_psi_aligns_the_ids_common_to_three_organisations(federated):
    data, local = federated["data"], federated["one"]["local"]
    assert data.n_rows == local.n_rows == 240 and data.unaligned == {"bank": 60, "shop": 40, "mall": 25}


def test_secureboost_across_three_organisations_grows_the_one_cluster_model(federated):
    """SecureBoost with the bank active and two passive parties, each on its own Ray: the one-cluster trees
    split for split, the same margins and message bytes."""
    f, one = federated, federated["one"]
    model = train(f["rt"], f["data"], _CONFIG)
    _same_trees(model.trees(), one["trees"])
    np.testing.assert_array_equal(model.predict_margin(f["data"]), one["margins"])
    assert model.comm_stats.total_bytes == one["bytes"] > 0
    assert set(np.concatenate([t.owner for t in model.trees()])) >= {1, 2}  # both serving parties' splits
    f["state"]["predict"] = lambda: model.predict_margin(f["data"])


_NET = SplitNNConfig(nonlabel_hidden=(8, 4), label_hidden=(8,), embedding_dim=2, n_bins=8, batch_size=64, epochs=1,
                     pipeline_depth=2, seed=3)


def test_split_nn_across_three_organisations_learns_the_one_cluster_weights(federated):
    """Split NN with the bank holding the labels and the top model, the shop and the mall each a feature party
    on its own Ray (a ``step`` per batch through the gateways: its embedding out, its gradient in): with equal
    seeds, the losses, label-party weights and predictions of the network trained in one process on the same
    rows (which the one-cluster Ray run equals, tests/test_splitnn.py), bit for bit."""
    import torch

    f, one = federated, federated["one"]
    threads = torch.get_num_threads()  # process-wide: one thread, as in a party actor; restored after
    try:
        twin = InProcessSplitNet(_NET, num_threads=1).fit(one["local"])
        expected = twin.predict_proba(one["local"])
    finally:
        torch.set_num_threads(threads)
    model = train_network(f["rt"], f["data"], _NET)
    assert model.losses == twin.losses_ and len(model.losses) == 4
    label = model.label_party
    weights = f["rt"].get([(label, f["rt"].actor(label).state.remote())], "weights")[0]
    reference = twin.net_.state_dict()
    assert {"top.linear.weight", "label_bottom.embedding.weight"} <= set(weights) <= set(reference)
    for name, value in weights.items():
        np.testing.assert_array_equal(value, reference[name].numpy(), err_msg=name)
    np.testing.assert_array_equal(model.predict_proba(f["data"]), expected)
    assert model.comm_stats.total_bytes > 0
    f["state"]["predict"] = lambda: model.predict_proba(f["data"])


def test_pivodl_across_three_organisations_grows_the_one_cluster_model(federated):
    """PIVODL with the bank, the shop and the mall as clients, each on its own Ray (the bank holding the labels):
    the clients' messages for each other go straight between the serving parties' gateways (the bank hands
    on tokens, never their messages), each serving party fetching the other's mailbox key from its gateway.
    The trees of the one-cluster run on the same rows split for split (sources, children, the bank's
    thresholds), the same released leaf weights and secure-prediction margins (to their fixed-point grid)."""
    f, one = federated, federated["one"]["pivodl"]
    model = train_pivodl(f["rt"], f["data"], _PIVODL)
    ours = _pivodl_outcome(f["rt"], model, f["data"])
    assert ours["trees"] == one["trees"] and len(ours["trees"]) == 2
    sources = {entry[0] for tree in ours["trees"] for entry in tree.values() if entry != "leaf"}
    assert {"shop", "mall"} <= sources  # both serving parties' splits
    assert ours["released"] == one["released"]
    # each client adds its held leaves' weights into its share on a 2**-32 grid (secure_sum.encode_ring), and
    # which client holds a leaf is drawn per run: the margins agree to three clients' rounding, twice
    np.testing.assert_allclose(ours["margins"], one["margins"], rtol=0, atol=3 * 2.0**-32)
    sent = {(r.sender, r.receiver) for r in model.comm_stats.records}
    assert {("shop", "mall"), ("mall", "shop")} <= sent  # the serving parties' messages for each other
    f["state"]["predict"] = lambda: model.predict_margin(f["data"])


def test_killing_the_serving_partys_process_names_it_within_the_timeout(clusters, federated):
    """Last in the module: the shop's serve process killed by its PID (SIGKILL: no goodbye) ends the
    coordinator's next call with PartyFailedError naming "shop", in seconds, not the 60 s timeout."""
    f, proc = federated, clusters["served"]["shop"]["proc"]
    predict = f["state"].get("predict")
    if predict is None:  # this test alone
        model = train(f["rt"], f["data"], _CONFIG)
        predict = lambda: model.predict_margin(f["data"])  # noqa: E731
    assert np.shape(predict()) == (240,)  # the last model's roles at the shop answer until its process is killed
    os.kill(proc.pid, signal.SIGKILL)  # the shop's organisation goes away
    proc.wait(10)
    start = time.monotonic()
    with pytest.raises(PartyFailedError) as failed:
        predict()
    assert failed.value.party == "shop" and time.monotonic() - start < 15, failed.value
