"""The operators' verbs on SQLite: reading jobs and queues, cancelling, the
DLQ (retry, purge), deleting a queue, and queues' policies. Its methods run
on the backend's thread, their inputs checked."""

from __future__ import annotations

import builtins
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from tenure.backends.base import Page
from tenure.backends.checks import not_cancellable, queue_busy
from tenure.backends.rows import attempt_from_row
from tenure.backends.sqlite import keys, workflows
from tenure.backends.sqlite.claiming import end_steps
from tenure.backends.sqlite.database import Database
from tenure.backends.sqlite.events import Pending, Row, record_job
from tenure.backends.sqlite.queries import Q
from tenure.config import QueuePolicy
from tenure.core.clock import Clock
from tenure.core.events import EventKind
from tenure.core.limits import KeyCount
from tenure.core.states import DeadReason, State
from tenure.core.workflows import ENDED, WorkflowState
from tenure.errors import JobNotFound
from tenure.job import Job


class Operators:
    """What operators (the CLI, the web UI, the API) do to jobs and queues."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    def cancel(self, job_id: str) -> Job:
        now = self.clock.now()
        with self.db.tx() as conn:
            cancelled = conn.execute(Q["cancel"], (now, job_id)).fetchall()
            if cancelled:
                [(workflow,)] = cancelled
                data = None if workflow is None else {"workflow": workflow}
                record_job(conn, now, job_id, [(EventKind.CANCELLED, data)])
                if workflow is not None:  # a workflow's step: what waits on it moves
                    end_steps(self.db, conn, now, [job_id])
            elif conn.execute(Q["request_cancel"], (job_id,)).rowcount == 0:
                raise not_cancellable(self._get(conn, job_id))
            return self._get(conn, job_id)

    def bulk(
        self,
        verb: str,
        queue: str,
        job_ids: Sequence[str] | None,
        head: tuple[Any, ...],
        data: dict[str, Any] | None = None,
    ) -> int:
        """Retry or purge (``verb``: retry_dead or purge_dead) the queue's dead
        jobs, or those of ``job_ids``; each moved row gives (id, attempts)."""
        kind = EventKind.RETRIED if verb == "retry_dead" else EventKind.PURGED
        now = self.clock.now()
        with self.db.tx() as conn:
            if job_ids is None:
                moved = conn.execute(Q[f"{verb}_all"], (*head, queue)).fetchall()
            else:
                one = Q[f"{verb}_one"]
                moved = [r for j in job_ids for r in conn.execute(one, (*head, queue, j))]
            if moved and verb == "retry_dead":
                self.db.ring(conn)
            events: list[Row] = [
                (queue, kind, i, data and {**data, "attempts": n}) for i, n, _ in moved
            ]
            pending = Pending(events)
            steps = [i for i, _, wf in moved if wf is not None]
            if steps and verb == "retry_dead":  # what their failure cancelled waits again
                workflows.settle(conn, now, pending, restored=steps)
            pending.record(conn, now)
            return len(moved)

    def delete_queue(self, queue: str) -> int:
        with self.db.tx() as conn:
            (active,) = conn.execute(Q["active_in_queue"], (queue,)).fetchone()
            if active:
                raise queue_busy(queue, active)
            conn.execute(Q["delete_queue_attempts"], (queue,))
            deleted = conn.execute(Q["delete_queue_jobs"], (queue,)).rowcount
            conn.execute(Q["delete_queue_events"], (queue,))
            conn.execute(Q["empty_newest_event"], (queue,))
            conn.execute(Q["delete_queue"], (queue,))
            return int(deleted)

    def get(self, job_id: str) -> Job:
        return self._get(self.db.conn, job_id)

    def _get(self, conn: sqlite3.Connection, job_id: str) -> Job:
        row = conn.execute(Q["get_job_in_flow"], (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(f"no job with id {job_id!r}")
        history = tuple(attempt_from_row(r) for r in conn.execute(Q["get_history"], (job_id,)))
        job = keys.job_of_row(row, history)
        if row[-1] is not None:
            workflows.in_flows(conn, {job_id: (job, row[-1])})
        return job

    def match_ids(self, bounds: tuple[str, str], prefix: str, limit: int) -> builtins.list[str]:
        """Ids that start with ``prefix`` (between ``bounds``), up to ``limit``."""
        return [i for (i,) in self.db.conn.execute(Q["match_ids"], (*bounds, prefix, limit))]

    def list(self, queue: str | None, state: State | None, limit: int, after: int | None) -> Page:
        """A page of jobs, newest first, after the job numbered ``after``."""
        where: builtins.list[str] = []
        params: builtins.list[Any] = []
        for clause, value in (("queue = ?", queue), ("state = ?", state), ("seq < ?", after)):
            if value is not None:
                where.append(clause)
                params.append(value)
        sql = Q["list_jobs"].replace("{where}", f"WHERE {' AND '.join(where)}" if where else "")
        rows = self.db.conn.execute(sql, (*params, limit + 1)).fetchall()
        jobs = workflows.jobs_of(self.db.conn, [r[1:] for r in rows[:limit]])
        cursor = str(rows[limit - 1][0]) if len(rows) > limit else None
        return Page(jobs, cursor)

    def key_counts(self, queue: str, limit: int) -> builtins.list[KeyCount]:
        return keys.key_counts(self.db.conn, queue, limit)

    def counts(self, queue: str) -> dict[State, int]:
        found = dict(self.db.conn.execute(Q["counts"], (queue,)).fetchall())
        return {s: found.get(s.value, 0) for s in State}

    def workflow_counts(self) -> dict[WorkflowState, int]:
        found = dict(self.db.conn.execute(Q["workflow_counts"]).fetchall())
        return {s: found.get(s.value, 0) for s in WorkflowState}

    def workflow_outcomes(self) -> dict[WorkflowState, int]:
        found = dict(self.db.conn.execute(Q["workflow_outcomes"]).fetchall())
        return {s: found.get(s.value, 0) for s in ENDED}

    def dead_counts(self, queue: str) -> dict[DeadReason, int]:
        rows = self.db.conn.execute(Q["dead_counts"], (queue,)).fetchall()
        return {DeadReason(reason): n for reason, n in rows}

    def lag(self, queue: str) -> float:
        now = self.clock.now()
        (due_since,) = self.db.conn.execute(Q["due_since"], (queue, now)).fetchone()
        return 0.0 if due_since is None else max(now - due_since, 0.0)

    def queues(self) -> builtins.list[str]:
        return [n for (n,) in self.db.conn.execute(Q["queue_names"])]

    def get_policy(self, queue: str) -> QueuePolicy:
        row = self.db.conn.execute(Q["get_policy"], (queue,)).fetchone()
        return QueuePolicy.from_json(None if row is None else row[0])

    def set_policy(self, queue: str, data: str) -> None:
        """Store the queue's policy, ``data`` its JSON."""
        with self.db.tx() as conn:
            was = self._policy(conn, queue)
            conn.execute(Q["set_policy"], (queue, data))
            keys.policy_changed(conn, queue, was, QueuePolicy.from_json(data))

    def _policy(self, conn: sqlite3.Connection, queue: str) -> QueuePolicy:
        row = conn.execute(Q["get_policy"], (queue,)).fetchone()
        return QueuePolicy.from_json(None if row is None else row[0])

    def change_policy(self, queue: str, changes: Mapping[str, Any]) -> QueuePolicy:
        with self.db.tx() as conn:  # the write lock, from the read to the write
            was = self._policy(conn, queue)
            policy = was.replace(**changes)
            conn.execute(Q["set_policy"], (queue, orjson.dumps(policy.to_dict()).decode()))
            keys.policy_changed(conn, queue, was, policy)
            self.db.ring(conn)  # it may let idle workers claim (a resume)
        return policy
