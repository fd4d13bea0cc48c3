"""SecureBoost across organisations against one cluster, on one machine: time, bytes, round-trip latency.

Two Ray clusters on loopback: this process's (the bank, coordinating) and the shop's, started by its own
``python -m ray_vfl.serve`` process (own RAY_TMPDIR and HOME), joined by gateways over mutual TLS. The
same credit rows (the bank: labels and the first 11 features; the shop: the other 12, opened from its own
Parquet file and aligned by PSI) are trained on alternately by one cluster (both parties' actors in this
process's Ray) and across the two clusters; the figures are each mode's ``train`` wall time and the bytes its
parties' mailboxes sent. Then one split-NN epoch per mode, alternating the same way (the bank's labels and top
model, the shop a feature party: one ``step`` per batch through the gateways), with equal seeds: its wall time,
bytes, and whether both modes predict the same. Then an empty call (a probe, ``alive``) one at a time: to the shop's actor in this
Ray, and to the shop's role through the gateways.

    python benchmarks/federation.py                                   # plain, 10 trees, all 30,000 rows
    python benchmarks/federation.py --backend paillier --trees 3      # Paillier 2048
    python benchmarks/federation.py --json benchmarks/results/federation.json

Both clusters share this machine's CPUs (the shop's Ray is given ``--shop-cpus``): the ratio measures the
gateways' cost (gRPC, TLS, the typed wire, one more hop through the gateway-client actor), not a WAN.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import ray

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ray_vfl import BoostConfig, Runtime, VerticalDataset  # noqa: E402
from ray_vfl.data.bundled import load_credit  # noqa: E402
from ray_vfl.runtime.federation.certs import write_test_certificates  # noqa: E402
from ray_vfl.runtime.federation.coordinator import FederatedRuntime  # noqa: E402
from ray_vfl.secureboost.protocol import train  # noqa: E402
from ray_vfl.splitnn import SplitNNConfig  # noqa: E402
from ray_vfl.splitnn.protocol import train as train_network  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _files(folder: str, rows: int) -> tuple[str, str, str]:
    frame = load_credit().iloc[:rows].reset_index(drop=True)
    label = frame.columns[-1]
    features = [c for c in frame.columns if c not in ("ID", label)]
    bank, shop = os.path.join(folder, "bank.csv"), os.path.join(folder, "shop.parquet")
    frame[["ID"] + features[:11] + [label]].to_csv(bank, index=False)
    frame[["ID"] + features[11:]].sample(frac=1.0, random_state=0).to_parquet(shop, index=False)
    return bank, shop, label


def _start_shop(folder: str, fed: str, certs: dict, shop_path: str, cpus: int) -> tuple[subprocess.Popen, list[str]]:
    ray_tmp = tempfile.mkdtemp(prefix="rb", dir="/tmp")
    home = tempfile.mkdtemp(prefix="vflshop")
    with open(os.path.join(home, "ray_bootstrap_config.yaml"), "w", encoding="utf-8") as fh:
        fh.write("provider: {type: local}\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=ray_tmp, HOME=home, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", PYTHONPATH=REPO)
    log = os.path.join(folder, "serve.log")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ray_vfl.serve", "--federation", fed, "--party", "shop",
                                 "--data", shop_path, "--id-column", "ID", "--cert", certs["cert"], "--key", certs["key"],
                                 "--ca", certs["ca"], "--num-cpus", str(cpus)], cwd=folder, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while b"serving party 'shop'" not in open(log, "rb").read():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the shop's serve process did not start:\n{open(log).read()[-3000:]}")
        time.sleep(0.2)
    return proc, [ray_tmp, home]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # what its own session left (its Ray's processes)
    except ProcessLookupError:
        pass
    proc.wait(10)


def _latency_ms(handle, n: int) -> float:
    ray.get(handle.alive.remote(), timeout=60)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        ray.get(handle.alive.remote(), timeout=60)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def _ratios(runs: list[dict]) -> dict:
    """Across / one cluster, medians of each mode's warm runs (its first run also starts its actors; with one
    run per mode, that run)."""
    modes = ("one cluster", "across")
    warm = {m: [x for x in runs if x["mode"] == m][1:] or [x for x in runs if x["mode"] == m] for m in modes}
    med = {m: statistics.median(x["train_s"] for x in warm[m]) for m in modes}
    byt = {m: statistics.median(x["bytes"] for x in warm[m]) for m in modes}
    return {"train_ratio": round(med["across"] / med["one cluster"], 3),
            "bytes_ratio": round(byt["across"] / byt["one cluster"], 4)}


def _splitnn_runs(runtimes: dict, data: dict, args) -> dict:
    """One split-NN training of ``--splitnn-epochs`` per mode and repeat, alternating: seconds, bytes, and
    whether the two modes' predictions are equal (equal seeds: they must be)."""
    config = SplitNNConfig(epochs=args.splitnn_epochs, batch_size=args.batch_size, seed=7)
    runs, proba = [], {}
    for r in range(args.repeats):
        for mode in ("one cluster", "across") if r % 2 == 0 else ("across", "one cluster"):
            start = time.perf_counter()
            model = train_network(runtimes[mode], data[mode], config)
            seconds = time.perf_counter() - start
            runs.append({"mode": mode, "train_s": round(seconds, 3), "bytes": int(model.comm_stats.total_bytes)})
            proba[mode] = model.predict_proba(data[mode])
            print(f"{mode:12s} split NN {args.splitnn_epochs} epoch(s) {seconds:7.2f} s  "
                  f"{model.comm_stats.total_mb:8.2f} MB", flush=True)
    return {"epochs": args.splitnn_epochs, "batch_size": args.batch_size, "runs": runs, **_ratios(runs),
            "same_predictions": bool(np.array_equal(proba["one cluster"], proba["across"]))}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=30_000, help="credit rows (both parties hold all of them)")
    p.add_argument("--trees", type=int, default=10)
    p.add_argument("--depth", type=int, default=5)
    p.add_argument("--backend", default="plain", help="plain or paillier")
    p.add_argument("--key-bits", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=3, help="runs of each mode, alternating (the first of each mode, "
                   "which starts its actors, is left out of the ratios)")
    p.add_argument("--splitnn-epochs", type=int, default=1, help="split-NN epochs per run (0: none)")
    p.add_argument("--batch-size", type=int, default=256, help="split-NN rows per batch (one step per batch)")
    p.add_argument("--calls", type=int, default=200, help="empty calls timed per mode")
    p.add_argument("--shop-cpus", type=int, default=2, help="CPUs of the shop's own Ray")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    folder = tempfile.mkdtemp(prefix="vflfed")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    own_tmp = None
    if "RAY_TMPDIR" not in os.environ:
        own_tmp = os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rb", dir="/tmp")
    certs = write_test_certificates(os.path.join(folder, "certs"), ["bank", "shop"])
    bank_path, shop_path, label = _files(folder, args.rows)
    fed = os.path.join(folder, "federation.yaml")
    with open(fed, "w", encoding="utf-8") as fh:
        fh.write(f"parties:\n  bank: {{gateway: '127.0.0.1:{_free_port()}'}}\n  shop: {{gateway: '127.0.0.1:{_free_port()}'}}\n")
    proc, scratch = _start_shop(folder, fed, certs["shop"], shop_path, args.shop_cpus)
    one = Runtime(address="local", timeout_s=3600)
    across = FederatedRuntime(fed, "bank", certs["bank"], timeout_s=3600)
    config = BoostConfig(n_trees=args.trees, max_depth=args.depth, backend=args.backend, key_bits=args.key_bits)
    result = {"rows": args.rows, "trees": args.trees, "depth": args.depth, "backend": args.backend,
              "key_bits": None if args.backend == "plain" else args.key_bits, "shop_cpus": args.shop_cpus,
              "cpus": os.cpu_count(), "runs": []}
    try:
        one.connect(["bank", "shop"])
        data = {"one cluster": VerticalDataset.from_files({"bank": bank_path, "shop": shop_path}, id_column="ID",
                                                          label=label, align="psi", runtime=one),
                "across": VerticalDataset.from_files({"bank": bank_path, "shop": "shop.parquet"}, id_column="ID",
                                                     label=label, align="psi", runtime=across)}
        runtimes = {"one cluster": one, "across": across}
        margins = {}
        for r in range(args.repeats):
            for mode in ("one cluster", "across") if r % 2 == 0 else ("across", "one cluster"):
                start = time.perf_counter()
                model = train(runtimes[mode], data[mode], config)
                seconds = time.perf_counter() - start
                result["runs"].append({"mode": mode, "train_s": round(seconds, 3),
                                       "bytes": int(model.comm_stats.total_bytes)})
                margins[mode] = model.predict_margin(data[mode])
                print(f"{mode:12s} train {seconds:7.2f} s  {model.comm_stats.total_mb:8.2f} MB", flush=True)
        result["same_margins"] = bool(np.array_equal(margins["one cluster"], margins["across"]))
        if args.splitnn_epochs:
            result["splitnn"] = _splitnn_runs(runtimes, data, args)
        result["empty_call_ms"] = {"one cluster": round(_latency_ms(one.actor("shop"), args.calls), 3),
                                   "across": round(_latency_ms(across.actor("shop"), args.calls), 3)}
        result.update(_ratios(result["runs"]))
        print(f"across / one cluster: train x{result['train_ratio']}, bytes x{result['bytes_ratio']}, same margins "
              f"{result['same_margins']}; empty call {result['empty_call_ms']['across']} ms vs "
              f"{result['empty_call_ms']['one cluster']} ms")
        if "splitnn" in result:
            nn = result["splitnn"]
            print(f"split NN across / one cluster: train x{nn['train_ratio']}, bytes x{nn['bytes_ratio']}, "
                  f"same predictions {nn['same_predictions']}")
    finally:
        across.shutdown()
        one.shutdown()
        _stop(proc)
        for path in scratch + [folder] + ([own_tmp] if own_tmp else []):
            shutil.rmtree(path, ignore_errors=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2)
    return result


if __name__ == "__main__":
    main()
