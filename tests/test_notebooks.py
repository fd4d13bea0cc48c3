"""The notebooks run end to end (small variants), as a user opening them would run them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.mark.parametrize("name", ["pivodl.ipynb", "ssxgb.ipynb", "fedads.ipynb", "scaling.ipynb"])
def test_notebook_runs(name, sweep_out, monkeypatch):
    """Run with the session's results folder: the small sweeps they draw already ran in
    tests/test_experiments.py (when run in the same session), so the notebooks resume them."""
    out = sweep_out
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("VFL_NOTEBOOK_OUT", str(out))
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code"), "strip outputs before committing"
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    assert os.listdir(out)
