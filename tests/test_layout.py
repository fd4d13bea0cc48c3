"""The package's layers, as the folder names show them: each imports only the layers below it.

The same holds one level down, inside ``crypto/`` and ``splitnn/`` (their sub-packages), and no module of
the package takes part in an import cycle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ray_vfl"
# Lowest first. Top-level modules (errors, config, metrics) serve every layer.
LAYERS = ["<top>", "runtime", "crypto", "psi", "data", "trees", "secureboost", "pivodl", "ssxgb", "splitnn",
          "experiments"]
# Protocol families are side by side: none imports another.
PEERS = {"secureboost", "pivodl", "ssxgb", "splitnn"}
# Inside a layer, its sub-packages, lowest first; "<top>" is the layer's own modules (its __init__, and for
# splitnn the drivers, the estimator, the data loaders and the tables), which sit above every sub-package.
SUBLAYERS = {
    "crypto": ["he", "two_server", "lattice", "privacy", "<top>"],
    "splitnn": ["privacy", "network", "unaligned", "<top>"],
}
# Sub-packages side by side: neither imports the other (BCP needs HE's helpers, DP and secure sums need neither).
SUBPEERS = {"crypto": {"two_server", "privacy"}, "splitnn": set()}
# The modules a layer keeps at its top; everything else lives in one of its sub-packages.
SUBTOP = {
    "crypto": ["__init__.py"],
    "splitnn": ["__init__.py", "attack.py", "data.py", "estimator.py", "experiments.py", "protocol.py", "unaligned_attack.py",
               "unaligned_protocol.py"],
}


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


def sublayer_of(module: str) -> str:
    """``ray_vfl.crypto.he.base`` -> ``he``; a layer's own modules (``ray_vfl.splitnn.protocol``) -> ``<top>``."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[2] in SUBLAYERS[parts[1]] else "<top>"


def test_sub_packages_import_only_lower_sub_packages():
    wrong = []
    for layer, order in SUBLAYERS.items():
        for path in (PACKAGE / layer).rglob("*.py"):
            module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
            mine = sublayer_of(module)
            for other in imported_modules(path):
                if layer_of(other) != layer:
                    continue
                theirs = sublayer_of(other)
                if theirs == mine:
                    continue
                if order.index(theirs) > order.index(mine) or {mine, theirs} <= SUBPEERS[layer]:
                    wrong.append(f"{path.relative_to(PACKAGE)} ({layer}/{mine}) imports {other} ({layer}/{theirs})")
    assert not wrong, "\n".join(wrong)


def test_layers_keep_their_modules_in_sub_packages():
    for layer, order in SUBLAYERS.items():
        folder = PACKAGE / layer
        assert sorted(p.name for p in folder.glob("*.py")) == sorted(SUBTOP[layer]), layer
        subs = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name != "__pycache__")
        assert subs == sorted(s for s in order if s != "<top>"), layer
        assert all((folder / s / "__init__.py").is_file() for s in subs), layer


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, from every import statement in it (at the top, in a
    function, under ``if TYPE_CHECKING``): an import deferred into a function still closes a cycle, it only
    runs later. ``from pkg import name`` imports the module ``pkg.name`` when there is one, else ``pkg``.
    Left out: the parent packages Python runs implicitly before a module (a package's ``__init__`` that
    re-exports its own modules is no cycle), and names the lazy exports load by string on first use."""
    def name_of(path: Path) -> str:
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    paths = {name_of(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                source = ".".join(base + ([node.module] if node.module else []))
                if source.split(".")[0] != "ray_vfl":
                    continue
                subs = {f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in paths}
                found |= subs | ({source} if len(subs) < len(node.names) else set())
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[module] = {m for m in found if m in paths}
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the strongly connected components with more than one module (or a self-import)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_strongly_connected_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert sorted(strongly_connected(graph)) == [["a", "b", "c"], ["e"]]


def test_no_import_cycle_between_modules():
    graph = import_graph()
    assert {"ray_vfl.crypto.he", "ray_vfl.data.alignment"} <= graph.keys()
    assert "ray_vfl.data.alignment" in graph["ray_vfl.data.dataset"]  # a deferred import counts
    cycles = strongly_connected(graph)
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_top_level_modules_import_no_layer():
    for name in ("errors.py", "config.py", "metrics.py"):
        assert all(layer_of(m) == "<top>" for m in imported_modules(PACKAGE / name)), name


# ``python -m ray_vfl.<name>`` commands: thin entry points at the package root (argument parsing, one call
# into a layer), the only other modules allowed there.
ENTRY_POINTS = ["certs.py", "serve.py"]


def test_no_flat_protocol_modules_left():
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert flat == sorted(["__init__.py", "config.py", "errors.py", "metrics.py"] + ENTRY_POINTS), flat
    for name in ENTRY_POINTS:
        text = (PACKAGE / name).read_text()
        assert "def main(" in text and "__main__" in text and len(text.splitlines()) <= 60, name


def test_nothing_reads_data_outside_the_repository():
    """A fresh clone has nothing beside it: no code, job, notebook or config names a folder outside the
    repository's data (the data sets ship in ray_vfl/data/files)."""
    repo = PACKAGE.parent
    part = "shared"  # the needles are built, so this file names no such path itself
    needles = [f"{part}/data", f'"{part}", "data"', f"'{part}', 'data'", f'"{part}" / "data"']
    hits = []
    for path in repo.rglob("*"):
        if path.suffix not in {".py", ".ipynb", ".yaml", ".toml", ".cfg"} and path.name != "run":
            continue
        if ".git" in path.parts or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        hits += [f"{path.relative_to(repo)}: {n}" for n in needles if n in text]
    assert not hits, "\n".join(hits)
