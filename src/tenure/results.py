"""Waiting for a job's result: ``App.result`` and ``App.aresult``.

A waiter reads the job; while it is unfinished, it waits on its queue's
lifecycle events (``Backend.read_events`` blocks without polling storage for
them: LISTEN on PostgreSQL, XREAD BLOCK on Redis, the WAL's counter on
SQLite), from a position taken before its last read of the job: a transition
made after that read is among the events it reads, so none is missed. An event
that ends its job has it read the job again, for the result or the error.

A queue whose policy records no events (``events=False``) has none to wait
on: there the waiter reads the job again after a pause that doubles from
FIRST_PAUSE to LAST_PAUSE seconds, the slower path. With events, it also reads
the job again after SAFETY seconds without an event of its job: a policy
turned off meanwhile, or events trimmed before it read them, cost that much at
most.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING, Any

from tenure.core.events import EventKind
from tenure.core.states import TERMINAL, State
from tenure.errors import JobCancelled, JobFailed
from tenure.events import check_follow
from tenure.job import Job

if TYPE_CHECKING:
    from tenure.backends.base import Backend

FIRST_PAUSE = 0.05
LAST_PAUSE = 1.0
SAFETY = 5.0
BATCH = 500  # events read per round trip
# The events after which a job is finished: the waiter reads it again.
ENDINGS = frozenset({EventKind.COMPLETED, EventKind.DEAD, EventKind.CANCELLED})


def check_timeout(timeout: float | None) -> float:
    """``timeout`` in seconds (None: for ever, ``math.inf``); InvalidInput otherwise."""
    check_follow(None, None, timeout)  # events' followers take the same timeouts
    return math.inf if timeout is None else float(timeout)


def outcome(job: Job) -> Any:
    """A finished job's result; JobFailed if it is dead, JobCancelled if cancelled."""
    if job.state is State.DEAD:
        raise JobFailed(job)
    if job.state is State.CANCELLED:
        raise JobCancelled(job)
    return job.result


async def wait_result(backend: Backend, job_id: str, timeout: float | None = None) -> Any:
    """The result of the job ``job_id`` once it is finished (see ``outcome``);
    TimeoutError after ``timeout`` seconds (None: never); JobNotFound."""
    deadline = time.monotonic() + check_timeout(timeout)
    job = await backend.get(job_id)
    if job.state in TERMINAL:
        return outcome(job)
    after = await backend.events_now(job.queue)
    pause = FIRST_PAUSE
    while True:
        job = await backend.get(job_id)
        if job.state in TERMINAL:
            return outcome(job)
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"job {job_id} is still {job.state.value} after {timeout} s")
        if (await backend.get_policy(job.queue)).events:
            after = await _until_ended(backend, job, after, min(left, SAFETY))
        else:
            await asyncio.sleep(min(left, pause))
            pause = min(pause * 2, LAST_PAUSE)


async def _until_ended(backend: Backend, job: Job, after: str, wait: float) -> str:
    """Read ``job``'s queue's events after ``after`` until one ends the job, or
    for ``wait`` seconds without one; where the reading stands then."""
    deadline = time.monotonic() + wait
    while True:
        left = max(0.0, deadline - time.monotonic())
        events = await backend.read_events(job.queue, after, BATCH, left)
        if not events:
            return after
        after = events[-1].id
        if any(e.job_id == job.id and e.kind in ENDINGS for e in events) or left <= 0:
            return after
