"""A folder of sweep configs (the repository's ``jobs/configs``): their names and one-line descriptions,
a name or a path resolved to a file, and the full paper study behind a ``_small`` twin.

Every paper study ships as ``NAME.yaml`` with a twin ``NAME_small.yaml`` that runs in about a minute
(same sweep keys and figures); each file's ``description`` key says what it reproduces and how long it
takes.

Example
-------
>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> for name in ("study", "study_small"):
...     with open(os.path.join(folder, name + ".yaml"), "w") as fh:
...         _ = fh.write(f"name: {name}\\ndescription: the {name}\\nprotocol: pivodl\\n")
>>> describe(folder)
{'study': 'the study', 'study_small': 'the study_small'}
>>> os.path.basename(resolve("study_small", folder)), full_study("study_small", folder)
('study_small.yaml', 'study')
"""

from __future__ import annotations

import glob
import os

from ..errors import ConfigError

__all__ = ["describe", "resolve", "full_study", "SMALL_SUFFIX"]

SMALL_SUFFIX = "_small"


def describe(folder: str) -> dict[str, str]:
    """Every ``*.yaml`` in ``folder`` by name (the file name without ``.yaml``), sorted: its ``description``
    (empty if it has none). Files that are not YAML mappings are left out."""
    import yaml

    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.yaml"))):
        with open(path, encoding="utf-8") as fh:
            try:
                raw = yaml.safe_load(fh)
            except yaml.YAMLError:
                continue
        if isinstance(raw, dict):
            out[os.path.basename(path)[: -len(".yaml")]] = " ".join(str(raw.get("description", "")).split())
    return out


def resolve(config: str, folder: str) -> str:
    """The file of ``config``: a path that exists, or the name of a config in ``folder`` (with or without
    ``.yaml``); a :class:`~ray_vfl.errors.ConfigError` naming the shipped configs otherwise."""
    if os.path.isfile(config):
        return config
    name = os.path.basename(config)
    path = os.path.join(folder, name if name.endswith(".yaml") else name + ".yaml")
    if os.path.isfile(path):
        return path
    raise ConfigError(f"no config {config!r}: give a YAML path or one of the configs in {folder}: "
                      f"{sorted(describe(folder))}")


def full_study(name: str, folder: str) -> str | None:
    """The full study whose small twin ``name`` is (``NAME_small`` -> ``NAME``), if ``folder`` ships it."""
    if not name.endswith(SMALL_SUFFIX):
        return None
    full = name[: -len(SMALL_SUFFIX)]
    return full if os.path.isfile(os.path.join(folder, full + ".yaml")) else None
