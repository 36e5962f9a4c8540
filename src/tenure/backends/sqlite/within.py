"""Transactions that are not tenure's own: enqueue in a caller's transaction,
on the caller's sqlite3 connection to the App's file; and a handler's own
transaction, which completes its job as it commits.

The job and its ``enqueued`` event are written by the statements of every
enqueue (``Enqueue.write``, enqueue.py; a workflow's, ``graphs.store``) in the
caller's transaction, under a savepoint so that they are stored all or none;
tenure never commits or rolls back the caller's transaction. It runs in the
caller's thread, where a sqlite3 connection belongs, and opens nothing of
tenure's. A handler's own transaction that completes a workflow's step
releases what waits on it in that transaction, and wakes idle workers once it
committed.

Idle workers are woken by their doorbells at once, before the caller commits:
a woken worker's claim needs the write lock, which the caller's transaction
holds from the first insert until it ends, so the claim runs after the commit
and finds the job (after a rollback it finds nothing and the worker idles).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from tenure.backends.base import LeaseRef, kind_of
from tenure.backends.sqlite.database import Database
from tenure.backends.sqlite.enqueue import Enqueue
from tenure.backends.sqlite.events import Pending, record
from tenure.backends.sqlite.graphs import store
from tenure.backends.sqlite.queries import Q
from tenure.core.payload import encode
from tenure.core.states import State
from tenure.core.workflows import Workflow, WorkflowSpec, check_graph
from tenure.errors import BackendUnavailable, InvalidInput, LeaseLost
from tenure.job import Job, JobSpec, check_specs

SAVEPOINT = "tenure_enqueue"
T = TypeVar("T")

# Claiming.completing: complete the leases still held, returning those that are not
Completing = Callable[
    [sqlite3.Connection, float, Sequence[tuple[str, int, bytes]], Pending], set[LeaseRef]
]


class CallerTransactions:
    """The caller-connection side of one SQLite backend."""

    def __init__(self, db: Database, enqueue: Enqueue, latest: int) -> None:
        self.clock = db.clock
        self.url = db.url
        self.path = db.path
        self.doorbells = db.doorbells
        self.write_enqueue = enqueue.write  # the statements of every enqueue
        self.max_payload = enqueue.max_payload
        self.latest = latest  # the schema version this tenure writes

    def check_kind(self, conn: object) -> None:
        """InvalidInput unless ``conn`` is a sqlite3 connection."""
        if not isinstance(conn, sqlite3.Connection):
            raise InvalidInput(
                f"conn= of an App on SQLite ({self.url}) takes a sqlite3.Connection "
                f"to its file, got {kind_of(conn)}"
            )

    async def aenqueue(self, conn: Any, specs: Sequence[JobSpec]) -> list[Job]:
        """``enqueue``: a sqlite3 connection is used where it is, never from another thread."""
        return self.enqueue(conn, specs)

    def enqueue(self, conn: Any, specs: Sequence[JobSpec]) -> list[Job]:
        self.check_kind(conn)
        check_specs(specs, self.max_payload)

        def queued(jobs: list[Job]) -> bool:
            return any(j.state is State.QUEUED for j in jobs)

        return self._within(conn, lambda cur: self.write_enqueue(cur, specs), queued)

    async def aenqueue_workflow(self, conn: Any, spec: WorkflowSpec) -> Workflow:
        """``enqueue_workflow``, on the caller's thread as ``aenqueue``."""
        return self.enqueue_workflow(conn, spec)

    def enqueue_workflow(self, conn: Any, spec: WorkflowSpec) -> Workflow:
        self.check_kind(conn)
        check_graph(spec, self.max_payload)
        pending = Pending()

        def write(cur: sqlite3.Cursor) -> Workflow:
            now = self.clock.now()
            flow = store(cur, now, spec, pending)
            record(cur, now, pending.events)
            return flow

        return self._within(conn, write, lambda _: pending.queued)

    def _within(
        self, conn: Any, write: Callable[[sqlite3.Cursor], T], queued: Callable[[T], bool]
    ) -> T:
        """``write``'s statements in the caller's transaction on ``conn``, under
        a savepoint: all or none of them. Idle workers are woken if what they
        wrote is ``queued``, before the caller commits (see the module's doc)."""
        try:
            in_transaction = conn.in_transaction
            cur = conn.cursor()
        except sqlite3.ProgrammingError as exc:  # closed, or another thread's
            raise InvalidInput(f"cannot enqueue on conn: {exc}") from None
        cur.row_factory = None  # rows as tuples, whatever the caller's connection makes
        try:
            self._check(cur)
            if not in_transaction:
                self._begin(conn, cur)
            cur.execute(f"SAVEPOINT {SAVEPOINT}")
            try:
                done = write(cur)
            except BaseException:
                with contextlib.suppress(sqlite3.Error):  # an error may have ended it all
                    cur.execute(f"ROLLBACK TO {SAVEPOINT}")
                    cur.execute(f"RELEASE {SAVEPOINT}")
                raise
            cur.execute(f"RELEASE {SAVEPOINT}")
            if queued(done):
                self.doorbells.ring_once([w for (w,) in cur.execute(Q["worker_ids"])])
            return done
        except sqlite3.OperationalError as exc:
            raise BackendUnavailable(f"SQLite database {self.path}: {exc}") from exc
        finally:
            cur.close()

    def _begin(self, conn: sqlite3.Connection, cur: sqlite3.Cursor) -> None:
        """Open the transaction the connection would open at our first write
        (its isolation_level's), or refuse one in autocommit mode."""
        level = conn.isolation_level
        if level is None or getattr(conn, "autocommit", None) is True:
            raise InvalidInput(
                "conn is in autocommit mode outside a transaction, so the job would commit "
                "on its own: run BEGIN on it first, or enqueue without conn="
            )
        cur.execute(f"BEGIN {level}")  # one of '', DEFERRED, IMMEDIATE, EXCLUSIVE

    def _check(self, cur: sqlite3.Cursor) -> None:
        """InvalidInput unless ``cur``'s connection is to the App's file, migrated."""
        path = self.path
        if path == ":memory:":
            raise InvalidInput(
                "this App's SQLite database is in memory: no other connection can share it"
            )
        rows = cur.execute("PRAGMA database_list").fetchall()
        main = next((file for _, name, file in rows if name == "main"), "")
        try:
            same = bool(main) and os.path.samefile(main, path)
        except OSError:
            same = False
        if not same:
            raise InvalidInput(
                f"conn is to {main or 'an in-memory database'}, not to this App's SQLite "
                f"database {os.path.abspath(path)}: open conn on the App's file"
            )
        try:
            [(version,)] = cur.execute("SELECT coalesce(max(version), 0) FROM schema_migrations")
        except sqlite3.OperationalError:  # no such table
            version = 0
        if version < self.latest:
            raise InvalidInput(
                f"SQLite database {path} has tenure's schema at version {version}, not "
                f"migrated yet to {self.latest}: open the App once outside a transaction "
                "(a worker does, or app.queues()) to migrate it"
            )
        if version > self.latest:
            raise InvalidInput(
                f"SQLite database {path} has tenure's schema at version {version}, newer than "
                f"this tenure knows ({self.latest}): upgrade tenure"
            )


class HandlerTransactions:
    """Handlers' own transactions on ``db``'s file, on one connection of their
    own, opened at first use (from a handler's thread)."""

    def __init__(self, db: Database, completing: Completing, max_payload: int) -> None:
        self.db = db
        self.completing = completing  # the cycle's own: it knows the queues' policies
        self.max_payload = max_payload
        self._conn: sqlite3.Connection | None = None

    @contextlib.contextmanager
    def transaction(
        self, job_id: str, fence: int, result: Any = None
    ) -> Iterator[sqlite3.Connection]:
        """The handler's own transaction on this database, completing the job at
        commit, fence-checked (see ``JobContext.transaction``). Synchronous: it
        runs in the handler's thread, on a connection of its own."""
        payload = encode(result, what="job result", limit=self.max_payload)
        if self._conn is None:
            busy_timeout = self.db.busy_timeout
            self._conn = sqlite3.connect(
                self.db.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        conn = self._conn
        conn.execute("BEGIN")
        try:
            yield conn
            now, pending = self.db.clock.now(), Pending()
            if self.completing(conn, now, [(job_id, fence, payload)], pending):
                raise LeaseLost(f"job {job_id} is no longer held with fence {fence}")
            pending.record(conn, now)
        except BaseException:
            conn.execute("ROLLBACK")
            self.db.ended(conn, committed=False)
            raise
        conn.execute("COMMIT")
        self.db.ended(conn, committed=True)  # wakes workers for the steps it released

    def close(self) -> None:
        """Close the connection (on the backend's thread, as the backend closes)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
