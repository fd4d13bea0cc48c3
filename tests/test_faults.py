"""Faults and the user's own errors: the right party is blamed, and nothing trained is lost."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from ray_vfl import PartyFailedError, Runtime, SecureBoostClassifier, TrainingCallback
from ray_vfl.errors import DataError


def test_a_silent_passive_party_is_blamed_not_the_label_party_waiting_for_it(ray_session, credit):
    """SIGSTOP a passive party's actor during training: the label party, blocked waiting for it,
    still answers probes; the stopped party does not, and the error names it within the timeout."""
    train_data, _ = credit
    runtime = Runtime(timeout_s=12)  # set-up of fresh actors on a loaded 2-core machine takes seconds
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
    assert time.monotonic() - start < 12 + 30
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


def test_a_timeout_in_the_runtime_applies_when_the_estimator_sets_none(ray_session, credit):
    """One timeout, with a documented precedence: the config's if set, else the runtime's."""
    train_data, _ = credit
    runtime = Runtime(timeout_s=1e-3)
    with pytest.raises(PartyFailedError, match=r"no answer within 0\.001 s"):
        SecureBoostClassifier(n_estimators=2, backend="plain", runtime=runtime).fit(train_data)
    runtime.kill_all()
