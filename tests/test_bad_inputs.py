"""Issue 18, points 4 and 5: every bad input gives a clear ray_vfl error or a warning, never a silent
wrong result or a raw traceback; weak keys and the plain backend are refused or said out loud.

The table of what was tried, what the user sees and which test tries it: tests/BAD_INPUTS.md.
"""

from __future__ import annotations

import gc
import io
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import load_job

from ray_vfl import (
    BoostConfig,
    ConfigError,
    DataError,
    DataWarning,
    EarlyStopping,
    ProgressBar,
    SecureBoostClassifier,
    SecureBoostRegressor,
    SecurityWarning,
    VerticalDataset,
    read_table,
    vertical_split,
)
from ray_vfl.crypto import get_backend
from ray_vfl.data.bundled import load_named

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def small(credit):
    train_data, test_data = credit
    return train_data.take(np.arange(2000)), test_data.take(np.arange(500))


@pytest.fixture
def fitted(runtime, small):
    """A small plaintext classifier (per test: a later fit on the shared runtime reuses its actors)."""
    return SecureBoostClassifier(n_estimators=3, max_depth=3, backend="plain", runtime=runtime).fit(small[0])


# ---------------------------------------------------------------------------------------------------
# saved models


def test_a_classifier_refuses_a_saved_regressor_and_the_reverse(runtime, small, fitted, tmp_path):
    train_data, test_data = small
    reg = SecureBoostRegressor(n_estimators=2, max_depth=2, backend="plain", runtime=runtime).fit(train_data)
    reg.save_model(str(tmp_path / "reg"))
    fitted.save_model(str(tmp_path / "clf"))
    meta = json.loads((tmp_path / "reg" / "federation.json").read_text())
    assert meta["format_version"] == 1 and meta["kind"] == "secureboost"
    with pytest.raises(DataError, match=r"holds a SecureBoostRegressor model .* load it with SecureBoostRegressor"):
        SecureBoostClassifier.load_model(str(tmp_path / "reg"), runtime=runtime)
    with pytest.raises(DataError, match="load it with SecureBoostClassifier.load_model"):
        SecureBoostRegressor.load_model(str(tmp_path / "clf"), runtime=runtime)
    loaded = SecureBoostRegressor.load_model(str(tmp_path / "reg"), runtime=runtime)
    np.testing.assert_allclose(loaded.predict(test_data), reg.predict(test_data))
    assert loaded.get_params()["n_estimators"] == 2 and loaded.get_params()["max_depth"] == 2


def test_load_model_on_a_missing_empty_or_wrong_folder(runtime, tmp_path):
    with pytest.raises(DataError, match="does not exist; pass the folder"):
        SecureBoostClassifier.load_model(str(tmp_path / "nowhere"), runtime=runtime)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="federation.json' not found: the folder holds no saved model"):
        SecureBoostClassifier.load_model(str(tmp_path / "empty"), runtime=runtime)
    (tmp_path / "file.json").write_text("{}")
    with pytest.raises(DataError, match="is a file, not a folder"):
        SecureBoostClassifier.load_model(str(tmp_path / "file.json"), runtime=runtime)
    with pytest.raises(DataError, match="as a path"):
        SecureBoostClassifier.load_model(None, runtime=runtime)
    bad = tmp_path / "damaged"
    bad.mkdir()
    (bad / "federation.json").write_text("{not json")
    with pytest.raises(DataError, match="is not a federation file"):
        SecureBoostClassifier.load_model(str(bad), runtime=runtime)


def test_load_model_checks_the_format_version_and_the_kind(runtime, fitted, tmp_path):
    folder = tmp_path / "model"
    fitted.save_model(str(folder))
    meta_path = folder / "federation.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({k: v for k, v in meta.items() if k != "format_version"}))
    with pytest.raises(DataError, match="no format version .*train the model again"):
        SecureBoostClassifier.load_model(str(folder), runtime=runtime)
    meta_path.write_text(json.dumps({**meta, "format_version": 99}))
    with pytest.raises(DataError, match="format version 99; this ray_vfl reads format version 1"):
        SecureBoostClassifier.load_model(str(folder), runtime=runtime)
    meta_path.write_text(json.dumps({**meta, "kind": "splitnn"}))
    with pytest.raises(DataError, match="holds a splitnn model, not a secureboost model"):
        SecureBoostClassifier.load_model(str(folder), runtime=runtime)
    meta_path.write_text(json.dumps({k: v for k, v in meta.items() if k != "order"}))
    with pytest.raises(DataError, match="no complete SecureBoost federation file"):
        SecureBoostClassifier.load_model(str(folder), runtime=runtime)


def test_a_part_of_another_party_is_refused_by_the_party(runtime, fitted, small, tmp_path):
    folder = tmp_path / "model"
    fitted.save_model(str(folder))
    (folder / "party1.json").write_text((folder / "party0.json").read_text())
    with pytest.raises(DataError, match="party 'party1'.* is not its saved part"):
        SecureBoostClassifier.load_model(str(folder), runtime=runtime)
    (folder / "party1.json").write_text(json.dumps({"party": "party1"}))
    with pytest.raises(DataError, match="not a complete saved model part"):
        SecureBoostClassifier.load_model(str(folder), runtime=runtime)


# ---------------------------------------------------------------------------------------------------
# files and data


def test_empty_header_only_and_unreadable_files(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(DataError, match="is empty: no header and no rows"):
        read_table(tmp_path / "empty.csv")
    (tmp_path / "header.csv").write_text("id,x,y\n")
    with pytest.raises(DataError, match=r"has a header \(3 columns\) but no rows"):
        read_table(tmp_path / "header.csv")
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(DataError, match="cannot read .* as a Parquet table"):
        read_table(tmp_path / "bad.parquet")
    (tmp_path / "ragged.csv").write_text('a,b\n1,2\n3,"4\n')
    with pytest.raises(DataError, match="as a CSV table"):
        read_table(tmp_path / "ragged.csv")
    with pytest.raises(DataError, match="has no rows"):
        VerticalDataset.from_frames({"bank": pd.DataFrame({"id": [], "x": [], "y": []}),
                                     "shop": pd.DataFrame({"id": [], "z": []})}, label="y")


def test_a_dataset_path_that_does_not_exist_is_not_an_unknown_name(tmp_path):
    with pytest.raises(DataError, match="data file 'data/bank.csv' does not exist"):
        load_named("data/bank.csv")
    with pytest.raises(DataError, match="unknown dataset 'banks'"):
        load_named("banks")
    with pytest.raises(DataError, match=f"none of the folders tried \\('{tmp_path}'\\)"):
        load_named("bank", str(tmp_path))


def test_labels_of_one_class_are_refused(runtime, small):
    train_data, test_data = small
    zeros = VerticalDataset(train_data.features, train_data.ids, np.zeros(train_data.n_rows), "party0")
    with pytest.raises(DataError, match="one class only .*stratify=True"):
        SecureBoostClassifier(backend="plain", runtime=runtime).fit(zeros)
    ones = VerticalDataset(test_data.features, test_data.ids, np.ones(test_data.n_rows), "party0")
    with pytest.raises(DataError, match="eval set 'validation_0': the labels hold one class only"):
        SecureBoostClassifier(backend="plain", runtime=runtime).fit(train_data, eval_set=[ones])


def test_an_undefined_test_auc_warns(fitted, small):
    ones = VerticalDataset(small[1].features, small[1].ids, np.ones(small[1].n_rows), "party0")
    with pytest.warns(DataWarning, match="AUC is undefined on these 500 rows: they hold one class only"):
        metrics = fitted.model_.evaluate(ones)
    assert np.isnan(metrics["auc"]) and np.isfinite(metrics["logloss"])


def _cities(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    return pd.DataFrame({"x": x, "z": rng.normal(size=n), "city": rng.choice(["a", "b", "c"], n),
                         "shop": rng.choice(["s", "t"], n), "y": (x + rng.normal(size=n) > 0).astype(int)})


def test_unseen_categories_warn_once_per_party_with_each_columns_count(runtime):
    """One warning per party and data set, naming each column with its count; the same warning again
    (the same test set scored by another model, say) is not repeated."""
    frame = _cities(600, 0)
    parties = {"party0": ["x"], "party1": ["z", "city", "shop"]}
    train_data = vertical_split(frame, parties, label="y", categorical=["city", "shop"])
    clf = SecureBoostClassifier(n_estimators=2, max_depth=2, backend="plain", runtime=runtime).fit(train_data)
    new = _cities(50, 1)
    new.loc[:6, "city"] = "atlantis"  # 7 rows
    new.loc[:1, "shop"] = "u"  # 2 rows
    new.loc[10, "city"] = None  # missing, not unseen
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        proba = clf.predict_proba(vertical_split(new, parties, label="y", categorical=["city", "shop"]))
        clf.predict_proba(vertical_split(new, parties, label="y", categorical=["city", "shop"]))  # said once only
    said = [str(w.message) for w in caught if issubclass(w.category, DataWarning)]
    assert said == [
        "party 'party1', columns 'city', 'shop': 7 and 2 of 50 rows of the prediction data hold categories unseen "
        "in training; they are treated as missing values",
    ]
    assert proba.shape == (50, 2)
    with pytest.warns(DataWarning) as caught:
        SecureBoostClassifier(n_estimators=1, max_depth=2, backend="plain", runtime=runtime).fit(
            train_data, eval_set=[vertical_split(new, parties, label="y", categorical=["city", "shop"])])
    assert sum("columns 'city', 'shop': 7 and 2 of 50 rows of the eval set 'validation_0'" in str(w.message)
               for w in caught) == 1


def test_unseen_categories_of_party_held_data_reach_the_driver(runtime, tmp_path):
    # parties 3 and 4: the shared runtime's "bank" and "shop" stores serve tests/test_party_data.py
    frame = _cities(400, 2).assign(id=np.arange(400))
    frame[["id", "x", "y"]].to_csv(tmp_path / "bank.csv", index=False)
    frame[["id", "z", "city"]].to_csv(tmp_path / "shop.csv", index=False)
    data = VerticalDataset.from_files({"party3": str(tmp_path / "bank.csv"), "party4": str(tmp_path / "shop.csv")},
                                      label="y", categorical={"party4": ["city"]}, runtime=runtime)
    train_data, test_data = data.train_test_split(0.25, seed=0)
    clf = SecureBoostClassifier(n_estimators=2, max_depth=2, backend="plain", runtime=runtime).fit(train_data)
    new = _cities(30, 3).assign(id=np.arange(30))
    new.loc[:2, "city"] = "atlantis"
    new[["id", "x", "y"]].to_csv(tmp_path / "bank_new.csv", index=False)
    new[["id", "z", "city"]].to_csv(tmp_path / "shop_new.csv", index=False)
    fresh = VerticalDataset.from_files({"party3": str(tmp_path / "bank_new.csv"), "party4": str(tmp_path / "shop_new.csv")},
                                       label="y", categorical={"party4": ["city"]}, runtime=runtime)
    with pytest.warns(DataWarning, match="party 'party4', column 'city': 3 of 30 rows of the prediction data"):
        clf.predict_proba(fresh)


# ---------------------------------------------------------------------------------------------------
# prediction and callbacks


def test_predict_on_something_that_is_not_a_dataset(fitted, small):
    with pytest.raises(DataError, match="predict expects a VerticalDataset .* got DataFrame"):
        fitted.predict_proba(small[1].features["party0"])
    with pytest.raises(DataError, match="eval_set takes a list of data sets"):
        SecureBoostClassifier(backend="plain").fit(small[0], eval_set=small[1])
    with pytest.raises(DataError, match=r"eval_set\[0\] expects a VerticalDataset"):
        SecureBoostClassifier(backend="plain").fit(small[0], eval_set=["test.csv"])
    with pytest.raises(ConfigError, match="callbacks takes a list"):
        SecureBoostClassifier(backend="plain", callbacks=ProgressBar()).fit(small[0])


def test_a_missing_or_extra_prediction_column_is_named_with_its_party(fitted, small):
    test_data = small[1]
    lacking = test_data.take(np.arange(len(test_data.label)))
    dropped = lacking.features["party1"].columns[2]
    lacking.features["party1"] = lacking.features["party1"].drop(columns=dropped)
    with pytest.raises(DataError, match=rf"party 'party1': the columns differ from the fitted columns: '{dropped}' is "
                                        r"missing \(the party was fitted on it\)"):
        fitted.predict_proba(lacking)
    extra = test_data.take(np.arange(len(test_data.label)))
    extra.features["party0"] = extra.features["party0"].assign(bonus=1.0)
    with pytest.raises(DataError, match=r"party 'party0': .*'bonus' is extra; give every data set the party's training"):
        fitted.predict_proba(extra)


def test_n_trees_must_be_within_the_trees_trained(fitted, small):
    model = fitted.model_
    for bad in (0, 4, -1, 2.5, True):
        with pytest.raises(ConfigError, match=r"n_trees must be an integer in \[1, 3\]"):
            model.predict(small[1], n_trees=bad)
    one, all3 = model.predict(small[1], n_trees=1), model.predict(small[1])
    assert not np.allclose(one, all3)
    np.testing.assert_array_equal(model.predict(small[1], n_trees=3), all3)


def test_early_stopping_starts_afresh_and_nan_never_locks_the_best():
    stop = EarlyStopping(rounds=2)
    for i, a in enumerate([0.7, 0.9, 0.8, 0.8]):
        stop.after_iteration(i, {"validation_0": {"auc": a}})
    assert stop.best_iteration == 1
    stop.before_training(None)  # a second fit
    assert stop.best_iteration is None
    assert [stop.after_iteration(i, {"validation_0": {"auc": a}}) for i, a in enumerate([0.6, 0.65])] == [False, False]
    assert stop.best_iteration == 1
    stop = EarlyStopping(rounds=2)
    with pytest.warns(DataWarning, match="auc on 'validation_0' is NaN after tree 1"):
        results = [stop.after_iteration(i, {"validation_0": {"auc": a}}) for i, a in enumerate([np.nan, 0.6, 0.7, 0.65])]
    assert stop.best_iteration == 2 and results == [False, False, False, False]
    stop = EarlyStopping(rounds=2)
    with pytest.warns(DataWarning):
        assert [stop.after_iteration(i, {"validation_0": {"auc": np.nan}}) for i in range(2)] == [False, True]
    assert stop.best_iteration is None  # no number to keep trees by: every tree stays


def test_progress_bar_writes_plain_lines_unless_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    config = BoostConfig(n_trees=2)
    for stream, redraws in ((io.StringIO(), False), (Terminal(), True)):
        bar = ProgressBar(stream=stream)
        bar.before_training(config)
        bar.after_iteration(0, {"train": {"logloss": 0.5}})
        bar.after_iteration(1, {"train": {"logloss": 0.4}})
        bar.after_training(None)
        text = stream.getvalue()
        assert ("\r" in text) == redraws
        assert text.count("\n") == (1 if redraws else 2)


# ---------------------------------------------------------------------------------------------------
# key policy (point 5)


def test_1024_bit_keys_need_an_explicit_opt_in_and_name_the_security_level():
    with pytest.raises(ConfigError, match="about 80 bits of security.*allow_weak_keys=True"):
        BoostConfig(key_bits=1024)
    with pytest.raises(ConfigError, match="about 80 bits of security.*allow_weak_keys=True"):
        SecureBoostClassifier(key_bits=1024).fit(None)
    with pytest.raises(ConfigError, match=">= 1024"):
        BoostConfig(key_bits=512, allow_weak_keys=True)
    with pytest.raises(ConfigError, match="allow_weak_keys must be True or False"):
        BoostConfig(allow_weak_keys="yes")
    config = BoostConfig(key_bits=1024, allow_weak_keys=True)
    with pytest.warns(SecurityWarning, match=r"key_bits=1024 gives about 80 bits of security \(112 at 2048 bits"):
        config.warn_if_weak()
    assert BoostConfig().security_warnings() == [] and BoostConfig(key_bits=3072).security_warnings() == []
    be = get_backend("paillier")
    with pytest.raises(ConfigError, match="allow_weak=True"):
        be.generate_keys(1024)
    with pytest.warns(SecurityWarning, match="80 bits"):
        pk, _ = be.generate_keys(1024, allow_weak=True)
    assert pk.key_bits == 1024


def test_training_says_what_is_weak_once_per_fit(runtime, small):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SecureBoostClassifier(n_estimators=1, max_depth=2, backend="plain", runtime=runtime).fit(small[0])
    said = [str(w.message) for w in caught if issubclass(w.category, SecurityWarning)]
    assert len(said) == 1 and "passive party sees each row's gradient, and the labels follow" in said[0]


# ---------------------------------------------------------------------------------------------------
# the jobs


def run_job(*args, env_extra=None, env_drop=(), timeout=300):
    env = {k: v for k, v in {**os.environ, **(env_extra or {})}.items() if k not in env_drop}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args, message", [
    (["--backend", "rot13"], "error: unknown crypto backend 'rot13'"),
    (["--key-bits", "1024"], "or pass --allow-weak-keys to accept it"),
    (["--depth", "0"], "error: --depth must be an integer in [1, 16], got 0"),
    (["--test-size", "1.5"], "error: --test-size must be in (0, 1)"),
    (["--dataset", "no/such.csv"], "error: data file 'no/such.csv' does not exist"),
    (["--dataset", "bank", "--data-dir", "/nonexistent"], "is in none of the folders tried ('/nonexistent')"),
    (["--party-files", "bank.csv", "--label", "y"], "error: --party-files takes PARTY=PATH items"),
    (["--party-files", "a=a.csv", "b=b.csv", "--label", "y", "--categorical", "city"], "name each categorical column's party"),
    (["--categorical", "nope"], "error: --categorical column(s) ['nope'] are not in 'credit'"),
    (["--json", "/nonexistent/report.json"], "the folder '/nonexistent' does not exist"),
    (["--parties", "0"], "error: --parties must be in [2, 23]: 'credit' has 23 feature columns (the label party and "
                         "at least one more; one column each at least), got 0"),
    (["--parties", "50"], "error: --parties must be in [2, 23]: 'credit' has 23 feature columns"),
])
def test_train_job_checks_every_option_before_ray_starts(args, message, monkeypatch):
    """In this process, as ``python jobs/train.py`` runs it (its ``cli``), with a Runtime that fails if made."""
    job = load_job("train")

    def no_ray(*a, **k):
        raise AssertionError("the job reached Ray before checking its options")

    monkeypatch.setattr(job, "Runtime", no_ray)
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # main() installs the job's own
    with pytest.raises(SystemExit) as exited:
        job.cli(list(args))
    said = str(exited.value.code)  # a string code: Python prints it to stderr and exits with status 1
    assert said.startswith("error: ") and message in said and "Traceback" not in said, said


def test_train_job_exits_with_status_1_and_one_error_line():
    """The same check from the command line, in a process of its own: status 1, no traceback, no Ray."""
    start = time.monotonic()
    done = run_job("jobs/train.py", "--backend", "rot13")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: unknown crypto backend 'rot13'"), done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "Ray" not in done.stderr
    assert time.monotonic() - start < 60  # no Ray was started (that alone takes seconds)


def test_train_job_with_party_files_categoricals_and_a_gradient_bound(tmp_path, ray_session, capfd, monkeypatch):
    """The job's categorical and gradient-bound flags, its report's dataset name, and a clean log: one plain
    line per tree, no escape code. Without the flags, the error names the command line's flag. Both in this
    process, through the job's cli(), on the session's Ray (the party files reach the same checks inside the
    parties); that a job starting a Ray of its own prints nothing of Ray's is tests/test_job.py's subprocess."""
    frame = _cities(600, 4).assign(id=np.arange(600))
    frame["y"] = frame["x"] * 100 + 50
    frame[["id", "x", "y"]].to_csv(tmp_path / "bank.csv", index=False)
    frame[["id", "z", "city", "shop"]].to_csv(tmp_path / "shop.csv", index=False)
    report = tmp_path / "report.json"
    base = ["--party-files", f"bank={tmp_path / 'bank.csv'}", f"shop={tmp_path / 'shop.csv'}",
            "--label", "y", "--objective", "reg:squarederror", "--backend", "plain", "--trees", "2", "--depth", "2",
            "--json", str(report)]
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # main() installs the job's own
    capfd.readouterr()
    load_job("train").cli(base + ["--categorical", "shop=city,shop", "--gradient-bound", "1e4"])
    done = capfd.readouterr()
    result = json.loads(report.read_text())
    assert result["dataset"] == "party-files" and result["party_files"]["shop"].endswith("shop.csv")
    assert result["trees"] == 2 and "test_rmse" in result
    log = done.out + done.err
    assert "\r" not in log and "\x1b" not in log and "INFO" not in log and "Started a local Ray" not in log
    assert log.count("tree 1/2") == 1 and log.count("tree 2/2") == 1, log
    with pytest.raises(SystemExit) as without:
        load_job("train").cli(base)
    said = str(without.value.code)  # a string code: Python prints it to stderr and exits with status 1
    # the command line's own flag, not the Python keyword (categorical={'shop': ['city']})
    assert said.startswith("error: ") and "declare it categorical, e.g. --categorical shop=city" in said, said
    assert "categorical={" not in said and "Traceback" not in said
    gc.collect()  # nothing of Ray's after the error: no "Unhandled error" report of a call nobody fetched
    time.sleep(2.0)  # (Ray reports a dropped error from a thread of its own, when it frees the object)
    err = capfd.readouterr().err
    assert "Unhandled error" not in err and "Traceback" not in err, err[-3000:]


def test_train_job_refuses_a_test_set_of_one_class(tmp_path):
    frame = _cities(300, 5)
    frame["y"] = 0
    frame.loc[:3, "y"] = 1  # 4 positives in 300 rows: a 1% test set of 3 rows holds zeros only
    frame[["x", "z", "y"]].to_csv(tmp_path / "t.csv", index=False)
    done = run_job("jobs/train.py", "--dataset", str(tmp_path / "t.csv"), "--label", "y", "--backend", "plain",
                   "--trees", "1", "--depth", "2", "--test-size", "0.01", "--seed", "3")
    assert done.returncode == 1 and "test AUC is undefined: the 3 test rows hold one class" in done.stderr, done.stderr[-2000:]
    assert "test AUC nan" not in done.stdout and "Traceback" not in done.stderr


def test_splitnn_job_help_and_run_without_torch():
    hide_torch = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = ['jobs/splitnn.py'] + sys.argv[1:]; "
                  "runpy.run_path('jobs/splitnn.py', run_name='__main__')")
    helped = run_job("-c", hide_torch, "--help")
    assert helped.returncode == 0 and "usage: splitnn.py" in helped.stdout, helped.stderr[-2000:]
    ran = run_job("-c", hide_torch, "--rows", "10")
    assert ran.returncode == 1 and "needs torch: pip install torch==2.13.0" in ran.stderr
    assert "Traceback" not in ran.stderr
