"""Opening the SQLite backend's file: to write (creating or migrating tenure's
database, never another program's) or only to read."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tenure.backends.sqlfile import latest_version, load_migrations, split_statements
from tenure.backends.sqlite.storage import APPLICATION_ID, StorageFile, check_tenures
from tenure.core.clock import Clock
from tenure.errors import BackendUnavailable

MIGRATIONS = load_migrations("tenure.backends.sqlite.migrations")
LATEST = latest_version(MIGRATIONS)
SQLITE_READONLY_DIRECTORY = 1544  # sqlite3 names it from Python 3.11.4 only


def check_place(path: str, read_only: bool) -> None:
    """BackendUnavailable unless the file can be where ``path`` says: its
    directory exists, and so does the file if it is only to be read."""
    if path == ":memory:":
        return
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise BackendUnavailable(
            f"cannot open SQLite database {path}: directory {parent} does not exist"
        )
    if read_only and not Path(path).is_file():
        raise BackendUnavailable(f"SQLite database {path} does not exist")


def connect(target: str, busy_timeout: float, durable: bool) -> sqlite3.Connection:
    """A connection to ``target`` (a path or a ``file:`` URI), set up as tenure uses them."""
    conn = sqlite3.connect(
        target,
        timeout=busy_timeout,
        isolation_level=None,
        check_same_thread=False,
        uri=target.startswith("file:"),
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
        conn.execute("PRAGMA foreign_keys = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def open_to_read(file: StorageFile, busy_timeout: float, durable: bool) -> sqlite3.Connection:
    """Open tenure's database without writing anything to it (no migration, no
    change of journal mode), for commands that only read."""
    try:
        conn, tenures = _reader(file, busy_timeout, durable, immutable=False)
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode != SQLITE_READONLY_DIRECTORY:
            raise
        # A user who may not write beside the file cannot create the shared
        # memory a WAL reader needs; no -wal file, no writer: read it as is.
        conn, tenures = _reader(file, busy_timeout, durable, immutable=True)
    if not tenures:
        conn.close()
        raise BackendUnavailable(
            f"SQLite database {file.path} is empty: nothing was ever stored in it"
        )
    version = _schema_version(conn)
    if version != LATEST:
        conn.close()
        remedy = "upgrade tenure" if version > LATEST else "a worker migrates it"
        raise BackendUnavailable(
            f"SQLite database {file.path} has schema version {version} and this tenure "
            f"reads version {LATEST}: {remedy}"
        )
    return conn


def _reader(
    file: StorageFile, busy_timeout: float, durable: bool, *, immutable: bool
) -> tuple[sqlite3.Connection, bool]:
    """A read-only connection, and whether the file holds tenure's tables."""
    conn = connect(file.read_only_uri(immutable=immutable), busy_timeout, durable)
    try:
        return conn, check_tenures(conn, file.path)
    except BaseException:
        conn.close()
        raise


def migrate(conn: sqlite3.Connection, path: str, clock: Clock) -> None:
    """Apply the migrations ``conn``'s database lacks, in the transaction open on it."""
    if conn.execute("PRAGMA application_id").fetchone()[0] == 0:  # not another's id
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations"
        " (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
    )
    done = {v for (v,) in conn.execute("SELECT version FROM schema_migrations")}
    newest = max(done, default=0)
    if newest > LATEST:
        raise BackendUnavailable(
            f"SQLite database {path} has schema version {newest}, newer than this "
            f"tenure knows ({LATEST}): upgrade tenure"
        )
    for version, name, script in MIGRATIONS:
        if version in done:
            continue
        for statement in split_statements(script):
            conn.execute(statement)
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
            (version, name, clock.now()),
        )


def _schema_version(conn: sqlite3.Connection) -> int:
    (version,) = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
    return int(version)
