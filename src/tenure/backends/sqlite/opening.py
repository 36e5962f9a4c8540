"""Opening the SQLite backend's file: to write (creating or migrating tenure's
database, never another program's) or only to read. A mixin of
:class:`~tenure.backends.sqlite.SQLiteBackend`."""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from tenure.backends.sqlfile import latest_version, load_migrations, split_statements
from tenure.backends.sqlite.storage import APPLICATION_ID, StorageFile, check_tenures
from tenure.core.clock import Clock
from tenure.errors import BackendUnavailable, TenureError

MIGRATIONS = load_migrations("tenure.backends.sqlite.migrations")
LATEST = latest_version(MIGRATIONS)
SQLITE_READONLY_DIRECTORY = 1544  # sqlite3 names it from Python 3.11.4 only


class Opening:
    """The SQLite backend's part that opens the file, checks it and migrates it."""

    path: str
    read_only: bool
    adopt: bool
    durable: bool
    busy_timeout: float
    clock: Clock
    _conn: sqlite3.Connection | None
    _fast: sqlite3.Connection | None
    _file: StorageFile

    if TYPE_CHECKING:

        def _tx(self) -> AbstractContextManager[sqlite3.Connection]: ...

        def _disconnect(self) -> None: ...

        def _failed(self, exc: sqlite3.Error | OSError) -> TenureError: ...

    def _open(self) -> None:
        if self._conn is not None:
            return
        if self.path != ":memory:":
            parent = Path(self.path).resolve().parent
            if not parent.is_dir():
                raise BackendUnavailable(
                    f"cannot open SQLite database {self.path}: directory {parent} does not exist"
                )
            if self.read_only and not Path(self.path).is_file():
                raise BackendUnavailable(f"SQLite database {self.path} does not exist")
        try:
            if self.read_only:
                self._conn = self._open_to_read()
            else:
                self._open_to_write()
            self._file.pin()
        except (sqlite3.Error, OSError) as exc:
            self._disconnect()
            raise self._failed(exc) from exc
        except BaseException:
            self._disconnect()
            raise

    def _open_to_write(self) -> None:
        """Open, create or migrate tenure's database; another program's is left as it is."""
        conn = self._conn = self._connect(self.path, self.busy_timeout)
        check_tenures(conn, self.path, adopt=self.adopt)  # before anything is written
        conn.execute("PRAGMA journal_mode = WAL")
        self._migrate()
        if not self.durable and self.path != ":memory:":
            self._fast = self._connect(self.path, 0.0)
            self._fast.execute("PRAGMA wal_autocheckpoint = 0")  # the thread checkpoints

    def _open_to_read(self) -> sqlite3.Connection:
        """Open tenure's database without writing anything to it (no migration, no
        change of journal mode), for commands that only read."""
        try:
            conn, tenures = self._reader(immutable=False)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != SQLITE_READONLY_DIRECTORY:
                raise
            # A user who may not write beside the file cannot create the shared
            # memory a WAL reader needs; no -wal file, no writer: read it as is.
            conn, tenures = self._reader(immutable=True)
        if not tenures:
            conn.close()
            raise BackendUnavailable(
                f"SQLite database {self.path} is empty: nothing was ever stored in it"
            )
        version = _schema_version(conn)
        if version != LATEST:
            conn.close()
            remedy = "upgrade tenure" if version > LATEST else "a worker migrates it"
            raise BackendUnavailable(
                f"SQLite database {self.path} has schema version {version} and this tenure "
                f"reads version {LATEST}: {remedy}"
            )
        return conn

    def _reader(self, *, immutable: bool) -> tuple[sqlite3.Connection, bool]:
        """A read-only connection, and whether the file holds tenure's tables."""
        conn = self._connect(self._file.read_only_uri(immutable=immutable), self.busy_timeout)
        try:
            return conn, check_tenures(conn, self.path)
        except BaseException:
            conn.close()
            raise

    def _connect(self, target: str, busy_timeout: float) -> sqlite3.Connection:
        conn = sqlite3.connect(
            target,
            timeout=busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            uri=target.startswith("file:"),
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            conn.execute(f"PRAGMA synchronous = {'FULL' if self.durable else 'NORMAL'}")
            conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            conn.close()
            raise
        return conn

    def _migrate(self) -> None:
        with self._tx() as conn:
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
                    f"SQLite database {self.path} has schema version {newest}, newer than this "
                    f"tenure knows ({LATEST}): upgrade tenure"
                )
            for version, name, script in MIGRATIONS:
                if version in done:
                    continue
                for statement in split_statements(script):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (version, name, self.clock.now()),
                )


def _schema_version(conn: sqlite3.Connection) -> int:
    (version,) = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
    return int(version)
