"""Faults and the user's own errors: the right party is blamed, and nothing trained is lost."""

from __future__ import annotations

import gc
import json
import os
import signal
import threading
import time

import numpy as np
import pandas as pd
import pytest
from conftest import load_job

from ray_vfl import PartyFailedError, Runtime, SecureBoostClassifier, TrainingCallback
from ray_vfl.errors import ConfigError, DataError


def test_a_silent_passive_party_is_blamed_not_the_label_party_waiting_for_it(ray_session, credit):
    """SIGSTOP a passive party's actor during training: the label party, blocked waiting for it,
    still answers probes; the stopped party does not, and the error names it within the timeout."""
    train_data, _ = credit
    runtime = Runtime(timeout_s=120)
    # Fresh actors take seconds to start on a loaded 2-core machine: a one-tree fit starts them, then the
    # 500-tree fit below reuses them under a short timeout (each phase of a tree takes well under a second).
    SecureBoostClassifier(n_estimators=1, max_depth=4, backend="plain", runtime=runtime).fit(train_data)
    runtime.timeout_s = 6
    first_tree_done = threading.Event()
    stopped = []

    class Signal(TrainingCallback):
        def after_iteration(self, iteration, logs):
            first_tree_done.set()
            return False

    def stop_party1():
        if first_tree_done.wait(timeout=60):
            _, pid = ray_session.get(runtime.actor("party1").alive.remote(), timeout=10)
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)

    clf = SecureBoostClassifier(n_estimators=500, max_depth=4, backend="plain", runtime=runtime, callbacks=[Signal()])
    stopper = threading.Thread(target=stop_party1)
    stopper.start()
    start = time.monotonic()
    try:
        with pytest.raises(PartyFailedError) as info:
            clf.fit(train_data)
    finally:
        stopper.join()
        for pid in stopped:  # the runtime killed it; let the process go if it has not
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    assert stopped, "the first tree never finished"
    assert info.value.party == "party1" and info.value.reason == "silent", info.value
    assert info.value.phase.startswith("tree ") and info.value.phase != "tree 0"  # counted from 1
    assert time.monotonic() - start < 6 + 30
    assert runtime._actors == {}


def test_a_failed_save_is_the_users_error_and_the_model_survives(runtime, credit, tmp_path):
    train_data, test_data = credit
    clf = SecureBoostClassifier(n_estimators=2, max_depth=3, backend="plain", runtime=runtime).fit(train_data)
    before = clf.predict_proba(test_data)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "party1.json").mkdir()  # party1's file cannot be written: a folder is in the way
    with pytest.raises(DataError, match="party 'party1'"):
        clf.save_model(str(tmp_path / "model"))
    (tmp_path / "file").write_text("")
    with pytest.raises(DataError, match="cannot save into"):
        clf.save_model(str(tmp_path / "file"))
    np.testing.assert_array_equal(clf.predict_proba(test_data), before)  # actors, model and parties intact
    clf.save_model(str(tmp_path / "good"))


def _nothing_unhandled(capfd) -> str:
    """What Ray wrote on stderr once the failed calls are gone: a clear error is not followed by Ray's
    "Unhandled error" reports (with their remote tracebacks) of the calls nobody fetched."""
    gc.collect()  # the refs of a failed wait live in reference cycles with its exception's frames
    time.sleep(2.0)  # Ray reports a dropped error from a thread of its own, when it frees the object
    err = capfd.readouterr().err
    assert "Unhandled error" not in err and "Traceback" not in err, err[-3000:]
    return err


def test_a_timeout_in_the_runtime_applies_when_the_estimator_sets_none(ray_session, credit, capfd):
    """One timeout, with a documented precedence: the config's if set, else the runtime's. The set-up
    calls still running when it fires are settled, not reported by Ray once the actors are killed."""
    train_data, _ = credit
    runtime = Runtime(timeout_s=1e-3)
    with pytest.raises(PartyFailedError, match=r"no answer within 0\.001 s"):
        SecureBoostClassifier(n_estimators=2, backend="plain", runtime=runtime).fit(train_data)
    runtime.kill_all()
    _nothing_unhandled(capfd)


def test_a_clear_error_is_not_followed_by_rays_unhandled_errors(ray_session, tmp_path, capfd):
    """Both parties refusing their input in one round, or the label party refusing its labels while the
    others' set-up calls wait on its key: one error, and nothing of Ray's after it (fresh actors, so
    that the failures land in a round of several calls, as in a user's first fit)."""
    from ray_vfl import SecureBoostRegressor, VerticalDataset, vertical_split
    from ray_vfl.pivodl import PIVODLConfig, train

    runtime = Runtime(timeout_s=120)
    try:
        rng = np.random.default_rng(0)
        x = rng.normal(size=300)
        frame = pd.DataFrame({"x": x, "z": rng.normal(size=300), "y": x * 1e6})
        with pytest.raises(ConfigError, match="set gradient_bound="):
            SecureBoostRegressor(n_estimators=1, max_depth=2, backend="paillier", key_bits=1024, allow_weak_keys=True,
                                 runtime=runtime).fit(vertical_split(frame, 2, label="y", seed=0))
        ids, y = np.arange(40), (rng.random(40) > 0.5).astype(float)
        pd.DataFrame({"id": ids, "a": rng.random(40), "y": np.where(ids < 25, y, np.nan)}).to_csv(tmp_path / "b.csv", index=False)
        pd.DataFrame({"id": ids, "b": rng.random(40), "y": np.where(ids >= 30, y, np.nan)}).to_csv(tmp_path / "s.csv", index=False)
        data = VerticalDataset.from_files({"party3": str(tmp_path / "b.csv"), "party4": str(tmp_path / "s.csv")},
                                          id_column="id", label="y", runtime=runtime)
        with pytest.raises(DataError, match="labelled at no client"):  # rows 25-29: both clients refuse them
            train(runtime, data, PIVODLConfig(n_trees=1, backend="plain"))
    finally:
        runtime.kill_all()
    _nothing_unhandled(capfd)


def _same_models(a, b):
    """Split for split and leaf for leaf: every tree's structure and weights, every party's records."""
    trees_a, trees_b = a.model_.trees(), b.model_.trees()
    assert len(trees_a) == len(trees_b)
    for ta, tb in zip(trees_a, trees_b):
        for field in ("left", "right", "owner", "record", "weight"):
            np.testing.assert_array_equal(getattr(ta, field), getattr(tb, field))
    assert a.model_.lookup_tables() == b.model_.lookup_tables()


def test_a_fit_killed_mid_training_resumes_from_its_checkpoint_to_the_same_model(ray_session, credit, tmp_path):
    """Kill a passive party's actor between trees 6 and 7 of 10 (from the driver's callback, so a fast machine
    cannot finish the fit first); the same fit again continues from the last tree every party saved and ends
    with the model of an uninterrupted run."""
    train_data, test_data = credit
    params = {"n_estimators": 10, "max_depth": 3, "backend": "plain"}
    runtime = Runtime(timeout_s=120)
    whole = SecureBoostClassifier(**params, runtime=runtime).fit(train_data)

    class KillAfterSix(TrainingCallback):
        def after_iteration(self, iteration, logs):
            if iteration == 5:  # tree 6 is done: its checkpoint or tree 7 meets a dead party1
                ray_session.kill(runtime.actor("party1"), no_restart=True)
            return False

    folder = str(tmp_path / "ckpt")
    with pytest.raises(PartyFailedError) as info:
        SecureBoostClassifier(**params, runtime=runtime, callbacks=[KillAfterSix()]).fit(
            train_data, checkpoint_dir=folder, checkpoint_every=1)
    assert info.value.party == "party1" and info.value.reason == "died"
    done = json.load(open(os.path.join(folder, "checkpoint.json")))["trees"]
    assert 5 <= done < 10
    resumed = SecureBoostClassifier(**params, runtime=runtime).fit(train_data, checkpoint_dir=folder, checkpoint_every=1)
    _same_models(resumed, whole)
    np.testing.assert_array_equal(resumed.predict_margin(test_data), whole.predict_margin(test_data))
    assert sorted(os.listdir(folder)) == ["checkpoint.json", "party0.tree-00010.json", "party1.tree-00010.json"], (done, os.listdir(folder))


def test_a_checkpoint_of_another_run_is_refused(runtime, credit, tmp_path):
    train_data, _ = credit
    folder = str(tmp_path / "ckpt")
    SecureBoostClassifier(n_estimators=2, max_depth=3, backend="plain", runtime=runtime).fit(train_data, checkpoint_dir=folder)
    with pytest.raises(ConfigError, match="max_depth: 3 then, 4 now"):
        SecureBoostClassifier(n_estimators=3, max_depth=4, backend="plain", runtime=runtime).fit(train_data, checkpoint_dir=folder)
    with pytest.raises(ConfigError, match="checkpoint_every"):
        SecureBoostClassifier(n_estimators=3, backend="plain", runtime=runtime).fit(train_data, checkpoint_dir=folder,
                                                                                     checkpoint_every=0)


def test_training_continues_from_a_saved_model(runtime, credit, tmp_path):
    """xgboost's ``xgb_model``: 3 trees, saved, then 2 more on the same data equal 5 trees at once."""
    train_data, test_data = credit
    params = {"max_depth": 3, "backend": "plain", "runtime": runtime}
    whole = SecureBoostClassifier(n_estimators=5, **params).fit(train_data)
    whole_trees, whole_margin = whole.model_.trees(), whole.predict_margin(test_data)
    first = SecureBoostClassifier(n_estimators=3, **params).fit(train_data)
    first.save_model(str(tmp_path / "three"))
    more = SecureBoostClassifier(n_estimators=2, **params).fit(train_data, xgb_model=str(tmp_path / "three"))
    assert more.n_trees_ == 5
    for ta, tb in zip(more.model_.trees(), whole_trees, strict=True):
        for field in ("left", "right", "owner", "record"):
            np.testing.assert_array_equal(getattr(ta, field), getattr(tb, field))
        np.testing.assert_allclose(ta.weight, tb.weight, rtol=1e-12)
    np.testing.assert_allclose(more.predict_margin(test_data), whole_margin, rtol=1e-12)
    again = SecureBoostClassifier(n_estimators=1, **params).fit(train_data, xgb_model=more)  # from a fitted estimator
    assert again.n_trees_ == 6
    with pytest.raises(ConfigError, match="model to continue has max_bin=32"):
        SecureBoostClassifier(n_estimators=1, max_bin=16, **params).fit(train_data, xgb_model=str(tmp_path / "three"))


def test_the_train_job_resumes_from_its_checkpoint_folder(ray_session, tmp_path):
    job = load_job("train")
    args = ["--backend", "plain", "--trees", "3", "--depth", "3", "--quiet", "--checkpoint-dir", str(tmp_path / "ckpt")]
    first = job.main(args)
    again = job.main(args)  # every tree is in the checkpoint: nothing to grow, the same model
    assert again["trees"] == first["trees"] == 3 and again["test_auc"] == first["test_auc"]
    assert json.load(open(tmp_path / "ckpt" / "checkpoint.json"))["trees"] == 3


def test_a_local_ray_that_misses_rays_start_up_limit_is_killed_and_started_again(monkeypatch):
    """Ray gives its raylet a fixed 30 s to register and raises a bare Exception past it (a busy machine):
    start_local_ray kills what that attempt started and starts Ray again; any other error is raised as it is.
    ``ray.init`` is replaced here (a real miss costs 30 s): its first call leaves a child process running."""
    import subprocess
    import sys

    from ray_vfl.runtime import local_ray

    leftovers, calls = [], []

    def init(**kwargs):
        calls.append(kwargs["_system_config"])
        if len(calls) == 1:
            leftovers.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
            raise Exception("The current node timed out during startup. This could happen because ...")

    monkeypatch.setattr(local_ray.ray, "init", init)
    started, aliases = local_ray._started, dict(local_ray._aliases)  # the session Ray's, restored after
    try:
        local_ray.start_local_ray(["bank"], 1)
        assert len(calls) == 2 and calls[0] is not calls[1] and calls[0] == calls[1]
        assert leftovers[0].poll() is not None  # killed (and reaped) before the second attempt
        monkeypatch.setattr(local_ray.ray, "init", lambda **kw: (_ for _ in ()).throw(Exception("another failure")))
        with pytest.raises(Exception, match="another failure"):
            local_ray.start_local_ray(["bank"], 1)
    finally:
        local_ray._started = started
        local_ray._aliases.clear()
        local_ray._aliases.update(aliases)
