"""A lease holder's writes on SQLite outside the cycle, each fence-checked: an
attempt's progress, its end (completed, failed, released), and a handler's
own transaction that completes its job. Its methods run on the backend's
thread, their inputs checked, except ``transaction`` (the handler's)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

import orjson

from tenure.backends.base import LeaseRef
from tenure.backends.sqlite.database import Database
from tenure.backends.sqlite.events import Pending, record_job
from tenure.backends.sqlite.queries import Q
from tenure.core.clock import Clock
from tenure.core.events import EventKind, failure_events
from tenure.core.payload import encode
from tenure.core.retry import CANCELLED, Decision
from tenure.core.states import Outcome, State
from tenure.errors import JobNotFound, LeaseLost

# Claiming.completing: complete the leases still held, returning those that are not
Completing = Callable[
    [sqlite3.Connection, float, Sequence[tuple[str, int, bytes]], Pending], set[LeaseRef]
]


class Settling:
    """Progress and the ends of attempts, fence-checked."""

    def __init__(
        self, db: Database, clock: Clock, completing: Completing, max_payload: int
    ) -> None:
        self.db = db
        self.clock = clock
        self.completing = completing  # the cycle's own: it knows the queues' policies
        self.max_payload = max_payload

    def progress(self, job_id: str, fence: int, payload: bytes) -> None:
        events = [(EventKind.PROGRESS, {"progress": orjson.Fragment(payload)})]
        self._settle(Q["set_progress"], (payload, job_id, fence), (job_id, fence), None, events)

    def complete(self, job_id: str, fence: int, payload: bytes) -> None:
        now, pending = self.clock.now(), Pending()
        with self.db.tx() as conn:
            if self.completing(conn, now, [(job_id, fence, payload)], pending):
                _refused(conn, job_id, fence)
            pending.record(conn, now)

    def fail(
        self, job_id: str, fence: int, outcome: Outcome, error: str | None, decision: Decision
    ) -> None:
        now = self.clock.now()
        sql, params = failure(job_id, fence, error, decision, now)
        events = failure_events(outcome, decision, rescued=False)
        self._settle(sql, params, (job_id, fence), (outcome, error, now), events)

    def release(self, job_id: str, fence: int, now: float) -> None:
        ending = (Outcome.RELEASED, None, now)
        events = [(EventKind.RELEASED, None)]
        self._settle(Q["release"], (job_id, fence), (job_id, fence), ending, events)

    def _settle(
        self,
        sql: str,
        params: tuple[Any, ...],
        lease: LeaseRef,
        ending: tuple[Outcome, str | None, float] | None,
        events: Sequence[tuple[str, dict[str, Any] | None]],
    ) -> None:
        """Run one fence-checked write, then record its ``events``; end the
        attempt in history when ``ending`` is given."""
        job_id, fence = lease
        with self.db.tx() as conn:
            if ending is not None:  # first: it reads the attempt from the job
                outcome, error, now = ending
                conn.execute(Q["end_attempts"], (now, outcome, error, listed(job_id, fence)))
            if conn.execute(sql, params).rowcount == 0:
                if ending is None or not _cancelled(conn, job_id, fence, error, now):
                    _refused(conn, job_id, fence)
                events = failure_events(outcome, CANCELLED, rescued=False)
            record_job(conn, self.clock.now() if ending is None else ending[2], job_id, events)
            released = ending is not None and ending[0] is Outcome.RELEASED
            if (released and params[0] == State.QUEUED) or sql is Q["requeue"]:
                self.db.ring(conn)

    @contextmanager
    def transaction(
        self, job_id: str, fence: int, result: Any = None
    ) -> Iterator[sqlite3.Connection]:
        """The handler's own transaction on this database, completing the job at
        commit, fence-checked (see ``JobContext.transaction``). Synchronous: it
        runs in the handler's thread, on a connection of its own."""
        payload = encode(result, what="job result", limit=self.max_payload)
        conn = self.db.effects()
        conn.execute("BEGIN")
        try:
            yield conn
            now, pending = self.clock.now(), Pending()
            if self.completing(conn, now, [(job_id, fence, payload)], pending):
                raise LeaseLost(f"job {job_id} is no longer held with fence {fence}")
            pending.record(conn, now)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


def _refused(conn: sqlite3.Connection, job_id: str, fence: int) -> NoReturn:
    """Why a fence-checked write touched nothing: JobNotFound or LeaseLost."""
    if conn.execute(Q["job_exists"], (job_id,)).fetchone() is None:
        raise JobNotFound(f"no job with id {job_id!r}")
    raise LeaseLost(
        f"job {job_id} is no longer held with fence {fence}: "
        "it was recovered or settled by someone else"
    )


def _cancelled(
    conn: sqlite3.Connection, job_id: str, fence: int, error: str | None, now: float
) -> bool:
    """Whether the job, held with ``fence``, was cancelled while it ran (the
    write that ended its attempt refused it): then it is, now."""
    return conn.execute(Q["end_cancelled"], (error, now, job_id, fence)).rowcount > 0


def listed(job_id: str, fence: int) -> bytes:
    """One lease as the statements of many take it (end_attempts)."""
    return orjson.dumps([[job_id, fence]])


def failure(
    job_id: str,
    fence: int,
    error: str | None,
    decision: Decision,
    now: float,
    *,
    recovered_from: float | None = None,
) -> tuple[str, tuple[Any, ...]]:
    """The fence-checked write that applies a retry decision (a recovery's
    records when the lost attempt was last proven alive)."""
    stall = int(decision.stall)
    if decision.state is State.CANCELLED:
        return Q["end_cancelled"], (error, now, job_id, fence)
    if decision.state is State.DEAD:
        return Q["bury"], (decision.dead_reason, error, stall, now, job_id, fence)
    run_at = now + decision.delay if decision.state is State.SCHEDULED else None
    return Q["requeue"], (decision.state, run_at, error, stall, recovered_from, job_id, fence)
