"""The main job runs under `ray job submit` on a local Ray head bound to loopback."""

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
