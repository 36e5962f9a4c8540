"""Workflows on PostgreSQL (tenure.core.workflows): storing them, spawns,
reading them, cancelling them, and restoring a step retried from the DLQ.

A step is a row of jobs with its workflow, counters and edges (migration
17). What moves a step's edges when it ends is written into the statement of
its own transition (queries.sql: flow_release in the completions, flow_cascade
in the ends dead or cancelled); what is here runs each in one transaction of
its own, or, for an enqueue, in a caller's (``adding``, as steps: steps.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import orjson
import psycopg

from tenure.backends.checks import check_graph
from tenure.backends.postgres.database import Database
from tenure.backends.postgres.statements import text_array
from tenure.backends.postgres.steps import Steps, run_steps
from tenure.backends.rows import JOB_COLUMNS, job_from_row
from tenure.core.names import check_job_id, check_job_ids, shown
from tenure.core.workflows import (
    Workflow,
    WorkflowSpec,
    WorkflowState,
    edge_ord,
    spawn_ord,
)
from tenure.errors import InvalidInput, JobNotFound, LeaseLost
from tenure.job import Attempt, Job, in_flow, keyed, stored_workflow

COLUMNS = len(JOB_COLUMNS)  # a step's row: the job's columns, then flow_columns'
CANCEL_TRIES = 50  # a cancel of a workflow gives way to workers' cycles this often


def step_from_row(row: Sequence[Any], history: tuple[Attempt, ...] = ()) -> Job:
    """A job from a row of job_columns then flow_columns (a plain job's are NULL)."""
    job = keyed(job_from_row(row[:COLUMNS], history), row[-1])
    if row[COLUMNS] is None:  # a plain job, as most are: nothing more to read
        return job
    workflow, upstream, may_fail, cancel_reason, _ = row[COLUMNS:]
    return in_flow(job, workflow, upstream or (), may_fail, cancel_reason)


def restoring(db: Database, ids: Sequence[str]) -> Steps[None]:
    """After steps ``ids`` were retried from the DLQ, in that transaction:
    their failed edges open again, and so on for each step that waits again."""
    while ids:
        rows = yield db.q["flow_restored"], {"ids": list(ids)}
        ids = [i for (i,) in rows]


class Flows:
    """Workflows in the database of ``db``."""

    def __init__(self, db: Database, max_payload: int) -> None:
        self.db = db
        self.q = db.q
        self.max_payload = max_payload

    def checked(self, spec: object) -> WorkflowSpec:
        return check_graph(spec, self.max_payload)

    async def enqueue_workflow(self, spec: WorkflowSpec) -> Workflow:
        spec = self.checked(spec)
        try:
            async with self.db.tx() as conn:
                stored = await run_steps(conn, self.adding(spec))
        except psycopg.errors.UniqueViolation:  # a step's id is a stored job's
            raise InvalidInput(
                f"workflow {spec.id}: a step's job id is taken by one stored already"
            ) from None
        ours = [s.spec.id for s in spec.steps]
        if stored.id == spec.id and [j.id for j in stored.jobs[: len(ours)]] != ours:
            raise InvalidInput(f"workflow {spec.id}: its id is taken by one stored already")
        return stored

    def adding(self, spec: WorkflowSpec) -> Steps[Workflow]:
        """The statements of an enqueue of a checked workflow (see Enqueue.steps)."""
        sinks = [[spec.steps[k].spec.id, spec.id, edge_ord(p)] for p, k in enumerate(spec.sinks)]
        params = {**self._steps(spec), "workflow": spec.id, "key": spec.key, "many": spec.many,
                  "sinks": len(spec.sinks)}  # fmt: skip
        params["edges"] = orjson.dumps(_edges(spec) + sinks).decode()
        while True:
            [(made, _, now)] = yield self.q["add_workflow"], params
            if made:  # as stored, by the statement's clock: not read back (a third of the time)
                return stored_workflow(spec, now)
            if (yield self.q["get_workflow"], {"id": spec.id}):  # a retried enqueue
                return (yield from self._reading(spec.id))
            if spec.key is not None and (rows := (yield self.q["running_workflow"], params)):
                return (yield from self._reading(rows[0][0]))
            # The workflow that held the key ended between the two statements: again.

    def _steps(self, spec: WorkflowSpec) -> dict[str, Any]:
        jobs = orjson.dumps([
            [s.spec.id, s.spec.queue, s.spec.task, s.spec.priority, s.spec.delay, s.spec.run_at,
             s.spec.max_attempts, s.spec.timeout, s.spec.traceparent, len(s.upstream), s.may_fail,
             s.spec.concurrency_key]
            for s in spec.steps
        ]).decode()  # fmt: skip
        args = text_array(s.spec.args.decode() for s in spec.steps)
        return {"jobs": jobs, "args": args, "grow": "[]", "channel": self.db.channel}

    def _reading(self, workflow_id: str) -> Steps[Workflow]:
        rows = yield self.q["get_workflow"], {"id": workflow_id}
        if not rows:
            raise JobNotFound(f"no workflow with id {workflow_id!r}")
        [(id_, state, created_at, finished_at, key, many, sinks)] = rows
        jobs = yield self.q["workflow_jobs"], {"id": workflow_id}
        return Workflow(id_, WorkflowState(state), created_at, finished_at, key, many,
                        tuple(sinks), tuple(map(step_from_row, jobs)))  # fmt: skip

    async def get_workflow(self, workflow_id: str) -> Workflow:
        _check_workflow_id(workflow_id)
        async with self.db.tx() as conn:
            return await run_steps(conn, self._reading(workflow_id))

    async def get_many(self, job_ids: Sequence[str]) -> list[Job]:
        ids = check_job_ids(job_ids) or []
        if not ids:
            return []
        rows = await self.db.rows("get_many", {"ids": ids})
        found = {j.id: j for j in map(step_from_row, rows)}
        return [found[i] for i in ids if i in found]

    async def spawn(self, job_id: str, fence: int, seq: int, spec: WorkflowSpec) -> list[Job]:
        check_job_id(job_id)
        if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq < 2**31:
            raise InvalidInput(f"a spawn's seq is an integer from 1, got {shown(seq)}")
        spec = self.checked(spec)
        async with self.db.tx() as conn:
            return await run_steps(conn, self._spawning(job_id, fence, seq, spec))

    def _spawning(self, job_id: str, fence: int, seq: int, spec: WorkflowSpec) -> Steps[list[Job]]:
        rows = yield self.q["lock_spawner"], {"id": job_id, "fence": fence}
        if not rows:
            if not (yield self.q["job_exists"], {"id": job_id}):
                raise JobNotFound(f"no job with id {job_id!r}")
            raise LeaseLost(f"job {job_id} is no longer held with fence {fence}: spawned nothing")
        [(workflow,)] = rows
        if workflow is None:
            raise InvalidInput(f"job {job_id} is no workflow's step: only a step can spawn")
        made = yield self.q["spawned"], {"id": job_id, "seq": seq}
        # A spawn returns its sources, the steps that run at once.
        ids = made[0][0] if made else [s.spec.id for s in spec.steps if not s.upstream]
        if not made:
            dependents = yield self.q["spawner_edges"], {"id": job_id}
            sinks = [spec.steps[k].spec.id for k in spec.sinks]
            after = [[sink, d, spawn_ord(o, seq, p)]
                     for d, o in dependents for p, sink in enumerate(sinks)]  # fmt: skip
            grow = [[d, len(sinks)] for d, _ in dependents]
            params = {**self._steps(spec), "workflow": workflow,
                      "edges": orjson.dumps(_edges(spec) + after).decode(),
                      "grow": orjson.dumps(grow).decode()}  # fmt: skip
            yield self.q["add_spawned"], params
            yield self.q["record_spawn"], {"id": job_id, "seq": seq, "jobs": text_array(ids)}
        rows = yield self.q["get_many"], {"ids": ids}
        found = {j.id: j for j in map(step_from_row, rows)}
        return [found[i] for i in ids if i in found]

    async def cancel_workflow(self, workflow_id: str) -> Workflow:
        """In one transaction that locks the steps first, without waiting: a
        worker's cycle locks a step it completes, then what waits for it; the
        cancel gives way to it and tries again."""
        _check_workflow_id(workflow_id)
        for attempt in range(CANCEL_TRIES):
            try:
                async with self.db.tx() as conn:
                    return await run_steps(conn, self._cancelling(workflow_id))
            except psycopg.errors.LockNotAvailable:
                await asyncio.sleep(0.002 * (attempt + 1))
        raise InvalidInput(f"workflow {workflow_id}'s steps stayed locked: try again")

    def _cancelling(self, workflow_id: str) -> Steps[Workflow]:
        q = self.q
        if not (yield q["get_workflow"], {"id": workflow_id}):
            raise JobNotFound(f"no workflow with id {workflow_id!r}")
        steps = yield q["lock_steps"], {"id": workflow_id}
        cancelled = yield q["cancel_steps"], {"id": workflow_id}
        by, queue = steps[0] if steps else (None, None)
        yield q["cancel_flow"], {"id": workflow_id, "by": by, "queue": queue}
        if cancelled:
            params = {"ids": [i for (i,) in cancelled], "channel": self.db.channel}
            yield q["flow_ended"], params
        return (yield from self._reading(workflow_id))


def _edges(spec: WorkflowSpec) -> list[list[str]]:
    """The edges between ``spec``'s steps: [upstream id, dependent id, ord]."""
    steps = spec.steps
    return [[steps[u].spec.id, s.spec.id, edge_ord(p)]
            for s in steps for p, u in enumerate(s.upstream)]  # fmt: skip


def _check_workflow_id(workflow_id: object) -> None:
    if not isinstance(workflow_id, str) or not workflow_id or len(workflow_id) > 200:
        raise InvalidInput(f"a workflow id is a string, got {shown(workflow_id)}")
