"""Workflows on SQLite (tenure.core.workflows says what storage keeps and how
it moves): the edges' moves, the fan-in's counters, and what follows them, in
the transaction of the transition that ended (or brought back) a step.

SQLite has one writer at a time, so the cascade is Python inside that
transaction: each round moves the edges of the steps that ended, counts them
on their dependents (O(1) per edge: the fan-in is a counter, never a scan of
the group), then releases, cancels or brings back the dependents that this
decides, whose own edges move in the next round. Its statements take the
steps of a round as a JSON array: one statement per kind of move, not per step.

The places that settle jobs call ``settle`` when a job they ended is a step:
they read the job's workflow from the statement that ended it, a NULL for a
plain job, which is all a plain job pays.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from tenure.backends.sqlite.events import Pending
from tenure.backends.sqlite.keys import job_of_row
from tenure.backends.sqlite.queries import Q
from tenure.core.events import EventKind
from tenure.core.states import State
from tenure.core.workflows import CancelReason, EdgeState, Workflow, WorkflowState
from tenure.job import Job, in_flow

Db = sqlite3.Connection | sqlite3.Cursor  # the backend's connection, or a caller's cursor
Counts = dict[str, list[int]]  # dependent -> [pending change, blocked change]

UPSTREAM_FAILED = {"reason": CancelReason.UPSTREAM_FAILED.value}


def settle(
    db: Db,
    now: float,
    pending: Pending,
    *,
    completed: Sequence[str] = (),
    ended: Sequence[str] = (),
    restored: Sequence[str] = (),
) -> None:
    """Move the edges of the steps that ``completed``, ``ended`` otherwise (dead
    or cancelled) or were ``restored`` (retried from the DLQ), and what follows,
    to the end of the cascade; its events go to ``pending``."""
    done, failed = list(completed), []
    if ended:
        may_fail = {i for (i,) in db.execute(Q["steps_may_fail"], (orjson.dumps(ended),))}
        done += [i for i in ended if i in may_fail]
        failed = [i for i in ended if i not in may_fail]
    reopened = list(restored)
    while done or failed or reopened:
        counts: Counts = {}
        via: dict[str, str] = {}  # a dependent -> an upstream step whose edge moved
        for ids, to, was, change in (
            (done, EdgeState.DONE, EdgeState.OPEN, (-1, 0)),
            (failed, EdgeState.FAILED, EdgeState.OPEN, (0, 1)),
            (reopened, EdgeState.OPEN, EdgeState.FAILED, (0, -1)),
        ):
            if ids:
                for dependent, upstream in db.execute(Q["move_edges"], (to, was, _ids(ids))):
                    count = counts.setdefault(dependent, [0, 0])
                    count[0] += change[0]
                    count[1] += change[1]
                    via[dependent] = upstream
        done, failed, reopened = judge(db, now, pending, counts, via)


def judge(
    db: Db, now: float, pending: Pending, counts: Counts, via: dict[str, str]
) -> tuple[list[str], list[str], list[str]]:
    """Apply ``counts`` to the dependents' counters and move each dependent as
    they decide; returns the steps that this ended with dependents that run
    anyway (may_fail), ended failed, and brought back."""
    if not counts:
        return [], [], []
    listed = orjson.dumps([[d, p, b] for d, (p, b) in counts.items()])
    counted = db.execute(Q["count_steps"], (listed,)).fetchall()
    flows = counts.keys() - {i for i, _, _ in counted}
    if flows:
        _judge_workflows(db, now, pending, {w: counts[w] for w in flows}, via)
    ready = [i for i, p, b in counted if p == 0 and b == 0]
    blocked = [i for i, _, b in counted if b > 0]
    unblocked = [i for i, _, b in counted if b == 0 and counts[i][1] < 0]
    events = pending.events
    if ready:
        for i, queue, state, workflow in db.execute(Q["release_steps"], (now, _ids(ready))):
            events.append((queue, EventKind.READY, i, {"workflow": workflow}))
            pending.queued = pending.queued or state == State.QUEUED
    done: list[str] = []
    failed: list[str] = []
    if blocked:
        rows = db.execute(Q["cancel_blocked_steps"], (now, _ids(blocked))).fetchall()
        events += [
            (q, EventKind.CANCELLED, i, {**UPSTREAM_FAILED, "workflow": w}) for i, q, w in rows
        ]
        if rows:
            for i, may_fail in db.execute(Q["mark_upstream_failed"], (_ids(r[0] for r in rows),)):
                (done if may_fail else failed).append(i)
    reopened: list[str] = []
    if unblocked:
        rows = db.execute(Q["restore_steps"], (_ids(unblocked),)).fetchall()
        if rows:
            reopened = [i for i, _, _ in rows]
            db.execute(Q["clear_cancel_reason"], (_ids(reopened),))
            events += [(q, EventKind.WAITING, i, {"workflow": w}) for i, q, w in rows]
    return done, failed, reopened


def _judge_workflows(
    db: Db, now: float, pending: Pending, counts: Counts, via: dict[str, str]
) -> None:
    """A workflow counts its sinks' edges as a step counts its own: it is
    completed when they are all done, failed while one failed, else running;
    cancelled by hand, it stays so. Each end is a ``workflow_ended`` event,
    recorded as the step's whose edge ended it."""
    listed = orjson.dumps([[w, p, b] for w, (p, b) in counts.items()])
    for wf, state, left, failed in db.execute(Q["count_workflows"], (listed,)).fetchall():
        if state == WorkflowState.CANCELLED:
            continue
        new = (
            WorkflowState.FAILED if failed
            else WorkflowState.COMPLETED if left == 0
            else WorkflowState.RUNNING
        )  # fmt: skip
        if new == state:
            continue
        ended = new != WorkflowState.RUNNING
        db.execute(Q["set_workflow_state"], (new, now if ended else None, wf))
        if ended:
            ended_workflow(db, pending, wf, via[wf], new)


def ended_workflow(db: Db, pending: Pending, wf: str, job_id: str, outcome: str) -> None:
    """Record the workflow's end as an event of its step ``job_id``."""
    (queue,) = db.execute(Q["job_queue"], (job_id,)).fetchone()
    data = {"workflow": wf, "outcome": str(outcome)}
    pending.events.append((queue, EventKind.WORKFLOW_ENDED, job_id, data))


def _ids(ids: Iterable[str]) -> bytes:
    return orjson.dumps(list(ids))


# -- reading --------------------------------------------------------------------


def jobs_of(db: Db, rows: Iterable[Sequence[Any]]) -> list[Job]:
    """Jobs from rows of their columns then their workflow; a step's with its
    workflow's fields (a statement or two, for steps only)."""
    jobs = []
    steps: dict[str, tuple[Job, str]] = {}
    for row in rows:
        job = job_of_row(row)
        jobs.append(job)
        if row[-1] is not None:
            steps[job.id] = (job, row[-1])
    if steps:
        in_flows(db, steps)
    return jobs


def in_flows(db: Db, steps: dict[str, tuple[Job, str]]) -> None:
    """Set each step's workflow fields (``steps``: job id -> (job, workflow))."""
    listed = _ids(steps)
    upstream: dict[str, list[str]] = {}
    for dependent, up in db.execute(Q["step_upstreams"], (listed,)):
        upstream.setdefault(dependent, []).append(up)
    for i, may_fail, reason in db.execute(Q["step_fields"], (listed,)):
        job, workflow = steps[i]
        in_flow(job, workflow, upstream.get(i, ()), bool(may_fail), reason)


def get_workflow(db: Db, workflow_id: str) -> Workflow | None:
    """The workflow with its steps (without history); None if absent."""
    row = db.execute(Q["get_workflow"], (workflow_id,)).fetchone()
    if row is None:
        return None
    wf, state, created_at, finished_at, key, many = row
    sinks = tuple(i for (i,) in db.execute(Q["workflow_sinks"], (wf,)))
    jobs = tuple(jobs_of(db, db.execute(Q["workflow_jobs"], (wf,)).fetchall()))
    return Workflow(wf, WorkflowState(state), created_at, finished_at, key, bool(many), sinks, jobs)
