"""The file under the SQLite backend: whose it is, whether it is still the one
opened, and what its errors mean.

A connection keeps using the file it opened even after that file was deleted
or replaced (renamed over), and in WAL mode SQLite does not notice: a worker
would go on alone while producers write to a new file. So the backend pins the
file's identity (device, inode) when it opens it and checks it once per
heartbeat and sweep, and at every error. A file deleted, replaced or no longer
a database is :class:`~tenure.errors.StorageLost`; any other error of SQLite
(disk full, I/O error, a lock held too long, a read-only file) is
:class:`~tenure.errors.BackendUnavailable`, with its cause in one line.
"""

from __future__ import annotations

import os
import sqlite3
from urllib.parse import quote

from tenure.errors import BackendUnavailable, InvalidInput, StorageLost, TenureError

# PRAGMA application_id of every file tenure creates ("tenu"): how a reader tells
# tenure's database from another program's without reading its tables.
APPLICATION_ID = 0x74656E75

# Primary result codes that mean the file is no longer a database.
_LOST = {
    sqlite3.SQLITE_NOTADB: "not a database",
    sqlite3.SQLITE_CORRUPT: "corrupt",
}
# Primary result codes of storage that may come back: the cause, in words.
_CAUSES = {
    sqlite3.SQLITE_FULL: "disk full",
    sqlite3.SQLITE_IOERR: "I/O error",
    sqlite3.SQLITE_BUSY: "locked by another process for longer than the busy timeout",
    sqlite3.SQLITE_LOCKED: "locked",
    sqlite3.SQLITE_READONLY: "read-only",
    sqlite3.SQLITE_CANTOPEN: "cannot be opened",
    sqlite3.SQLITE_PERM: "permission denied",
    sqlite3.SQLITE_NOMEM: "out of memory",
    sqlite3.SQLITE_PROTOCOL: "locking protocol error",
}


class StorageFile:
    """The database file one backend opened, by path and by identity."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) once opened

    @property
    def in_memory(self) -> bool:
        return self.path == ":memory:"

    def pin(self) -> None:
        """Remember which file the path names now: the one just opened."""
        if not self.in_memory:
            st = os.stat(self.path)
            self._identity = (st.st_dev, st.st_ino)

    def check(self) -> None:
        """StorageLost if the path no longer names the file that was opened."""
        if self._identity is None:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise StorageLost(
                f"SQLite database {self.path} was deleted while open: stopping rather than "
                "going on alone with the deleted file"
            ) from None
        except OSError:
            return  # cannot tell (e.g. a directory made unreadable): not proof of loss
        if (st.st_dev, st.st_ino) != self._identity:
            raise StorageLost(
                f"SQLite database {self.path} was replaced by another file while open: "
                "stopping rather than going on alone with the old one"
            )
        # SQLite reads the file's first page only when its WAL lacks it, so read
        # it here: through SQLite, never open()/close(). Closing any descriptor of
        # the file drops every POSIX lock this process holds on it; another
        # process closing its last connection then takes itself for the last one
        # and deletes the WAL this process still writes to (writes lost). SQLite's
        # own close waits while its connections hold locks.
        try:
            probe = sqlite3.connect(self.read_only_uri(immutable=True), uri=True)
            try:
                probe.execute("PRAGMA schema_version").fetchone()  # reads the header
            finally:
                probe.close()
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_NOTADB:
                raise StorageLost(
                    f"SQLite database {self.path} was overwritten while open: the file is "
                    "not a database any more"
                ) from None

    def error(self, exc: sqlite3.Error | OSError) -> TenureError:
        """The typed error for an error of this file's storage."""
        try:
            self.check()  # a deleted or replaced file explains any error
        except StorageLost as lost:
            return lost
        opened = self._identity is not None or self.in_memory
        head = ("" if opened else "cannot open ") + f"SQLite database {self.path}"
        if isinstance(exc, OSError):
            return BackendUnavailable(f"{head}: {exc}")
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        if primary in _LOST:
            message = f"{head}: the file is {_LOST[primary]}: {exc}"
            # lost if it was a database when opened; never one: a wrong path, say
            return StorageLost(message) if opened else BackendUnavailable(message)
        cause = _CAUSES.get(primary) if primary is not None else None
        if cause is None or cause in str(exc):
            return BackendUnavailable(f"{head}: {exc}")
        return BackendUnavailable(f"{head}: {cause} ({exc})")

    def read_only_uri(self, *, immutable: bool = False) -> str:
        """The URI that opens the file for reading only: never created, never written."""
        uri = f"file:{quote(os.path.abspath(self.path))}?mode=ro"
        return uri + "&immutable=1" if immutable else uri


def check_tenures(conn: sqlite3.Connection, path: str, *, adopt: bool = False) -> bool:
    """Whether the file holds tenure's tables (True), or may be given them (False:
    it is empty, or ``adopt`` says to add them beside another program's);
    InvalidInput, before anything is written, if it is another program's."""
    (app_id,) = conn.execute("PRAGMA application_id").fetchone()
    if app_id == APPLICATION_ID:
        return True
    listed = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    tables = sorted(name for (name,) in listed)
    if {"schema_migrations", "jobs", "queues"} <= set(tables):
        # adopted, or made before tenure marked its files: its first migration says so
        row = conn.execute("SELECT name FROM schema_migrations WHERE version = 1").fetchone()
        if row is not None and row[0] == "initial":
            return True
    if adopt or (app_id == 0 and not tables):
        return False
    shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
    whose = f"application id {app_id:#x}" if app_id else f"tables {shown}"
    raise InvalidInput(
        f"SQLite database {path} is not tenure's ({whose}): refusing to use it, nothing "
        "was changed. To keep tenure's tables in it (for job.transaction()), add ?adopt=1 "
        "to its URL"
    )
