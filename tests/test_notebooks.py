"""The notebooks run end to end (small variants), as a user opening them would run them, and show the
committed figures of the full studies, which a reader sees on GitHub without running anything."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
FIGURES = REPO / "benchmarks" / "figures"
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, sweep_out, monkeypatch):
    """Run with the session's results folder: the small sweeps they draw already ran in
    tests/test_experiments.py (when run in the same session), so the notebooks resume them."""
    out = sweep_out
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("VFL_NOTEBOOK_OUT", str(out))
    nb = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code"), "strip outputs before committing"
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    assert os.listdir(out)


def _images(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [link for cell in cells if cell["cell_type"] == "markdown" for link in IMAGE.findall("".join(cell["source"]))]


def test_every_committed_figure_is_shown_in_a_notebook_and_listed_in_the_readme():
    """Each PNG in benchmarks/figures is a markdown image in some notebook (next to the small run that
    draws it) and a link in the README's Figures list; every image either of them shows exists."""
    committed = {p.name for p in FIGURES.glob("*.png")}
    assert committed
    shown = set()
    for path in NOTEBOOKS:
        for link in _images(path):
            target = (path.parent / link).resolve()
            assert target.is_file(), f"{path.name} shows {link}, which does not exist"
            if target.parent == FIGURES:
                shown.add(target.name)
    assert not committed - shown, f"no notebook shows {sorted(committed - shown)}"
    links = re.findall(r"\]\((benchmarks/figures/[^)\s]+)\)", (REPO / "README.md").read_text(encoding="utf-8"))
    assert all((REPO / link).is_file() for link in links), [link for link in links if not (REPO / link).is_file()]
    listed = {Path(link).name for link in links}
    assert not committed - listed, f"README.md does not list {sorted(committed - listed)}"
