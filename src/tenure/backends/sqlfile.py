"""Named queries kept in ``.sql`` files, loaded once with importlib.resources,
and composed once at import: one scheme for PostgreSQL and SQLite.

A file holds blocks introduced by ``-- name: <query_name>``; the text up to the
next such line is the block. A block may name others as ``{y}``: the text of
block ``y`` (a part), or of a part the code makes (``code_parts``). A block
that no other names is a statement; ``composed`` makes statements of one block
with some of its parts bound to other blocks. Marks a backend fills in later
(identifiers, a limit, a list of placeholders) are named in ``left``.
Comments and indentation are stripped: they are for readers of the file.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Mapping
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
MARK = re.compile(r"\{([a-z_]+)\}")
_TRAILING_COMMENT = re.compile(r"--[^'\n]*$")  # none of our statements has "--" in a string


def load_queries(package: str, filename: str = "queries.sql") -> dict[str, str]:
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} defined twice in {package}/{filename}")
        queries[name] = body.strip()
    return queries


def without_comments(text: str) -> str:
    """A block as sent: without its comment lines, trailing comments and indentation."""
    code = (ln.strip() for ln in text.splitlines() if not ln.lstrip().startswith("--"))
    # .strip(): a comment between blocks (a section's heading) leaves no blank line
    return "\n".join(_TRAILING_COMMENT.sub("", ln).rstrip() for ln in code).strip()


def compose(
    blocks: Mapping[str, str],
    code_parts: Mapping[str, str] | None = None,
    composed: Mapping[str, tuple[str, Mapping[str, str]]] | None = None,
    *,
    left: frozenset[str] | set[str] = frozenset(),
) -> dict[str, str]:
    """Every statement's text, without comments, its parts written in; the
    marks in ``left`` stay as they are. ValueError for a part that no block or
    code part is, a block that names itself, or a name given twice."""
    code_parts = code_parts or {}
    composed = composed or {}
    blocks = {n: without_comments(b) for n, b in blocks.items()}
    if twice := blocks.keys() & code_parts.keys():
        raise ValueError(f"queries.sql: {sorted(twice)} are made by the code, not blocks")

    def text(name: str, binds: Mapping[str, str], within: tuple[str, ...]) -> str:
        if name in within:
            raise ValueError(f"queries.sql: {' -> '.join((*within, name))} names itself")
        if name in code_parts:
            return code_parts[name]
        if name not in blocks:
            raise ValueError(f"queries.sql: {within[-1]!r} names a part {name!r}, which is none")
        return MARK.sub(lambda m: mark(m.group(1), binds, (*within, name)), blocks[name])

    def mark(name: str, binds: Mapping[str, str], within: tuple[str, ...]) -> str:
        if name in left:
            return "{" + name + "}"
        return text(binds.get(name, name), binds, within)

    named = {m for body in blocks.values() for m in MARK.findall(body)} - set(left)
    for block, binds in composed.values():
        named |= {block, *binds.values()}
    statements = {n: text(n, {}, ()) for n in blocks if n not in named}
    for name, (block, binds) in composed.items():
        if name in blocks:
            raise ValueError(f"queries.sql: {name!r} is a block and composed")
        statements[name] = text(block, binds, (name,))
    return statements


def load_migrations(package: str) -> list[tuple[int, str, str]]:
    """``(version, name, script)`` for every ``NNNN_name.sql`` in the package, in
    order. Versions may skip numbers (work done in parallel takes its numbers
    ahead), never repeat one."""
    found = []
    for entry in resources.files(package).iterdir():
        m = re.fullmatch(r"(\d{4})_([a-z0-9_]+)\.sql", entry.name)
        if m:
            found.append((int(m.group(1)), m.group(2), entry.read_text(encoding="utf-8")))
    found.sort()
    versions = [v for v, _, _ in found]
    # Gaps are allowed: work in parallel branches takes numbers ahead of the merge.
    if len(set(versions)) != len(versions) or (versions and versions[0] < 1):
        raise ValueError(f"migrations of {package} are not numbered uniquely from 1: {versions}")
    return found


def latest_version(migrations: list[tuple[int, str, str]]) -> int:
    """The schema version a database has once every migration is applied."""
    return migrations[-1][0] if migrations else 0


def split_statements(script: str) -> Iterator[str]:
    """Split a script into complete statements."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                yield buffer
            buffer = ""
    if buffer.strip() and not all(
        ln.strip().startswith("--") or not ln.strip() for ln in buffer.splitlines()
    ):
        raise ValueError(f"incomplete statement at the end of a migration: {buffer!r}")
