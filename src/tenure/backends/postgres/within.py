"""tenure's writes within a transaction of the user's code.

``CallerTransactions``: enqueue in a caller's transaction, on the caller's
psycopg connection. The job and its ``enqueued`` event are written by the
statements of every enqueue (``Enqueue.steps``), on the caller's connection: they
commit with the caller's transaction or not at all, and tenure never commits
or rolls it back. Idle workers are woken by the statement's NOTIFY, which
PostgreSQL delivers at commit. Nothing here opens tenure's pool.

A connection is checked before anything is sent on it: a statement that fails
would abort the caller's whole transaction. Its database's schema is checked
once per connection (migrations only go forward).

``HandlerTransactions``: a handler's own transaction on tenure's database,
which completes its job, fence-checked, at commit (``job.transaction()``).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import pq

from tenure.backends.base import kind_of
from tenure.backends.postgres.database import Database
from tenure.backends.postgres.enqueue import Enqueue
from tenure.backends.postgres.flows import Flows
from tenure.backends.postgres.pool import hung_up
from tenure.backends.postgres.steps import Steps, run_steps, run_steps_sync
from tenure.core.payload import encode
from tenure.core.workflows import Workflow, WorkflowSpec
from tenure.errors import InvalidInput, LeaseLost
from tenure.job import Job, JobSpec, check_specs

T = TypeVar("T")
Status = pq.TransactionStatus
_REFUSED = {
    Status.INERROR: "its transaction has failed: roll it back first",
    Status.ACTIVE: "it is running another statement",
    Status.UNKNOWN: "it is broken",
}


class CallerTransactions:
    """The caller-connection side of one PostgreSQL backend: its enqueue's
    steps, on a caller's connection to ``db``."""

    def __init__(self, db: Database, enqueue: Enqueue, flows: Flows, latest: int) -> None:
        self.db = db
        self.enqueue_steps = enqueue.steps
        self.flows = flows
        self.max_payload = enqueue.max_payload
        self.latest = latest  # the schema version this tenure writes
        self._checked: weakref.WeakSet[Any] = weakref.WeakSet()  # connections seen migrated

    def enqueue(self, conn: Any, specs: Sequence[JobSpec]) -> list[Job]:
        self._check(conn, awaited=False)
        check_specs(specs, self.max_payload)
        if not specs:
            return []
        try:
            return run_steps_sync(conn, self._steps(conn, self.enqueue_steps(specs)))
        except psycopg.OperationalError as exc:
            raise self.db.unavailable("PostgreSQL is unavailable", exc) from exc

    async def aenqueue(self, conn: Any, specs: Sequence[JobSpec]) -> list[Job]:
        self._check(conn, awaited=True)
        check_specs(specs, self.max_payload)
        if not specs:
            return []
        try:
            return await run_steps(conn, self._steps(conn, self.enqueue_steps(specs)))
        except psycopg.OperationalError as exc:
            raise self.db.unavailable("PostgreSQL is unavailable", exc) from exc

    def enqueue_workflow(self, conn: Any, spec: WorkflowSpec) -> Workflow:
        self._check(conn, awaited=False)
        spec = self.flows.checked(spec)
        try:
            return run_steps_sync(conn, self._steps(conn, self.flows.adding(spec)))
        except psycopg.OperationalError as exc:
            raise self.db.unavailable("PostgreSQL is unavailable", exc) from exc

    async def aenqueue_workflow(self, conn: Any, spec: WorkflowSpec) -> Workflow:
        self._check(conn, awaited=True)
        spec = self.flows.checked(spec)
        try:
            return await run_steps(conn, self._steps(conn, self.flows.adding(spec)))
        except psycopg.OperationalError as exc:
            raise self.db.unavailable("PostgreSQL is unavailable", exc) from exc

    def _steps(self, conn: Any, steps: Steps[T]) -> Steps[T]:
        """``steps``, after a check of the connection's schema (once per connection)."""
        if conn not in self._checked:
            yield from self._schema_checked()
            self._checked.add(conn)
        return (yield from steps)

    def _schema_checked(self) -> Steps[None]:
        """InvalidInput unless the connection's database has tenure's schema at
        the version this tenure writes (asked without failing statements)."""
        schema = self.db.schema
        [(present,)] = yield self.db.q["caller_schema"], {"schema": schema}
        version = 0
        if present:
            [(version,)] = yield self.db.q["caller_schema_version"], {}
        latest = self.latest
        if version < latest:
            raise InvalidInput(
                f"the database of conn has tenure's schema {schema!r} at version {version}, "
                f"not migrated yet to {latest}: open the App once outside a transaction "
                "(a worker does, or app.queues()) to migrate it, and check that conn is to "
                f"the database of {self.db.safe_url}"
            )
        if version > latest:
            raise InvalidInput(
                f"the database of conn has tenure's schema {schema!r} at version {version}, "
                f"newer than this tenure knows ({latest}): upgrade tenure"
            )

    def _check(self, conn: Any, *, awaited: bool) -> None:
        """InvalidInput unless ``conn`` is a psycopg connection of the kind the
        call takes, open, and in a transaction (or about to open one)."""
        self.check_kind(conn)
        if awaited and not isinstance(conn, psycopg.AsyncConnection):
            raise InvalidInput(
                "aenqueue takes a psycopg AsyncConnection as conn=; with a sync Connection, "
                "call enqueue"
            )
        if not awaited and isinstance(conn, psycopg.AsyncConnection):
            raise InvalidInput(
                "enqueue takes a sync psycopg Connection as conn=; with an AsyncConnection, "
                "await aenqueue"
            )
        if conn.closed:
            raise InvalidInput("conn is closed: nothing was enqueued")
        status = conn.info.transaction_status
        if status in _REFUSED:
            raise InvalidInput(f"cannot enqueue on conn: {_REFUSED[status]}")
        if status == Status.IDLE and conn.autocommit:
            raise InvalidInput(
                "conn is in autocommit mode outside a transaction, so the job would commit "
                "on its own: enqueue inside `with conn.transaction():`, or without conn="
            )

    def check_kind(self, conn: object) -> None:
        """InvalidInput unless ``conn`` is a psycopg connection (sync or async)."""
        if not isinstance(conn, psycopg.Connection | psycopg.AsyncConnection):
            raise InvalidInput(
                f"conn= of an App on PostgreSQL ({self.db.safe_url}) takes a psycopg "
                f"Connection or AsyncConnection to its database, got {kind_of(conn)}"
            )


class HandlerTransactions:
    """Handlers' own transactions on ``db``, on one connection of their own,
    made on first use (not from the pool: a backend never opened has them)."""

    def __init__(self, db: Database, max_payload: int) -> None:
        self.db = db
        self.max_payload = max_payload
        self._conn: psycopg.Connection[Any] | None = None

    @contextlib.contextmanager
    def transaction(
        self, job_id: str, fence: int, result: Any = None
    ) -> Iterator[psycopg.Connection[Any]]:
        """The handler's own transaction on this database, completing the job at
        commit, fence-checked (see ``JobContext.transaction``). Synchronous: it
        runs in the handler's thread, on a connection of its own, kept for reuse."""
        payload = encode(result, what="job result", limit=self.max_payload).decode()
        try:
            # A session the server ended meanwhile (a restart, a failover) left
            # its goodbye on the idle socket: used, it would fail this job.
            if self._conn is None or self._conn.closed or hung_up(self._conn):
                if self._conn is not None:
                    self._conn.close()
                self._conn = psycopg.connect(self.db.conninfo, application_name="tenure-effects",
                                             **self.db.endpoints.pool_options())  # fmt: skip
            conn = self._conn
            with conn.transaction():
                yield conn
                params = {
                    "id": job_id,
                    "fence": fence,
                    "result": payload,
                    "channel": self.db.channel,
                }
                if conn.execute(self.db.q["complete"], params).fetchone() is None:
                    raise LeaseLost(
                        f"job {job_id} is no longer held with fence {fence}: rolled back"
                    )
        except psycopg.OperationalError as exc:
            self._conn = None
            raise self.db.unavailable("PostgreSQL is unavailable", exc) from exc

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
