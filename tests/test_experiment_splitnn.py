"""Split-NN (FedAds Tables 3 and 4) as sweeps: the schema of the new keys, one row per method/defense, resuming."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ray_vfl.errors import ConfigError
from ray_vfl.experiments import ExperimentConfig, run_sweep
from ray_vfl.experiments.plots import plot_sweep

REPO = Path(__file__).resolve().parents[1]
SMALL_NET = {"batch_size": 64, "nonlabel_hidden": [16, 8], "label_hidden": [16, 8], "embedding_dim": 4,
             "diffusion_steps": 5, "imitation_epochs": 2}


def splitnn(**changes):
    base = {"name": "fedads_tiny", "protocol": "splitnn", "dataset": "fedads_like", "rows": 600,
            "params": dict(SMALL_NET), "sweep": {"defense": ["none", "dp"]}}
    return ExperimentConfig.from_dict({**base, **changes})


def test_splitnn_schema_names_the_valid_values():
    with pytest.raises(ConfigError, match=r"sweep\['method'\] holds 'vfl'; each value must be a FedAds Table 3 method "
                                          r"\(splitnn\): one of \['local', 'vanilla', 'heuristic', 'jpl', 'fedcvt', 'ss-vfl', 'fedhssl', 'diffu-at', 'oracle'\]"):
        splitnn(sweep={"method": ["vfl"]})
    with pytest.raises(ConfigError, match=r"one of \['none', 'dp', 'marvell', 'mixpro'\]"):
        splitnn(sweep={"defense": ["DP"]})
    with pytest.raises(ConfigError, match=r"params\['defense'\] holds 'laplace'"):
        splitnn(sweep={}, params={"defense": "laplace"})
    with pytest.raises(ConfigError, match="not both: one table per sweep"):
        splitnn(sweep={"method": ["local"], "defense": ["none"]})
    with pytest.raises(ConfigError, match=r"dataset 'bank' has no split-NN loader; splitnn datasets are \['fedads_like'"):
        splitnn(dataset="bank")
    with pytest.raises(ConfigError, match="'heuristic' \\(HeuristicVFL\\) needs user IDs"):
        splitnn(dataset="credit", sweep={"method": ["heuristic"]})
    with pytest.raises(ConfigError, match=r"sweep over method needs protocol 'splitnn'"):
        splitnn(protocol="pivodl", dataset="credit", sweep={"method": ["local"]})
    with pytest.raises(ConfigError, match="sweep over clients is for the tree protocols"):
        splitnn(sweep={"clients": [2]})
    with pytest.raises(ConfigError, match=r"aligned_fraction'\] holds 1.0; each value must be a number in \(0, 1\)"):
        splitnn(sweep={"method": ["local"], "aligned_fraction": [1.0]})
    with pytest.raises(ConfigError, match="each value must be an integer >= 1"):
        splitnn(sweep={"epochs": [0]})
    assert [r["epsilon"] for r in splitnn(sweep={"defense": ["dp"], "epsilon": [1.0, 8.0]}).runs()] == [1.0, 8.0]
    widths = {k: v for k, v in SMALL_NET.items() if k != "embedding_dim"}  # swept, so not also fixed
    with pytest.raises(ConfigError, match=r"sweep\['embedding_dim'\] holds 0; each value must be an integer in \[1, 1024\]"):
        splitnn(sweep={"method": ["vanilla"], "embedding_dim": [0]}, params=widths)
    with pytest.raises(ConfigError, match=r"params\['embedding_dim'\] holds 8.5"):
        splitnn(sweep={}, params={**SMALL_NET, "embedding_dim": 8.5})
    with pytest.raises(ConfigError, match="sweep over embedding_dim needs protocol 'splitnn'"):
        splitnn(protocol="secureboost", dataset="credit", sweep={"embedding_dim": [4]}, params={})
    assert [(r["embedding_dim"], r["method"]) for r in splitnn(sweep={"embedding_dim": [4, 16], "method": ["vanilla"]},
                                                               params=widths).runs()] \
        == [(4, "vanilla"), (16, "vanilla")]


def test_importing_the_experiments_does_not_import_torch():
    code = "import sys, ray_vfl.experiments, ray_vfl.experiments.runner, ray_vfl.experiments.splitnn_runs; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.stdout.strip() == "False", out.stderr


def test_a_splitnn_sweep_writes_one_row_per_method_and_defense_and_resumes(runtime, tmp_path, sweep_out):
    pytest.importorskip("torch")
    table4 = run_sweep(splitnn(), str(tmp_path), runtime, progress=False)
    assert table4["defense"].tolist() == ["none", "dp"] and (table4["table"] == 4).all()
    for column in ("auc", "nll", "data_s", "setup_s", "train_s", "predict_s", "attack_s", "mb", "mb_by_channel",
                   "mb_by_kind", "epsilon_accounted", "leak_auc_two_sided_max", "two_sided_chance", "cpus") + tuple(
                   f"{a}_leak_auc{s}" for a in ("norm", "direction", "cluster") for s in ("", "_two_sided")):
        assert column in table4.columns, column
    assert (table4["mb"] > 0).all() and json.loads(table4["mb_by_kind"].iloc[0])
    assert pd.isna(table4["epsilon_accounted"].iloc[0]) and table4["epsilon_accounted"].iloc[1] == pytest.approx(1.0, abs=0.05)
    again = run_sweep(splitnn(sweep={"defense": ["none", "dp", "mixpro"]}), str(tmp_path), runtime, progress=False)
    assert again["defense"].tolist() == ["none", "dp", "mixpro"]  # two resumed, one new
    assert again["finished"].tolist()[:2] == table4["finished"].tolist()

    # Table 3: the shipped small config, run whole into the session's sweep folder (tests/test_experiments.py
    # and the fedads notebook resume it there instead of training it again): every method, one row each
    cfg3 = ExperimentConfig.from_yaml(str(REPO / "jobs" / "configs" / "fedads_table3_small.yaml"))
    table3 = run_sweep(cfg3, str(sweep_out), runtime, progress=False)
    methods = cfg3.sweep["method"]
    assert table3["method"].tolist() == methods and (table3["table"] == 3).all()
    assert table3["model"].tolist() == ["Local", "VanillaVFL", "HeuristicVFL", "JPL", "FedCVT", "SS-VFL", "FedHSSL",
                                        "Diffu-AT", "ORACLE"]
    assert (table3["embedding_dim"] == table3["embedding_dim"].iloc[0]).all()
    local = methods.index("local")
    assert table3["auc"].between(0, 1).all() and table3["mb"].iloc[local] == 0 and (table3["mb"].drop(index=local) > 0).all()
    assert (table3["aligned_rows"] < table3["train_rows"]).all()
    png = plot_sweep(table3, "method", ["auc", "nll"], str(tmp_path / "t3.png"))  # categorical x: bars
    assert Path(png).stat().st_size > 1000
