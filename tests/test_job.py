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

import numpy as np
import pytest
from conftest import background_result, load_job

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


def test_train_job_prints_its_result_line_and_nothing_of_rays():
    """jobs/train.py starting its own Ray as a user's shell does (RAY_AUTH_MODE unset: Ray's default token
    authentication), with 18 parties: more actor processes than Ray expects on 2 CPUs. It prints its result
    line and its one warning, and nothing of Ray's: no token-authentication notice, no raylet warning, no
    escape code. The line's wall time is the whole process's; a plain backend has no key size. The run is
    started with the session, with its own RAY_TMPDIR (``BACKGROUND`` in ``tests/conftest.py``)."""
    done, folder = background_result("train_18_parties")
    report = folder / "report.json"
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = json.loads(report.read_text())
    out, err = done.stdout.strip().splitlines(), done.stderr.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("test AUC ") and out[0].endswith("| 18 parties, plain (no encryption)"), out
    assert f"wall time {said['wall_s']:.1f} s for the whole process (fit {said['fit_s']:.1f} s" in out[0]
    assert said["wall_s"] > said["fit_s"] and said["key_bits"] is None
    assert len(err) == 1 and err[0].startswith("warning: backend='plain' encrypts nothing"), err
    assert "\x1b" not in done.stdout + done.stderr


def test_pivodl_job_small(tmp_path, runtime, capsys):
    """jobs/pivodl.py end to end at its small default, narrowed: the CSV files and their columns. In-process
    through the job's cli() on the session's Ray (the job attaches to a running Ray and kills only its own
    actors); the job starting a Ray of its own is what the train job's tests above prove, in a subprocess."""
    job = load_job("pivodl")
    argv = ["--datasets", "credit", "energy", "--studies", "clients", "epsilon", "--clients", "2",
            "--epsilons", "none", "4", "--rows", "300", "--out", str(tmp_path)]
    code = job.cli(argv)
    done = capsys.readouterr()
    assert code == 0, done.out[-3000:] + done.err[-3000:]
    with open(tmp_path / "runs.csv", newline="") as fh:
        runs = list(csv.DictReader(fh))
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
    saved = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert len(saved) == len(runs) + len(guesses)  # each run saved as it finished
    assert "python jobs/pivodl.py --full" in done.out  # the small default names the paper's studies
    assert {p.name for p in tmp_path.glob("*.png")} == {f"{d}_{s}.png" for d in ("credit", "energy")
                                                        for s in ("clients", "epsilon")}


def test_pivodl_job_bad_flags(tmp_path, capsys, monkeypatch):
    """Bad flags end before Ray starts, with a message naming the fix (argparse's own checks: exit code 2).
    In-process through the job's cli(), with the Runtime replaced by one that fails the test if built."""
    import ray_vfl

    def no_runtime(*args, **kwargs):
        raise AssertionError("the job started a runtime for bad flags")

    monkeypatch.setattr(ray_vfl, "Runtime", no_runtime)
    job = load_job("pivodl")
    (tmp_path / "file").write_text("")
    cases = ((["--clients", "1"], 1, "at least 2 clients"), (["--key-bits", "1024"], 1, "--allow-weak-keys"),
             (["--datasets", "bank", "--data-dir", str(tmp_path)], 1, "none of the folders tried"),
             (["--out", str(tmp_path / "file")], 1, "is a file"),
             (["--epsilons", "0"], 2, "epsilon must be > 0"), (["--repeats", "0"], 2, "positive integer"))
    for args, code, message in cases:
        try:
            got = job.cli(args)
        except SystemExit as exit_:  # argparse's own checks
            got = exit_.code
        err = capsys.readouterr().err
        assert got == code and "error: " in err and message in err, (args, err[-500:])
        assert "Traceback" not in err


# -- every job: a small default, the full study one option away, Ctrl-C in one line ---------------------------
def test_every_job_runs_its_small_study_by_default_and_names_the_full_one(capsys):
    """With no options each job picks its small study (checked on the parsed options and the config chosen,
    nothing runs), and its --help names the option of the full study."""
    pivodl, ssxgb, splitnn = load_job("pivodl"), load_job("ssxgb"), load_job("splitnn")
    small, full = pivodl.parse_args([]), pivodl.parse_args(["--full"])
    assert (small.rows, small.repeats, small.key_bits, small.allow_weak_keys, small.out) == (1500, 1, 1024, True,
                                                                                           "results/pivodl_small")
    assert (full.rows, full.repeats, full.key_bits, full.allow_weak_keys, full.out) == (None, 5, 2048, False, "results/pivodl")
    assert full.clients == [2, 4, 6, 8, 10] and full.datasets == ["credit", "bank", "energy"]
    assert len(pivodl.plan(small)) == 2 * 8 * 2 + 2 and len(pivodl.plan(full)) > 500  # datasets x points x backends + guesses
    assert pivodl.parse_args(["--full", "--repeats", "2"]).repeats == 2  # explicit flags apply on top
    assert not pivodl.parse_args(["--key-bits", "1024"]).allow_weak_keys  # a weak key the user picks needs the flag
    small, full = ssxgb.parse_args([]), ssxgb.parse_args(["--full"])
    assert (small.datasets, small.rounds, small.key_bits, small.scaling) == (["iris"], 3, 1024, "")
    assert (full.datasets, full.rows, full.rounds, full.key_bits, full.depth) == (["iris", "mnist"], 10_000, 10, 2048, None)
    assert [r["depth"] for r in ssxgb.plan(full)[:2]] == [4, 6] and len(ssxgb.plan(full)) == 2 + 4
    assert ssxgb.parse_args(["--full", "--dataset", "iris"]).datasets == ["iris"]
    small, full = splitnn.parse_args([]), splitnn.parse_args(["--full"])
    assert (small.rows, small.real, full.rows, full.real, full.seeds) == (50_000, "none", 200_000, "ipinyou", [0, 1, 2])
    experiment, plot = load_job("experiment"), load_job("plot")
    assert experiment.parse_args([]).config == experiment.DEFAULT == plot.DEFAULT == "pivodl_fig6_9_clients_small"
    assert "--config pivodl_fig6_9_clients" in experiment.full_study_hint(experiment.DEFAULT)
    for job, full_option in ((pivodl, "--full"), (ssxgb, "--full"), (splitnn, "--full"), (plot, "--config pivodl_fig6_9_clients"),
                             (experiment, "--config pivodl_fig6_9_clients"), (load_job("train"), "jobs/experiment.py --config")):
        with pytest.raises(SystemExit):
            job.parse_args(["--help"])
        assert full_option in " ".join(capsys.readouterr().out.split()), job.__name__


def test_experiment_help_lists_every_shipped_config_with_its_description(capsys):
    import yaml

    with pytest.raises(SystemExit):
        load_job("experiment").parse_args(["--help"])
    text = capsys.readouterr().out
    configs = sorted((REPO / "jobs" / "configs").glob("*.yaml"))
    assert len(configs) > 20
    for path in configs:
        description = yaml.safe_load(path.read_text())["description"]
        assert description and f"  {path.stem} " in text and description in text, path.stem


def test_ctrl_c_in_a_sweep_keeps_the_finished_runs_and_says_so_in_one_line(runtime, tmp_path, monkeypatch, capsys):
    """jobs/experiment.py in-process: Ctrl-C after the first run leaves that run in results.csv, prints one
    line and returns 130; the same command then runs the second run only."""
    import pandas as pd

    import ray_vfl.experiments.runner as runner

    config = tmp_path / "tiny.yaml"
    config.write_text("name: tiny\nprotocol: pivodl\nrows: 300\nsweep: {n_trees: [1, 2]}\n"
                      "params: {backend: plain, max_depth: 2}\n")  # two clients: actors the session has anyway
    argv = ["--config", str(config), "--out", str(tmp_path / "out"), "--no-progress"]
    real, calls = runner.run_one, []

    def first_then_ctrl_c(*args, **kwargs):
        calls.append(args[1]["n_trees"])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    class Shared:  # the session's runtime and actors (not a second set), left running when the job ends
        def __getattr__(self, name):
            return getattr(runtime, name)

        def shutdown(self):
            pass

    monkeypatch.setattr("ray_vfl.Runtime", Shared)
    monkeypatch.setattr(runner, "run_one", first_then_ctrl_c)
    job = load_job("experiment")
    assert job.main(argv) == 130
    err = capsys.readouterr().err.strip().splitlines()
    folder = os.path.relpath(tmp_path / "out" / "tiny")
    assert err == [f"interrupted: 1 of 2 runs saved in {folder}; rerun the same command to resume"]
    saved = pd.read_csv(tmp_path / "out" / "tiny" / "results.csv")
    assert saved["n_trees"].tolist() == [1] and saved["auc"].notna().all()
    monkeypatch.setattr(runner, "run_one", lambda *a, **k: (calls.append(a[1]["n_trees"]), real(*a, **k))[1])
    assert job.main(argv) == 0 and calls == [1, 2, 2]  # resumed: the first run is not run again
    assert "2 of 2 runs" in capsys.readouterr().out


def test_ctrl_c_in_the_pivodl_job_keeps_the_finished_runs(tmp_path, monkeypatch, capsys):
    """jobs/pivodl.py saves each run as it finishes: Ctrl-C during the second run (a stand-in for training,
    no Ray) prints one line and returns 130; the same command runs only the unfinished run and writes the tables."""
    job = load_job("pivodl")
    calls = []

    def fake(runtime, train, test, config, eval_sets=None, label=None, bar=False):
        calls.append(label)
        if len(calls) == 2:
            raise KeyboardInterrupt
        row = job.test_metrics(config.objective, test.label, np.full(len(test.label), 0.5))
        return {**row, "train_s": 0.1, "fit_s": 0.1, "mb": 0.0, "encrypt": 0, "add": 0, "decrypt": 0,
                "train_rows": len(train.label), "test_rows": len(test.label), "epsilon_accounted": float("nan")}, None

    monkeypatch.setattr(job, "run_pivodl", fake)
    out = tmp_path / "pivodl"
    argv = ["--datasets", "credit", "--studies", "clients", "--clients", "2", "3", "--backends", "plain",
            "--guess-dataset", "none", "--rows", "300", "--no-plots", "--no-progress", "--out", str(out)]
    assert job.cli(argv) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"interrupted: 1 of 2 runs saved in {os.path.relpath(out)}; rerun the same command to resume")
    assert len((out / "runs.jsonl").read_text().splitlines()) == 1 and not (out / "runs.csv").exists()
    assert job.cli(argv) == 0 and len(calls) == 3  # the first run is not run again
    with open(out / "runs.csv", newline="") as fh:
        assert [r["value"] for r in csv.DictReader(fh)] == ["2", "3"]
