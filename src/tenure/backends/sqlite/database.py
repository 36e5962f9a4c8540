"""One SQLite backend's connections to its file, the thread they are used on,
and its transactions.

Every connection use runs on one dedicated thread, in order, so that the event
loop never blocks on the database; only the worker's cycle may run on the
loop's own connection (``fast``), when the write lock is free. Every
transition runs in ``BEGIN IMMEDIATE``: it takes the write lock first, so what
it reads stays true until it commits.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from tenure.backends.sqlite import opening
from tenure.backends.sqlite.doorbells import Doorbells
from tenure.backends.sqlite.queries import Q
from tenure.backends.sqlite.storage import StorageFile, check_tenures
from tenure.core.clock import Clock
from tenure.errors import BackendUnavailable, TenureError
from tenure.threads import DaemonThreads

T = TypeVar("T")
SMALL_WAL_PAGES = 64  # the WAL's checkpoint interval once the disk was full
BLOCKED = 0.25  # seconds of waiting for, or holding, the write lock that others notice
SETTLE = 1.0  # seconds after such a block before a sweep judges leases again


class Busy(Exception):
    """The loop's own connection found the write lock taken."""


class Database:
    """The file one backend opened: its connections, its thread, its transactions."""

    def __init__(
        self,
        path: str,
        *,
        durable: bool,
        busy_timeout: float,
        read_only: bool,
        adopt: bool,
        clock: Clock,
        doorbells: Doorbells,
    ) -> None:
        self.path = path
        self.url = f"sqlite:///{path}"
        self.durable = durable
        self.busy_timeout = busy_timeout
        self.read_only = read_only  # never creates, migrates or writes the file
        self.adopt = adopt  # may add tenure's tables to a database of another program's
        self.clock = clock
        self.doorbells = doorbells  # rung after a transaction that made jobs runnable
        self.file = StorageFile(path)
        self.thread = DaemonThreads(1, "tenure-sqlite")  # every connection use, in order
        self._conn: sqlite3.Connection | None = None
        # The worker's cycle runs on the event loop's thread, on a connection of
        # its own, when the write lock is free (no thread hop; never a wait).
        self.fast: sqlite3.Connection | None = None
        self._full = False  # a write found the disk full once: keep the WAL small
        self._small_wal: set[sqlite3.Connection] = set()  # connections that do
        # The workers to wake once a connection's transaction commits (rung by
        # the main thread's ringer, or on a socket of its own from another thread).
        self._to_ring: dict[sqlite3.Connection, list[str]] = {}
        self.blocked_at = -SETTLE  # when a transaction last waited for, or held, the lock long

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise BackendUnavailable(f"the SQLite backend at {self.path} is not open")
        return self._conn

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the backend's thread; storage errors typed."""
        try:
            return await self.thread.run(fn, *args)
        except (sqlite3.Error, OSError) as exc:
            raise self.failed(exc) from exc

    def failed(self, exc: sqlite3.Error | OSError) -> TenureError:
        """The typed error for ``exc`` (see storage.py); a full disk is remembered."""
        error = self.file.error(exc)
        if isinstance(exc, sqlite3.Error) and exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_FULL:
            self._full = True
        return error

    @contextmanager
    def tx(self, conn: sqlite3.Connection | None = None) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any error. On the loop's own
        connection (``fast``), a write lock held elsewhere raises Busy at once
        instead of waiting."""
        conn = self.conn if conn is None else conn
        main = conn is self._conn  # on the backend's thread: its transactions may wait
        asked = time.monotonic()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not main and exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                raise Busy from None
            raise
        began = time.monotonic()
        try:
            yield conn
            conn.commit()
        except BaseException:
            with contextlib.suppress(sqlite3.Error):  # a failed commit may have ended it
                conn.rollback()
            self.ended(conn, committed=False)
            raise
        finally:
            ended = time.monotonic()
            if began - asked > BLOCKED or ended - began > BLOCKED:
                self.blocked_at = ended
        self.ended(conn, committed=True)
        if self._full and conn not in self._small_wal:
            self._keep_wal_small(conn)

    def ring(self, conn: sqlite3.Connection) -> None:
        """After this transaction commits, wake the idle workers (see doorbells.py)."""
        self._to_ring[conn] = [w for (w,) in conn.execute(Q["worker_ids"])]

    def ended(self, conn: sqlite3.Connection, *, committed: bool) -> None:
        """The transaction on ``conn`` ended: ring the bells it asked for, if it
        committed (from another thread than the backend's, on a socket of its own)."""
        to_ring = self._to_ring.pop(conn, None)
        if to_ring and committed:
            if conn is self._conn:
                self.doorbells.ring(to_ring)
            else:
                self.doorbells.ring_once(to_ring)

    def _keep_wal_small(self, conn: sqlite3.Connection) -> None:
        """Writes pass again after the disk was full: from now on, checkpoint this
        connection's WAL often. A checkpoint is what lets the WAL be reused from
        its start; by default one comes every thousand pages (4 MB), and on a
        small disk the WAL would fill again the space that came back, for good."""
        self._small_wal.add(conn)
        with contextlib.suppress(sqlite3.Error):  # PASSIVE: never waits for readers
            conn.execute(f"PRAGMA wal_autocheckpoint = {SMALL_WAL_PAGES}")
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def open(self) -> None:
        """Open the file: to read only, or to write (created or migrated)."""
        if self._conn is not None:
            return
        opening.check_place(self.path, self.read_only)
        try:
            if self.read_only:
                self._conn = opening.open_to_read(self.file, self.busy_timeout, self.durable)
            else:
                self._open_to_write()
            self.file.pin()
        except (sqlite3.Error, OSError) as exc:
            self._disconnect()
            raise self.failed(exc) from exc
        except BaseException:
            self._disconnect()
            raise

    def _open_to_write(self) -> None:
        """Open, create or migrate tenure's database; another program's is left as it is."""
        conn = self._conn = opening.connect(self.path, self.busy_timeout, self.durable)
        check_tenures(conn, self.path, adopt=self.adopt)  # before anything is written
        conn.execute("PRAGMA journal_mode = WAL")
        with self.tx() as tx:
            opening.migrate(tx, self.path, self.clock)
        if not self.durable and self.path != ":memory:":
            self.fast = opening.connect(self.path, 0.0, self.durable)
            self.fast.execute("PRAGMA wal_autocheckpoint = 0")  # the thread checkpoints

    def close(self) -> None:
        """Close every connection (on the backend's thread)."""
        self._disconnect()

    def _disconnect(self) -> None:
        for conn in (self.fast, self._conn):
            if conn is not None:
                conn.close()
        self.fast = self._conn = None
        self._small_wal.clear()
