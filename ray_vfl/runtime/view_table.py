"""A protocol's view table as data: the table in its module docstring, parsed, and checked against a run.

Every protocol module opens with a reStructuredText simple table: one row per message, with the columns
``round``, ``sender -> receiver``, ``payload`` and ``what the receiver learns``. A row's ``sender ->
receiver`` cell names the roles on its first line and, in parentheses on the lines below, the message
kinds the row covers (the ``kind`` of :meth:`ray_vfl.runtime.comm.Mailbox.send`). A row without kinds
is not a message through the metered send path (the driver dealing roles, a party's own computation).
Its ``learns`` cell starts with ``nothing`` when the receiver learns nothing of any secret; any other
row admits a leak, and names the attack that measures it as ``[attack: module.function]``, except a row to
``caller``: the result whoever called the protocol asked for (predictions, sealed to that call's key).

:func:`view_table` parses that table; :func:`check_views` compares it with the records of a run (the
``(sender, receiver, kind)`` triples each party metered), both ways, after mapping parties to roles.

Example
-------
>>> doc = '''
... =====  ==================  =========  ==================================
... round  sender -> receiver  payload    what the receiver learns
... =====  ==================  =========  ==================================
... once   active -> passive   key        nothing secret
...        (public_key)
... 1      active -> passive   Enc(g)     nothing (semantic security)
...        (encrypted_gh)
... =====  ==================  =========  ==================================
... '''
>>> rows = view_table(doc)
>>> [(r.sender, r.receivers, r.kinds, r.learns_nothing) for r in rows]
[('active', ('passive',), ('public_key',), True), ('active', ('passive',), ('encrypted_gh',), True)]
>>> check_views(rows, [("a", "b", "public_key"), ("a", "b", "encrypted_gh")], {"a": "active", "b": "passive"})
[]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from ..errors import VFLError

_ATTACK = re.compile(r"\[attack:\s*([\w.]+)\]")
_KINDS = re.compile(r"^\(([\w, ]+)\)$")


@dataclass(frozen=True)
class ViewRow:
    """One row of a view table: who sends which message kinds to whom, and what the receiver learns."""

    round: str
    sender: str
    receivers: tuple[str, ...]
    kinds: tuple[str, ...]
    payload: str
    learns: str
    attacks: tuple[str, ...]

    @property
    def learns_nothing(self) -> bool:
        """The receiver learns nothing of any secret (the row must be tested as a distribution)."""
        return self.learns.lower().startswith("nothing")

    @property
    def is_output(self) -> bool:
        """The row hands the protocol's result to whoever called it (:data:`ray_vfl.runtime.seal.CALLER`):
        what the caller asked for, not a leak to attack."""
        return self.receivers == ("caller",)

    def triples(self) -> set[tuple[str, str, str]]:
        return {(self.sender, receiver, kind) for receiver in self.receivers for kind in self.kinds}


def _columns(border: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(r"=+", border)]


def _cells(line: str, spans: list[tuple[int, int]]) -> list[str]:
    cells = []
    for i, (start, _) in enumerate(spans):
        end = spans[i + 1][0] if i + 1 < len(spans) else len(line)
        cells.append(line[start:end].strip())
    return cells


def _roles(text: str) -> tuple[str, tuple[str, ...]]:
    if "->" not in text:
        raise VFLError(f"view table: a 'sender -> receiver' cell reads {text!r}; write it as 'role -> role'")
    sender, receivers = (part.strip() for part in text.split("->", 1))
    return sender, tuple(r.strip() for r in receivers.split(",") if r.strip())


def view_table(doc: str, table: int = 0) -> list[ViewRow]:
    """The rows of the ``table``-th view table in a module docstring ``doc``.

    A view table is a simple table whose header's second column is ``sender -> receiver``. Raises
    :class:`~ray_vfl.errors.VFLError` naming the problem when ``doc`` holds no such table or a row's
    cells do not read as the module docstring says above.
    """
    lines = (doc or "").splitlines()
    found = []
    i = 0
    while i < len(lines) - 2:
        if re.fullmatch(r"\s*=+(\s+=+)+\s*", lines[i]) and "sender -> receiver" in lines[i + 1] \
                and lines[i + 2].strip() == lines[i].strip():
            end = next((j for j in range(i + 3, len(lines)) if lines[j].strip() == lines[i].strip()), None)
            if end is None:
                raise VFLError("view table: no closing border line; end the table with its '=====' line")
            found.append((_columns(lines[i]), lines[i + 3:end]))
            i = end
        i += 1
    if len(found) <= table:
        raise VFLError(f"view table: the docstring holds {len(found)} view table(s), asked for number {table}; "
                       "open the protocol module with a table whose header names 'sender -> receiver'")
    spans, body = found[table]
    grouped: list[list[list[str]]] = []
    for line in body:
        if not line.strip():
            continue
        cells = _cells(line, spans)
        if cells[0] or not grouped:
            grouped.append([cells])
        else:
            grouped[-1].append(cells)
    rows = []
    for group in grouped:
        columns = [[c[k] for c in group if c[k]] for k in range(len(spans))]
        round_, who, payload, learns = (columns[0], columns[1], columns[2], columns[-1])
        if not who:
            raise VFLError(f"view table: round {' '.join(round_)!r} has no 'sender -> receiver'")
        sender, receivers = _roles(who[0])
        kinds: list[str] = []
        if who[1:]:
            extra = " ".join(who[1:])
            match = _KINDS.match(extra)
            if not match:
                raise VFLError(f"view table: round {' '.join(round_)!r}: {extra!r} under the roles is not a "
                               "'(kind, kind)' list")
            kinds = [k.strip() for k in match.group(1).split(",") if k.strip()]
        text = " ".join(learns)
        rows.append(ViewRow(" ".join(round_), sender, receivers, tuple(kinds), " ".join(payload), text,
                            tuple(_ATTACK.findall(text))))
    return rows


def check_views(rows: Sequence[ViewRow], records: Iterable, roles: Mapping[str, str] | Callable[[str], str],
                optional: Iterable[str] = ()) -> list[str]:
    """What differs between a view table and the messages of a run, both ways; empty when they agree.

    ``records``: :class:`~ray_vfl.runtime.comm.Record` objects or ``(sender, receiver, kind)`` triples.
    ``roles`` maps a party's name to the role the table names it by. Every recorded triple must be a row of
    the table; every row's triple must be recorded, unless its kind is in ``optional`` (rows a run with
    these options does not reach).
    """
    role = roles if callable(roles) else roles.__getitem__
    table = set().union(*(r.triples() for r in rows)) if rows else set()
    seen = set()
    for record in records:
        sender, receiver, kind = (record if isinstance(record, tuple)
                                  else (record.sender, record.receiver, record.kind))
        seen.add((role(sender), role(receiver), kind))
    optional = set(optional)
    problems = [f"recorded but not in the table: {s} -> {r} ({k})" for s, r, k in sorted(seen - table)]
    problems += [f"in the table but never sent: {s} -> {r} ({k})" for s, r, k in sorted(table - seen)
                 if k not in optional]
    return problems
