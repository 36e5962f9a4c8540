"""The PostgreSQL backend's statements: the blocks of ``queries.sql``, composed
by name at import and rendered to bytes once per backend.

A block (``-- name: x``) may name others as ``{y}``: the text of block ``y``
(a part), or of a part the code makes (``CODE_PARTS``: the job columns, from
``rows.JOB_COLUMNS``). A block that no other names is a statement;
``COMPOSED`` makes statements of one block with some of its parts bound to
other blocks. Comments and indentation are stripped at import: they are for
readers of queries.sql, and psycopg converts a query of more than 4 KiB again
at every execution (the cycle's statement, with its comments, took a seventh
of a draining worker's main thread doing so).

What is left is filled in per backend: ``{schema}`` and ``{channel}``,
identifiers quoted once (``Statements``). One value varies per call:
``{limit}``, an integer written into the text (a generic plan must know it,
see queries.sql), by ``Statements.limited``; it is the only value ever
formatted into SQL, every other one is a parameter. Arrays of text go as
array literals (``text_array``).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Iterator, Mapping

from psycopg import sql

from tenure.backends import sqlfile
from tenure.backends.rows import JOB_COLUMNS
from tenure.backends.sqlfile import MARK

TEXT_JSON = {"args", "result", "progress"}


def _selected(column: str) -> str:
    """A column as job_columns reads it: JSON as text; a job's worker is its
    lease holder while it is active (a completed job keeps the worker of its
    last attempt, for its history)."""
    if column in TEXT_JSON:
        return f"{column}::text"
    return "CASE WHEN state = 'active' THEN worker END" if column == "worker" else column


CODE_PARTS = {
    "job_columns": ", ".join(map(_selected, JOB_COLUMNS)),
    "done_columns": ", ".join(c if c in ("id", "fence") else "NULL" for c in JOB_COLUMNS),
}
# The cycle's statement, for queues without a fleet-wide limit, and with;
# each also as a _skipping twin, which passes over the jobs of some tasks; and
# each of those as is, to complete plain jobs only, and _releasing, to complete
# workflow steps too (the parts that release their dependents).
_CYCLES = {
    "complete_and_claim": {
        "gate": "gate", "shared": "shared", "bucket": "no_bucket"},
    "complete_and_claim_limited": {
        "gate": "gate_limited", "shared": "shared_limited", "bucket": "bucket"},
    "complete_and_claim_keyed": {
        "gate": "gate_keyed", "shared": "shared_keyed", "bucket": "bucket_keyed"},
    "complete_and_claim_keys": {
        "gate": "gate_keys", "shared": "shared_keyed", "bucket": "bucket_keys"},
}  # fmt: skip
_PLAIN = {"flow_release": "no_release", "flow_queues": "no_queues",
          "flow_events": "no_events", "flow_data": "no_data"}  # fmt: skip
RELEASING = "_releasing"
# The keyed walk of lock_keys: from the cursor in key_cursors, each key locked.
_KEYS_LOCKED = {"walk_cursor": "walk_cursor_own", "key_held": "key_locked",
                "key_jobs": "key_jobs_in_key_order"}  # fmt: skip
_SKIPS = (("", "no_skip"), ("_skipping", "skip"))
COMPOSED = {
    name + suffix + releasing: ("cycle", {**binds, "skip": skip, **plain})
    for name, binds in _CYCLES.items()
    for suffix, skip in _SKIPS
    for releasing, plain in (("", _PLAIN), (RELEASING, {}))
}
COMPOSED |= {"lock_keys" + s: ("keys_walk", {**_KEYS_LOCKED, "skip": skip}) for s, skip in _SKIPS}
COMPOSED |= {
    "add_workflow": ("add_steps", {"made": "new_workflow"}),
    "add_spawned": ("add_steps", {"made": "spawning"}),
}
IDENTIFIERS = frozenset({"schema", "channel"})
_PLACEHOLDER = re.compile(rb"%\(([a-z_]+)\)s")
LIMIT = "limit"
LIMITS_KEPT = 64  # distinct limits whose statement is kept (and so prepared), per statement


def compose(
    blocks: Mapping[str, str],
    code_parts: Mapping[str, str] = CODE_PARTS,
    composed: Mapping[str, tuple[str, Mapping[str, str]]] = COMPOSED,
) -> dict[str, str]:
    """``sqlfile.compose`` with this backend's parts; its identifiers and
    ``{limit}`` are left for ``Statements``."""
    return sqlfile.compose(blocks, code_parts, composed, left=IDENTIFIERS | {LIMIT})


TEMPLATES = compose(sqlfile.load_queries("tenure.backends.postgres"))


def quoted(identifier: str) -> str:
    """An identifier as SQL text, quoted (PostgreSQL's rules, any characters)."""
    return sql.Identifier(identifier).as_string(None)


class Statements:
    """The statements of one backend (its schema and channels), as psycopg is
    given them: bytes, each made once, so that psycopg's cache of conversions
    (keyed on the query) finds it at every execution."""

    def __init__(
        self, identifiers: Mapping[str, str], templates: Mapping[str, str] = TEMPLATES
    ) -> None:
        if set(identifiers) != IDENTIFIERS:
            raise ValueError(f"Statements takes the identifiers {sorted(IDENTIFIERS)}")
        self._quoted = {n: quoted(v) for n, v in identifiers.items()}
        self._fixed: dict[str, bytes] = {}
        self._pieces: dict[str, list[bytes]] = {}  # of a statement with a limit, around it
        for name, text in templates.items():
            pieces = self.render(text).split(b"{" + LIMIT.encode() + b"}")
            if len(pieces) == 1:
                self._fixed[name] = pieces[0]
            else:
                self._pieces[name] = pieces
        self._limited: dict[str, dict[int, bytes]] = {n: {} for n in self._pieces}
        self.with_limit = frozenset(self._pieces)  # statements that take one (limited)
        self._positional: dict[bytes, tuple[bytes, tuple[str, ...]]] = {}

    def render(self, text: str) -> bytes:
        """``text`` with this backend's identifiers in (a migration's script)."""
        return MARK.sub(lambda m: self._quoted.get(m.group(1), m.group(0)), text).encode()

    def __getitem__(self, name: str) -> bytes:
        found = self._fixed.get(name)
        if found is None:
            if name in self._pieces:
                raise KeyError(f"statement {name!r} takes a limit: Statements.limited")
            raise KeyError(f"no statement {name!r} in queries.sql")
        return found

    def limited(self, name: str, limit: int) -> bytes:
        """Statement ``name`` with ``limit`` written in (an integer: ``%d``)."""
        kept = self._limited[name]
        found = kept.get(limit)
        if found is None:
            found = (b"%d" % operator.index(limit)).join(self._pieces[name])
            if len(kept) < LIMITS_KEPT:
                kept[limit] = found
        return found

    def positional(self, query: bytes) -> tuple[bytes, tuple[str, ...]]:
        """``query`` with ``$n`` for its ``%(name)s`` placeholders, and the
        names in their order: for a raw cursor, which converts nothing. The
        cycle's statement is over 4 KiB, past which psycopg converts a query
        again at every execution (40 us of the worker's thread a cycle)."""
        found = self._positional.get(query)
        if found is None:
            names: list[str] = []

            def number(m: re.Match[bytes]) -> bytes:
                name = m.group(1).decode()
                if name not in names:
                    names.append(name)
                return b"$%d" % (names.index(name) + 1)

            found = _PLACEHOLDER.sub(number, query), tuple(names)
            if len(self._positional) < LIMITS_KEPT * 4:
                self._positional[query] = found
        return found

    def __iter__(self) -> Iterator[str]:
        yield from self._fixed
        yield from self._pieces


def text_array(values: Iterable[str]) -> str:
    """A PostgreSQL array literal of text values, each quoted (so that NULL,
    commas and braces are only text) with its quotes and backslashes escaped."""
    quoted = ['"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values]
    return "{" + ",".join(quoted) + "}"
