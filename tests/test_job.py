"""The main job runs under `ray job submit` on a local Ray head bound to loopback, and on a Ray of its own
printing its result line and nothing of Ray's."""

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import load_job

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head():
    """`ray start --head` in its own process group; stopped by that group, never by `ray stop`."""
    temp = tempfile.mkdtemp(prefix="rj", dir="/tmp")
    dash = free_port()
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0",
               RAY_USAGE_STATS_REPORT_URL="http://127.0.0.1:9/")
    env.pop("RAY_ADDRESS", None)
    ray_bin = str(Path(sys.executable).with_name("ray"))
    cmd = [
        ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={free_port()}",
        "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
        f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
        f"--metrics-export-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
        "--num-cpus=2", '--resources={"vfl_party0": 10000, "vfl_party1": 10000}',
        "--disable-usage-stats", f"--temp-dir={temp}",
    ]
    head = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = head.communicate(timeout=120)
        if head.returncode != 0:
            pytest.fail(f"ray start failed:\n{out}")
        yield f"http://127.0.0.1:{dash}", env, ray_bin
    finally:
        try:
            os.killpg(head.pid, signal.SIGTERM)  # every daemon `ray start` left in our process group
            time.sleep(2)
            os.killpg(head.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shutil.rmtree(temp, ignore_errors=True)


def test_train_job_via_ray_job_submit(ray_head, tmp_path):
    address, env, ray_bin = ray_head
    out = tmp_path / "report.json"
    cmd = [
        ray_bin, "job", "submit", "--address", address, "--working-dir", str(REPO),
        "--runtime-env-json", json.dumps({"excludes": [".git", "notebooks"]}), "--",
        "python", "jobs/train.py", "--backend", "plain", "--trees", "3", "--depth", "3", "--quiet", "--json", str(out),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "succeeded" in done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["trees"] == 3 and 0.7 < report["test_auc"] < 0.85 and report["mb_exchanged"] > 0


def test_train_job_prints_its_result_line_and_nothing_of_rays(tmp_path):
    """jobs/train.py starting its own Ray as a user's shell does (RAY_AUTH_MODE unset: Ray's default token
    authentication), with 18 parties: more actor processes than Ray expects on 2 CPUs. It prints its result
    line and its one warning, and nothing of Ray's: no token-authentication notice, no raylet warning, no
    escape code. The line's wall time is the whole process's; a plain backend has no key size."""
    report = tmp_path / "report.json"
    ray_tmp = tempfile.mkdtemp(prefix="rw", dir="/tmp")  # a short RAY_TMPDIR of its own (socket path limit)
    env = dict(os.environ, RAY_TMPDIR=ray_tmp, PYTHONPATH=str(REPO))
    for key in ("RAY_ADDRESS", "RAY_AUTH_MODE"):
        env.pop(key, None)
    cmd = [sys.executable, "jobs/train.py", "--parties", "18", "--backend", "plain", "--trees", "1", "--depth", "2",
           "--quiet", "--json", str(report)]
    try:
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240, check=False)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = json.loads(report.read_text())
    out, err = done.stdout.strip().splitlines(), done.stderr.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("test AUC ") and out[0].endswith("| 18 parties, plain (no encryption)"), out
    assert f"wall time {said['wall_s']:.1f} s for the whole process (fit {said['fit_s']:.1f} s" in out[0]
    assert said["wall_s"] > said["fit_s"] and said["key_bits"] is None
    assert len(err) == 1 and err[0].startswith("warning: backend='plain' encrypts nothing"), err
    assert "\x1b" not in done.stdout + done.stderr


def test_pivodl_job_small(tmp_path):
    """jobs/pivodl.py end to end at a tiny setting (its own local Ray): the CSV files and their columns."""
    ray_tmp = tempfile.mkdtemp(prefix="rp", dir="/tmp")  # a short RAY_TMPDIR of its own (socket path limit)
    env = dict(os.environ, RAY_TMPDIR=ray_tmp, PYTHONPATH=str(REPO))
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "jobs/pivodl.py", "--small", "--datasets", "credit", "energy", "--studies", "clients",
           "epsilon", "--clients", "2", "--epsilons", "none", "4", "--rows", "600", "--out", str(tmp_path)]
    try:
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240, check=False)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with open(tmp_path / "runs.csv", newline="") as fh:
        runs = list(csv.DictReader(fh))
    job = load_job("pivodl")
    RUN_COLUMNS, GUESS_COLUMNS = job.RUN_COLUMNS, job.GUESS_COLUMNS
    assert list(runs[0]) == RUN_COLUMNS
    # credit and energy x (clients 2; epsilon none, 4) x (plain, paillier)
    assert len(runs) == 2 * 3 * 2
    assert {r["metric_name"] for r in runs} == {"accuracy", "rmse"}
    for r in runs:
        assert float(r["train_s"]) > 0 and float(r["mb"]) > 0
        assert (r["epsilon"] == "none") == (r["epsilon_accounted"] == "nan")
    by_point = {}
    for r in runs:  # lossless: without DP the encrypted model predicts as the plaintext one
        if r["epsilon"] == "none":
            by_point.setdefault((r["dataset"], r["study"], r["value"]), set()).add(round(float(r["metric"]), 9))
    assert all(len(v) == 1 for v in by_point.values())
    with open(tmp_path / "label_guess.csv", newline="") as fh:
        guesses = list(csv.DictReader(fh))
    assert list(guesses[0]) == GUESS_COLUMNS and [g["epsilon"] for g in guesses] == ["none", "4"]
    assert all(0.0 <= float(g["guess_accuracy"]) <= 1.0 for g in guesses)
    assert all(0.5 <= float(g["guess_partition_auc_two_sided"]) <= 1.0 for g in guesses)
    with open(tmp_path / "summary.csv", newline="") as fh:
        summary = list(csv.DictReader(fh))
    assert {"metric_mean", "metric_std", "train_s_mean", "mb_mean"} <= set(summary[0])
    assert (tmp_path / "results.json").exists()
    assert {p.name for p in tmp_path.glob("*.png")} == {f"{d}_{s}.png" for d in ("credit", "energy")
                                                        for s in ("clients", "epsilon")}


def test_pivodl_job_bad_flags(tmp_path):
    """Bad flags end before Ray starts, with a message naming the fix (argparse's own checks: exit code 2)."""
    (tmp_path / "file").write_text("")
    cases = ((["--clients", "1"], 1, "at least 2 clients"), (["--key-bits", "1024"], 1, "--allow-weak-keys"),
             (["--datasets", "bank", "--data-dir", str(tmp_path)], 1, "none of the folders tried"),
             (["--out", str(tmp_path / "file")], 1, "is a file"),
             (["--epsilons", "0"], 2, "epsilon must be > 0"), (["--repeats", "0"], 2, "positive integer"))
    for args, code, message in cases:
        done = subprocess.run([sys.executable, "jobs/pivodl.py", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO)), check=False)
        assert done.returncode == code and "error: " in done.stderr and message in done.stderr, (args, done.stderr[-500:])
        assert "Traceback" not in done.stderr
