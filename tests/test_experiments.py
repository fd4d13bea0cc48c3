"""Sweeps: the config schema, one row per run, resuming, the plots and the job entry points."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ray_vfl.errors import ConfigError
from ray_vfl.experiments import ExperimentConfig, run_sweep
from ray_vfl.experiments.config import result_columns
from ray_vfl.experiments.plots import per_tree_table, plot_figures, plot_sweep

REPO = Path(__file__).resolve().parents[1]
PER_TREE = ("tree", "model", "auc", "accuracy", "nll")


def tiny(**changes):
    base = {"name": "tiny", "protocol": "pivodl", "rows": 600, "repeats": 1,
            "params": {"backend": "plain", "n_trees": 2, "max_depth": 2}, "sweep": {"clients": [2, 3]}}
    return ExperimentConfig.from_dict({**base, **changes})


def test_schema_names_the_valid_keys():
    with pytest.raises(ConfigError, match=r"unknown ExperimentConfig parameter\(s\) \['sweeps'\]; valid names"):
        ExperimentConfig.from_dict({"name": "x", "protocol": "pivodl", "sweeps": {}})
    with pytest.raises(ConfigError, match="sweep setting 'depth' is unknown; valid settings"):
        tiny(sweep={"depth": [2]})
    with pytest.raises(ConfigError, match="each value must be an integer >= 2"):
        tiny(sweep={"clients": [1]})
    with pytest.raises(ConfigError, match="epsilon needs protocol 'pivodl'"):
        tiny(protocol="secureboost", sweep={"epsilon": [1.0]})
    with pytest.raises(ConfigError, match="both swept and fixed"):
        tiny(params={"n_trees": 2}, sweep={"n_trees": [1]})
    with pytest.raises(ConfigError, match="protocol must be one of"):
        tiny(protocol="fate")
    with pytest.raises(ConfigError, match="rows is both swept and fixed"):
        tiny(sweep={"rows": [100]})
    with pytest.raises(ConfigError, match=r"figures\[0\] has unknown key\(s\) \['colour'\]; valid keys"):
        tiny(figures=[{"x": "clients", "y": "auc", "colour": "red"}])
    with pytest.raises(ConfigError, match=r"figures\[0\] must be a mapping with x and y"):
        tiny(figures=[{"x": "clients"}])
    with pytest.raises(ConfigError, match="fresh_actors must be true or false"):
        tiny(fresh_actors="yes")


def test_every_shipped_config_is_valid():
    configs = sorted((REPO / "jobs" / "configs").glob("*.yaml"))
    assert len(configs) >= 4
    for path in configs:
        cfg = ExperimentConfig.from_yaml(str(path))
        assert cfg.name == path.stem and cfg.runs()


def _shipped():
    return {path.stem: ExperimentConfig.from_yaml(str(path)) for path in sorted((REPO / "jobs" / "configs").glob("*.yaml"))}


def test_every_paper_config_has_a_small_twin_with_the_same_sweep_keys_and_figures():
    configs = _shipped()
    paper = [n for n in configs if n.startswith(("pivodl_fig", "pivodl_table", "ssxgb_fig", "fedads_", "secureboost_scaling"))
             and not n.endswith("_small")]
    assert len(paper) >= 9, paper
    for name, full in configs.items():
        small = configs.get(name + "_small")
        if name.endswith("_small") or small is None:
            assert name.endswith("_small") or name not in paper, f"{name} has no _small twin"
            continue
        assert small.protocol == full.protocol and small.dataset == full.dataset, name
        assert list(small.sweep) == list(full.sweep), f"{name}: the small twin sweeps {list(small.sweep)}"
        untitled = [[{k: v for k, v in f.items() if k != "title"} for f in c.figures] for c in (small, full)]
        assert untitled[0] == untitled[1] and small.per_tree == full.per_tree, f"{name}: the small twin draws other figures"
    for name in configs:
        if name.endswith("_small"):
            assert name[: -len("_small")] in configs, f"{name} has no full-size config"


def test_every_figure_names_columns_the_runner_writes():
    for name, cfg in _shipped().items():
        for fig in cfg.figures:
            per_tree = fig["x"] == "tree"
            ys = [fig["y"]] if isinstance(fig["y"], str) else fig["y"]
            for column in [fig["x"], *ys, *([fig["group"]] if "group" in fig else [])]:
                assert column in result_columns(cfg.protocol, per_tree), (name, column)
            assert not per_tree or cfg.per_tree, name


def test_figure_and_sweep_mistakes_are_config_errors():
    with pytest.raises(ConfigError, match="names column 'guess_auc'.*valid columns are"):
        tiny(figures=[{"x": "clients", "y": ["auc", "guess_auc"]}])
    with pytest.raises(ConfigError, match="names column 'guess_accuracy', which ssxgb's results do not hold"):
        ExperimentConfig.from_dict({"name": "x", "protocol": "ssxgb", "figures": [{"x": "clients", "y": "guess_accuracy"}]})
    with pytest.raises(ConfigError, match="set per_tree: true"):
        tiny(figures=[{"x": "tree", "y": "auc", "group": "model"}])
    with pytest.raises(ConfigError, match="per-tree table .* does not hold"):
        tiny(per_tree=True, figures=[{"x": "tree", "y": "mb"}])
    with pytest.raises(ConfigError, match="per_tree must be true or false"):
        tiny(per_tree="yes")
    with pytest.raises(ConfigError, match="instance_threshold needs protocol 'pivodl'"):
        tiny(protocol="ssxgb", params={}, sweep={"instance_threshold": [1, 10]})
    with pytest.raises(ConfigError, match="each value must be an integer >= 1"):
        tiny(sweep={"instance_threshold": [0]})


def test_per_tree_curves_and_the_instance_threshold(runtime, tmp_path):
    cfg = tiny(per_tree=True, sweep={"instance_threshold": [1, 200]},
               figures=[{"name": "curve", "x": "tree", "y": ["accuracy", "nll"], "group": "model"},
                        {"name": "threshold", "x": "instance_threshold", "y": "auc"}])
    table = run_sweep(cfg, str(tmp_path), runtime, progress=False)
    assert table["instance_threshold"].tolist() == [1, 200]
    assert set(result_columns("pivodl")) <= set(table.columns)
    curves = per_tree_table(table)
    assert set(PER_TREE) <= set(curves.columns)
    assert sorted(curves["model"].unique()) == ["pivodl", "xgboost"] and sorted(curves["tree"].unique()) == [1, 2]
    last = curves[(curves["model"] == "pivodl") & (curves["tree"] == 2)]
    assert last["accuracy"].tolist() == table["accuracy"].tolist()  # the last point is the run's own metric
    assert [Path(p).name for p in plot_figures(cfg, table, str(tmp_path))] == ["curve.png", "threshold.png"]


def test_a_sweep_writes_one_row_per_run_and_resumes(runtime, tmp_path):
    cfg = tiny()
    first = run_sweep(cfg, str(tmp_path), runtime, progress=False, max_runs=1)  # a first look: one run of two
    assert first["clients"].tolist() == [2]
    with pytest.raises(ConfigError, match="max_runs must be a positive integer"):
        run_sweep(cfg, str(tmp_path), runtime, progress=False, max_runs=0)
    table = run_sweep(cfg, str(tmp_path), runtime, progress=False)
    assert len(table) == 2 and sorted(table["clients"]) == [2, 3]
    for column in ("run_id", "auc", "accuracy", "setup_s", "train_s", "s_per_tree", "predict_s", "mb", "mb_by_channel",
                   "mb_by_kind", "guess_accuracy", "guess_auc_two_sided", "cpus", "ray_version"):
        assert column in table.columns, column
    assert (table["train_s"] > 0).all() and (table["mb"] > 0).all()
    # where the training time went, from the parties' measured intervals: the shares fill the window
    shares = table[["crypto_s", "wire_s", "compute_s", "between_calls_s"]].sum(axis=1)
    assert ((shares - table["train_s"]).abs() < 0.05 + 0.05 * table["train_s"]).all()
    assert (table["calls"] > 0).all() and (table["compute_s"] > 0).all() and (table["empty_call_ms"] > 0).all()
    assert (table["peak_rss_mb"] > 50).all() and "party0" in table["peak_rss_by_party"].iloc[0]
    assert (tmp_path / "tiny" / "results.parquet").exists()
    finished = pd.read_csv(tmp_path / "tiny" / "results.csv")["finished"].tolist()
    again = run_sweep(tiny(repeats=2), str(tmp_path), runtime, progress=False)  # two runs done, two new
    assert len(again) == 4 and again["finished"].tolist()[:2] == finished
    png = plot_sweep(again, "clients", "s_per_tree", str(tmp_path / "fig.png"), group="repeat")
    assert Path(png).stat().st_size > 1000


def test_jobs_report_bad_input_in_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nprotocol: pivodl\nsweep: {clients: [2]}\nrepeat: 3\n")
    run = subprocess.run([sys.executable, str(REPO / "jobs" / "experiment.py"), "--config", str(bad)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "error: unknown ExperimentConfig parameter(s) ['repeat']" in run.stderr
    run = subprocess.run([sys.executable, str(REPO / "jobs" / "plot.py"), "--results", str(tmp_path), "--x", "clients",
                          "--y", "auc"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "run jobs/experiment.py first" in run.stderr


def test_ssxgb_sweeps_take_one_cryptosystem():
    with pytest.raises(ConfigError, match="one cryptosystem"):
        ExperimentConfig.from_dict({"name": "x", "protocol": "ssxgb", "sweep": {"backend": ["ou"]}})


def test_crypto_time_is_measured_where_it_runs(runtime, tmp_path):
    """Encrypted SecureBoost: the parties' crypto intervals (encryption, encrypted histograms,
    decryption) and payload serialization are measured, inside the training window."""
    cfg = ExperimentConfig.from_dict({"name": "sb_tiny", "protocol": "secureboost", "rows": 400, "sweep": {"clients": [2]},
                                      "params": {"backend": "paillier", "key_bits": 1024, "n_trees": 1, "max_depth": 2}})
    run_sweep(cfg, str(tmp_path), runtime, progress=False)  # warm actors; the next run counts its own intervals
    row = run_sweep(ExperimentConfig.from_dict({**cfg.to_dict(), "repeats": 2}), str(tmp_path), runtime, progress=False).iloc[-1]
    assert 0 < row["crypto_s"] <= row["train_s"] + 0.05 and row["wire_s"] > 0


SMALL_CONFIGS = sorted((REPO / "jobs" / "configs").glob("*_small.yaml"))
# The small sweeps a notebook draws run whole here (tests/test_notebooks.py then resumes them from the
# session's folder); every other small sweep runs its first point only: the sweep mechanism itself (one row
# per run, resuming, max_runs) is tested once above, and a config adds only its protocol, data and figures.
NOTEBOOK_CONFIGS = {name for nb in (REPO / "notebooks").glob("*.ipynb")
                    for name in re.findall(r"configs/([A-Za-z0-9_]+_small)\.yaml", nb.read_text())}
NOTEBOOK_CONFIGS |= {name for nb in (REPO / "notebooks").glob("*.ipynb")
                     for name in re.findall(r"sweep\('([A-Za-z0-9_]+_small)'\)", nb.read_text())}


@pytest.mark.parametrize("path", SMALL_CONFIGS, ids=[p.stem for p in SMALL_CONFIGS])
def test_every_small_variant_runs_end_to_end_and_draws_its_figures(path, sweep_out, runtime):
    """Each shipped small sweep, as ``jobs/experiment.py`` and ``jobs/plot.py --config`` run it (whole if a
    notebook draws it, else its first run). A config with fresh_actors gets a Runtime of its own (it kills
    that runtime's actors, not the session's); the others reuse the session's actors, as one sweep reuses
    them from run to run."""
    cfg = ExperimentConfig.from_yaml(str(path))
    if cfg.protocol == "splitnn":
        pytest.importorskip("torch")
    from ray_vfl.experiments.plots import plot_figures
    from ray_vfl.runtime.actors import Runtime

    whole = cfg.name in NOTEBOOK_CONFIGS
    own = Runtime() if cfg.fresh_actors else None
    try:
        table = run_sweep(cfg, str(sweep_out), own or runtime, progress=False, max_runs=None if whole else 1)
    finally:
        if own is not None:
            own.kill_all()
    runs = cfg.runs() if whole else cfg.runs()[:1]
    assert len(table) == len(runs) and set(table["run_id"]) == {r["run_id"] for r in runs}
    assert (table["train_s"] > 0).all() and (table["mb"] >= 0).all()
    if cfg.protocol != "splitnn":  # split-NN's Local and ORACLE rows train in one place and send nothing
        assert (table["mb"] > 0).all()
    if cfg.protocol == "ssxgb":  # BCP operations are measured as crypto, inside the training window
        assert (table["backend"] == "bcp").all()
        assert ((table["crypto_s"] > 0) & (table["crypto_s"] <= table["train_s"] + 0.05)).all()
    for png in plot_figures(cfg, table, str(sweep_out / cfg.name)):
        assert Path(png).stat().st_size > 1000


def test_the_notebooks_draw_shipped_small_sweeps():
    assert len(NOTEBOOK_CONFIGS) >= 6 and NOTEBOOK_CONFIGS <= {p.stem for p in SMALL_CONFIGS}, NOTEBOOK_CONFIGS


def test_an_interrupted_run_resumes_from_its_last_checkpoint(runtime, tmp_path, monkeypatch):
    """With checkpoint_every, a run killed after its second tree continues from there (also with a longer
    timeout_s, which is not part of the run's identity): the finished row
    says so (trees_resumed), equals the uninterrupted run's metrics (PIVODL without DP is deterministic)
    and the run's checkpoint folder is gone."""
    import ray_vfl.experiments.runner as runner

    cfg = tiny(name="ckpt", sweep={"clients": [2]}, checkpoint_every=1,
               params={"backend": "plain", "n_trees": 3, "max_depth": 2})

    class Killed(Exception):
        pass

    class KilledAfterTwoTrees(runner.TreeTimer):
        def after_iteration(self, iteration, logs):
            super().after_iteration(iteration, logs)
            if iteration == 1:
                raise Killed("the machine went away after tree 2")
            return False

    with monkeypatch.context() as patch:
        patch.setattr(runner, "TreeTimer", KilledAfterTwoTrees)
        with pytest.raises(Killed):
            run_sweep(cfg, str(tmp_path / "interrupted"), runtime, progress=False)
    run_id = cfg.runs()[0]["run_id"]
    checkpoints = tmp_path / "interrupted" / "ckpt" / "checkpoints" / run_id
    assert '"trees": 2' in (checkpoints / "checkpoint.json").read_text()
    # raising the timeout, as a timeout's error advises, keeps the run and its checkpoints
    longer = tiny(name="ckpt", sweep={"clients": [2]}, checkpoint_every=1, params={**cfg.params, "timeout_s": 900})
    assert longer.runs()[0]["run_id"] == run_id
    resumed = run_sweep(longer, str(tmp_path / "interrupted"), runtime, progress=False).iloc[0]
    whole = run_sweep(tiny(name="ckpt", sweep={"clients": [2]}, params=cfg.params), str(tmp_path / "whole"), runtime,
                      progress=False).iloc[0]
    assert resumed["trees_resumed"] == 2 and whole["trees_resumed"] == 0 and resumed["n_trees"] == 3
    assert resumed["auc"] == pytest.approx(whole["auc"], abs=1e-12) and resumed["run_id"] == whole["run_id"]
    assert resumed["checkpoint_s"] > 0 and whole["checkpoint_s"] == 0 and resumed["train_s"] > 0
    assert len(json.loads(resumed["s_by_tree"])) == 1 and len(json.loads(whole["s_by_tree"])) == 3
    assert not checkpoints.exists()
    with pytest.raises(ConfigError, match="checkpoint_every must be an integer"):
        tiny(checkpoint_every=0)
    with pytest.raises(ConfigError, match="checkpoint_every is for the tree protocols"):
        ExperimentConfig.from_dict({"name": "x", "protocol": "splitnn", "checkpoint_every": 1})
