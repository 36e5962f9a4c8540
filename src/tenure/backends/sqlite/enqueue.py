"""Enqueue on SQLite: new jobs (deduplicated by id and key), and periodic
jobs' ticks. Its methods run on the backend's thread, their inputs checked."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import orjson

from tenure.backends.base import Tick
from tenure.backends.sqlite.database import Database
from tenure.backends.sqlite.events import record
from tenure.backends.sqlite.keys import job_of_row
from tenure.backends.sqlite.queries import Q
from tenure.core.clock import Clock
from tenure.core.events import EventKind
from tenure.core.states import State
from tenure.job import Job, JobSpec


def _by_key(db: sqlite3.Connection | sqlite3.Cursor, spec: JobSpec, now: float) -> Job | None:
    """The job an enqueue with ``key=`` returns instead of a new one, if any:
    the key's unfinished job (with ``debounce``: the one not started yet, its
    args replaced and its start moved), or with ``unique_for`` the one that
    finished within that window."""
    rows = db.execute(Q["find_unfinished_by_key"], (spec.queue, spec.key)).fetchall()
    found = [(job_of_row(r), r[-1]) for r in rows]
    if spec.debounce is not None:
        for job, seq in found:
            if job.state in (State.SCHEDULED, State.QUEUED) and job.attempts == 0:
                moved = (spec.args, now + spec.debounce, seq)
                return job_of_row(db.execute(Q["debounce_job"], moved).fetchone())
        return None  # started: a new job, which the next enqueues debounce
    if found:
        return found[0][0]
    if spec.unique_for is not None:
        since = (spec.queue, spec.key, now - spec.unique_for)
        row = db.execute(Q["find_finished_by_key"], since).fetchone()
        return None if row is None else job_of_row(row)
    return None


class Enqueue:
    """The producers' writes: jobs, and the ticks of periodic schedules."""

    def __init__(self, db: Database, clock: Clock, max_payload: int) -> None:
        self.db = db
        self.clock = clock
        self.max_payload = max_payload  # the specs' checks are the callers'

    def enqueue(self, specs: Sequence[JobSpec]) -> list[Job]:
        with self.db.tx() as conn:
            jobs = self.write(conn, specs)
            if any(j.state is State.QUEUED for j in jobs):
                self.db.ring(conn)
        return jobs

    def write(self, db: sqlite3.Connection | sqlite3.Cursor, specs: Sequence[JobSpec]) -> list[Job]:
        """The statements of an enqueue of checked specs, in the transaction open
        on ``db``: the backend's own, or a caller's (within.py)."""
        now = self.clock.now()
        jobs: list[Job] = []
        new: list[tuple[str, str, str, dict[str, Any] | None]] = []
        for queue in {s.queue for s in specs}:
            db.execute(Q["ensure_queue"], (queue,))
        for spec in specs:
            if spec.key is not None:
                found = _by_key(db, spec, now)
                if found is not None:
                    jobs.append(found)
                    continue
            run_at = spec.run_at if spec.run_at is not None else now + (spec.debounce or spec.delay)
            state = State.SCHEDULED if run_at > now else State.QUEUED
            cur = db.execute(
                Q["insert_job"],
                (spec.id, spec.queue, spec.task, spec.args, state, spec.priority, run_at, now,
                 spec.key, spec.max_attempts, spec.timeout, spec.traceparent, spec.concurrency_key,
                 spec.debounce, spec.unique_for),
            )  # fmt: skip
            if cur.rowcount:
                jobs.append(spec.stored(state, run_at, now))
                new.append((spec.queue, EventKind.ENQUEUED, spec.id,
                            {"task": spec.task, "state": state}))  # fmt: skip
            else:  # its id is stored already: that job
                jobs.append(job_of_row(db.execute(Q["get_job"], (spec.id,)).fetchone()))
        record(db, now, new)
        return jobs

    def enqueue_tick(self, schedule: str, at: float, spec: JobSpec) -> Job | None:
        """The schedule's job for tick ``at``, unless the tick was enqueued already."""
        with self.db.tx() as conn:
            advance = (spec.queue, schedule, at, spec.id)
            if conn.execute(Q["advance_tick"], advance).rowcount == 0:
                return None
            [job] = self.write(conn, [spec])
            if job.state is State.QUEUED:
                self.db.ring(conn)
            return job

    def last_ticks(self, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], Tick]:
        listed = orjson.dumps(pairs)
        rows = self.db.conn.execute(Q["last_ticks"], (listed,)).fetchall()
        return {(q, n): Tick(at, job_id) for q, n, at, job_id in rows}
