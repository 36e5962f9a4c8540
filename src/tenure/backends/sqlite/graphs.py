"""Workflows' verbs on SQLite: storing a workflow's graph (its record, its
steps as jobs, their edges), a running step's spawn, reading a workflow and
cancelling it. Their moves once stored are workflows.py's. The methods of
``Workflows`` run on the backend's thread, their inputs checked; ``store``
also runs in a caller's transaction (within.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import orjson

from tenure.backends.sqlite import workflows
from tenure.backends.sqlite.claiming import refused
from tenure.backends.sqlite.database import Database
from tenure.backends.sqlite.events import Pending
from tenure.backends.sqlite.queries import Q
from tenure.backends.sqlite.workflows import Db
from tenure.core.clock import Clock
from tenure.core.events import EventKind
from tenure.core.states import State
from tenure.core.workflows import (
    StepSpec,
    Workflow,
    WorkflowSpec,
    WorkflowState,
    edge_ord,
    spawn_ord,
)
from tenure.errors import InvalidInput, JobNotFound
from tenure.job import Job, in_flow


class Workflows:
    """enqueue_workflow, spawn, get_workflow, cancel_workflow, get_many."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock

    def enqueue_workflow(self, spec: WorkflowSpec) -> Workflow:
        now, pending = self.clock.now(), Pending()
        with self.db.tx() as conn:
            flow = store(conn, now, spec, pending)
            pending.record(conn, now)
            if pending.queued:
                self.db.ring(conn)
        return flow

    def spawn(self, job_id: str, fence: int, seq: int, spec: WorkflowSpec) -> list[Job]:
        now, pending = self.clock.now(), Pending()
        with self.db.tx() as conn:
            row = conn.execute(Q["spawner"], (job_id, fence)).fetchone()
            if row is None:
                refused(conn, job_id, fence)
            wf, made = row
            if wf is None:
                raise InvalidInput(f"job {job_id} is no workflow's step: it cannot spawn")
            if seq <= made:  # a handler that runs again spawns once
                rows = conn.execute(Q["spawned"], (job_id, seq)).fetchall()
                return [j for j in workflows.jobs_of(conn, rows) if not j.upstream]
            jobs = _insert_steps(conn, now, wf, spec.steps, pending, spawn=(job_id, seq))
            conn.execute(Q["spawns_made"], (seq, job_id))
            sinks = [jobs[s].id for s in spec.sinks]
            edges = []
            counts: workflows.Counts = {}
            for dependent, ord_ in conn.execute(Q["open_edges_from"], (job_id,)).fetchall():
                edges += [(dependent, spawn_ord(ord_, seq, p), s) for p, s in enumerate(sinks)]
                counts[dependent] = [len(sinks), 0]
            conn.executemany(Q["insert_edge"], edges)
            via = dict.fromkeys(counts, job_id)
            workflows.judge(conn, now, pending, counts, via)  # each waits for more: none moves
            pending.record(conn, now)
            if pending.queued:
                self.db.ring(conn)
        return [j for j in jobs if not j.upstream]  # its sources: they run at once

    def get_workflow(self, workflow_id: str) -> Workflow:
        found = workflows.get_workflow(self.db.conn, workflow_id)
        if found is None:
            raise JobNotFound(f"no workflow with id {workflow_id!r}")
        return found

    def cancel_workflow(self, workflow_id: str) -> Workflow:
        now, pending = self.clock.now(), Pending()
        with self.db.tx() as conn:
            row = conn.execute(Q["get_workflow"], (workflow_id,)).fetchone()
            if row is None:
                raise JobNotFound(f"no workflow with id {workflow_id!r}")
            # failed is no end: a DLQ retry would resume it
            stops = row[1] in (WorkflowState.RUNNING, WorkflowState.FAILED)
            if stops:
                conn.execute(Q["set_workflow_state"], (WorkflowState.CANCELLED, now, workflow_id))
            cancelled = conn.execute(Q["cancel_workflow_steps"], (now, workflow_id)).fetchall()
            conn.execute(Q["request_cancel_workflow_steps"], (workflow_id,))
            data = {"workflow": workflow_id}
            pending.events += [(q, EventKind.CANCELLED, i, data) for i, q in cancelled]
            if stops:
                first = conn.execute(Q["workflow_jobs"], (workflow_id,)).fetchone()
                if first is not None:
                    outcome = WorkflowState.CANCELLED
                    workflows.ended_workflow(conn, pending, workflow_id, first[0], outcome)
            workflows.settle(conn, now, pending, ended=[i for i, _ in cancelled])
            pending.record(conn, now)
            flow = workflows.get_workflow(conn, workflow_id)
        assert flow is not None
        return flow

    def get_many(self, job_ids: Sequence[str]) -> list[Job]:
        conn = self.db.conn
        rows = conn.execute(Q["get_many"], (orjson.dumps(list(job_ids)),)).fetchall()
        return workflows.jobs_of(conn, rows)


def store(db: Db, now: float, spec: WorkflowSpec, pending: Pending) -> Workflow:
    """Store a checked workflow in the transaction open on ``db`` (the
    backend's, or a caller's); with a key, the running workflow that holds it
    instead, if any."""
    if spec.key is not None:
        row = db.execute(Q["workflow_by_key"], (spec.key,)).fetchone()
        if row is not None:
            found = workflows.get_workflow(db, row[0])
            assert found is not None
            return found
    try:
        db.execute(Q["insert_workflow"], (spec.id, spec.key, now, spec.many, len(spec.sinks)))
    except sqlite3.IntegrityError:
        raise InvalidInput(f"a workflow with id {spec.id} is stored already") from None
    jobs = _insert_steps(db, now, spec.id, spec.steps, pending, spawn=None)
    sinks = tuple(jobs[s].id for s in spec.sinks)
    db.executemany(Q["insert_edge"], [(spec.id, edge_ord(p), s) for p, s in enumerate(sinks)])
    return Workflow(spec.id, WorkflowState.RUNNING, now, None, spec.key, spec.many, sinks,
                    tuple(jobs))  # fmt: skip


def _insert_steps(
    db: Db,
    now: float,
    wf: str,
    steps: Sequence[StepSpec],
    pending: Pending,
    *,
    spawn: tuple[str, int] | None,
) -> list[Job]:
    """Insert the steps of one graph (of ``wf``; made by ``spawn``, a step's
    id and seq, if not None) with their edges between them; returns their
    jobs, in order. Steps that wait for none are queued (or scheduled)."""
    ids = [s.spec.id for s in steps]
    for queue in {s.spec.queue for s in steps}:
        db.execute(Q["ensure_queue"], (queue,))
    spawned_by, seq = spawn if spawn is not None else (None, None)
    jobs, rows, step_rows, edges = [], [], [], []
    for step in steps:
        s = step.spec
        delay = 0.0
        if step.upstream:
            state, run_at = State.WAITING, (s.run_at if s.run_at is not None else now)
            delay = s.delay if s.run_at is None else 0.0
        else:
            run_at = s.run_at if s.run_at is not None else now + s.delay
            state = State.SCHEDULED if run_at > now else State.QUEUED
        rows.append((s.id, s.queue, s.task, s.args, state, s.priority, run_at, now,
                     s.max_attempts, s.timeout, s.traceparent, wf, s.concurrency_key))  # fmt: skip
        step_rows.append((s.id, step.may_fail, len(step.upstream), delay, spawned_by, seq))
        edges += [(s.id, edge_ord(p), ids[u]) for p, u in enumerate(step.upstream)]
        upstream = [ids[u] for u in step.upstream]
        jobs.append(in_flow(s.stored(state, run_at, now), wf, upstream, step.may_fail))
        pending.queued = pending.queued or state is State.QUEUED
        data: dict[str, Any] = {"task": s.task, "state": state, "workflow": wf}
        pending.events.append((s.queue, EventKind.ENQUEUED, s.id, data))
    try:
        db.executemany(Q["insert_step_job"], rows)
    except sqlite3.IntegrityError:
        raise InvalidInput(
            f"a step of workflow {wf} has the id of a job stored already: nothing was stored"
        ) from None
    db.executemany(Q["insert_step"], step_rows)
    db.executemany(Q["insert_edge"], edges)
    return jobs
