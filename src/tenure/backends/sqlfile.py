"""Named queries kept in ``.sql`` files, loaded once with importlib.resources.

A file holds blocks introduced by ``-- name: <query_name>``; the text up to the
next such line (comments included) is the query.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def load_queries(package: str, filename: str = "queries.sql") -> dict[str, str]:
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} defined twice in {package}/{filename}")
        queries[name] = body.strip()
    return queries


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
