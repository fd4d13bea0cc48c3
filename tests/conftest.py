"""One Ray instance per test session, on loopback, with every test party's resource.

Settings from ../shared/RAY_NOTES.md: no usage stats, no auth, a short
RAY_TMPDIR, and a HOME holding ``ray_bootstrap_config.yaml`` so Ray's
dashboard never probes cloud metadata addresses.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEST_PARTIES = ["party0", "party1", "party2", "party3", "party4", "bank", "shop", "mall", "server_c", "server_s"]

_SCRATCH = tempfile.mkdtemp(prefix="vflh")
_RAY_TMP = tempfile.mkdtemp(prefix="rt", dir="/tmp")
Path(_SCRATCH, "ray_bootstrap_config.yaml").write_text("provider: {type: local}\n")
os.environ.update(
    RAY_USAGE_STATS_ENABLED="0",
    RAY_AUTH_MODE="disabled",
    RAY_TMPDIR=_RAY_TMP,
    HOME=_SCRATCH,
    RAY_USAGE_STATS_REPORT_URL="http://127.0.0.1:9/",
)
os.environ.pop("RAY_ADDRESS", None)


# Scripts whose result a test reads, run in processes of their own: started when the session starts (if the
# test file is among the paths pytest was given), so their start-up (a multi-node Ray cluster's: seconds of CPU)
# overlaps the collection of the tests, which keeps one core busy; otherwise started by the first test asking.
# Each: (the test file that reads it, the script and its arguments ("{out}": the run's own folder), variables of
# the session's environment it runs without).
BACKGROUND = {
    "cluster": ("tests/test_cluster.py", ["tests/cluster_run.py", "{out}"], ()),
    # jobs/train.py starting a Ray of its own as a user's shell does: Ray's default token authentication
    "train_18_parties": ("tests/test_job.py", ["jobs/train.py", "--parties", "18", "--backend", "plain", "--trees", "1",
                                               "--depth", "2", "--quiet", "--json", "{out}/report.json"],
                         ("RAY_AUTH_MODE",)),
}
_started: dict[str, tuple[subprocess.Popen, str, str]] = {}


def _start(name: str) -> None:
    _, argv, unset = BACKGROUND[name]
    folder = tempfile.mkdtemp(prefix=f"vfl-{name}-", dir=_SCRATCH)
    ray_tmp = tempfile.mkdtemp(prefix="rb", dir="/tmp")  # its Ray's own short RAY_TMPDIR (socket path limit)
    out, err = (open(os.path.join(folder, f), "w") for f in ("stdout.txt", "stderr.txt"))
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(RAY_TMPDIR=ray_tmp, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable] + [a.format(out=folder) for a in argv], stdout=out, stderr=err, env=env,
                            cwd=REPO, start_new_session=True)
    out.close(), err.close()
    _started[name] = (proc, folder, ray_tmp)


def _selected(config, test_file: Path) -> bool:
    if config.option.keyword or config.option.markexpr:
        return False  # a selection by name or mark: the test starts its script if it runs
    here = Path(config.invocation_params.dir)
    for arg in config.args:
        path = (here / arg.split("::")[0]).resolve()
        if path == test_file or path in test_file.parents:
            return True
    return False


def pytest_sessionstart(session):
    for name, (test_file, _, _) in BACKGROUND.items():
        if _selected(session.config, REPO / test_file):
            _start(name)


def background_result(name: str, timeout_s: float = 600) -> tuple[subprocess.CompletedProcess, Path]:
    """The finished run of the background script ``name`` (started now if the session did not start it) and
    the folder it wrote into."""
    if name not in _started:
        _start(name)
    proc, folder, _ = _started[name]
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    read = [Path(folder, f).read_text(errors="replace") for f in ("stdout.txt", "stderr.txt")]
    return subprocess.CompletedProcess(proc.args, proc.returncode, *read), Path(folder)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """Ray's temp folders and the scratch HOME go at the end of every run, whether or not a test started Ray;
    a background script still running (its test deselected or interrupted) is stopped with its process group."""
    for proc, _, ray_tmp in _started.values():
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    for folder in (_RAY_TMP, _SCRATCH):
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from ray_vfl.runtime.actors import RESOURCE_UNITS, party_resource

    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=512 * 1024**2,
        log_to_driver=False,
        resources={party_resource(p): RESOURCE_UNITS for p in TEST_PARTIES},
    )
    yield ray
    ray.shutdown()
    shutil.rmtree(_RAY_TMP, ignore_errors=True)


@pytest.fixture(scope="session")
def runtime(ray_session):
    """A runtime shared by the tests: its actors are reused from fit to fit."""
    from ray_vfl import Runtime

    rt = Runtime(timeout_s=300)
    yield rt
    rt.kill_all()


@pytest.fixture(scope="session")
def sweep_out(tmp_path_factory):
    """One results folder for the shipped small sweeps and the notebooks: a notebook resumes the sweeps
    tests/test_experiments.py already ran (the same configs, the same run ids) instead of redoing them."""
    return tmp_path_factory.mktemp("sweeps")


@pytest.fixture(scope="session")
def credit():
    """The credit data split over 2 parties, 80/20 with seed 0."""
    from ray_vfl import vertical_split
    from ray_vfl.data.bundled import load_named

    frame, label, _, _ = load_named("credit")
    data = vertical_split(frame, 2, label=label, seed=0)
    return data.train_test_split(0.2, seed=0)


@pytest.fixture(scope="session")
def unaligned_at_both(runtime):
    """Split-NN rows where both parties keep rows outside the intersection (in-process PSI): ``bank`` (labels)
    has 3,000 rows, ``shop`` every second one of them plus 300 users the bank does not have. Returns the
    aligned dataset (each party's unaligned rows kept) and the bank's row count."""
    import pandas as pd

    from ray_vfl import VerticalDataset
    from ray_vfl.splitnn import make_fedads_like

    data = make_fedads_like(3_000, aligned_fraction=1.0, seed=4, label_party="bank", nonlabel_party="shop")
    ids = data.train.ids
    bank = data.train.features["bank"].assign(id=ids, y=data.train.label)
    shop = data.train.features["shop"].assign(id=ids).iloc[::2]
    extra = shop.iloc[:300].assign(id=shop["id"].iloc[:300] + 10**7)  # shop users the bank does not have
    shop = pd.concat([shop.iloc[::-1], extra])
    aligned = VerticalDataset.from_frames({"bank": bank, "shop": shop}, label="y", categorical=data.train.categorical,
                                          align="psi", runtime=runtime)
    return aligned, len(ids)


@functools.cache
def load_job(name: str):
    """The job script ``jobs/<name>.py`` as a module (its ``__main__`` block does not run), loaded once per
    session; a test that changes one of its names does so with ``monkeypatch``."""
    spec = importlib.util.spec_from_file_location(f"job_{name}", REPO / "jobs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def data_file(name: str) -> Path:
    """A data file the package ships (ray_vfl/data/files): the tests read nothing outside the repository."""
    from ray_vfl.data.bundled import BUNDLED_DIR

    return Path(BUNDLED_DIR) / name


def read_payload(message, mailbox=None):
    """What a receiver reads in a sealed message: opened with the key pair of ``mailbox`` (default: the
    message's first receiver's in this process) and decoded, but not checked against its kind's schema
    (tests build malformed payloads from it)."""
    from ray_vfl.runtime.codec import decode
    from ray_vfl.runtime.seal import Seal

    seal = Seal(message.receivers[0]) if mailbox is None else mailbox.seal
    return decode(seal.unseal(message.kind, message.sender, message.receivers, message.tree, message.depth,
                              message.wire))


def introduce(runtime, party: str, mailbox) -> None:
    """Let a mailbox of this process and the actor of ``party`` seal messages to each other (what
    ``Runtime.introduce`` does between actors)."""
    name, key = runtime.get([(party, runtime.actor(party).mailbox_key.remote())], "introduce")[0]
    mailbox.trust({name: key})
    runtime.get([(party, runtime.actor(party).trust_mailboxes.remote({mailbox.name: mailbox.public_key}))], "introduce")
