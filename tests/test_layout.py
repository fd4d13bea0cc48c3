"""The package's layers, as the folder names show them: each imports only the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ray_vfl"
# Lowest first. Top-level modules (errors, config, metrics) serve every layer.
LAYERS = ["<top>", "runtime", "crypto", "psi", "data", "trees", "secureboost", "pivodl", "ssxgb", "splitnn",
          "experiments"]
# Protocol families are side by side: none imports another.
PEERS = {"secureboost", "pivodl", "ssxgb", "splitnn"}


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else "<top>"


def imported_modules(path: Path) -> set[str]:
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if path.name == "__init__.py":
        package = package.rsplit(".", 1)[0] + ".__init__"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: -node.level]
                found.add(".".join(base + ([node.module] if node.module else [])))
            elif node.module and node.module.startswith("ray_vfl"):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ray_vfl")}
    return found


def test_every_module_imports_only_lower_layers():
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent == PACKAGE:  # the package root and the shared top-level modules
            continue
        mine = layer_of(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        for module in imported_modules(path):
            theirs = layer_of(module)
            if module == "ray_vfl" or theirs == mine:
                continue
            if LAYERS.index(theirs) > LAYERS.index(mine) or (theirs in PEERS and mine in PEERS):
                wrong.append(f"{path.relative_to(PACKAGE)} ({mine}) imports {module} ({theirs})")
    assert not wrong, "\n".join(wrong)


def test_top_level_modules_import_no_layer():
    for name in ("errors.py", "config.py", "metrics.py"):
        assert all(layer_of(m) == "<top>" for m in imported_modules(PACKAGE / name)), name


def test_no_flat_protocol_modules_left():
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert flat == ["__init__.py", "config.py", "errors.py", "metrics.py"], flat


def test_nothing_reads_data_outside_the_repository():
    """A fresh clone has nothing beside it: no code, job, notebook or config names a folder outside the
    repository's data (the data sets ship in ray_vfl/data/files)."""
    repo = PACKAGE.parent
    needles = ["shared/data", '"shared", "data"', "'shared', 'data'", '"shared" / "data"']
    hits = []
    for path in repo.rglob("*"):
        if path.suffix not in {".py", ".ipynb", ".yaml", ".toml", ".cfg"} and path.name != "run":
            continue
        if ".git" in path.parts or not path.is_file() or path == Path(__file__).resolve():
            continue
        text = path.read_text(errors="replace")
        hits += [f"{path.relative_to(repo)}: {n}" for n in needles if n in text]
    assert not hits, "\n".join(hits)
