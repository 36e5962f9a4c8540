"""Rows as the SQL backends return them, into Jobs and Attempts.

Every SQL backend selects a job's columns in the order of ``JOB_COLUMNS``, with
JSON columns as text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from tenure.core.payload import decode
from tenure.core.states import DeadReason, Outcome, State
from tenure.job import Attempt, Job

JOB_COLUMNS = (
    "id", "task", "queue", "args", "state", "priority", "run_at", "created_at", "attempts",
    "stalls", "max_attempts", "timeout", "fence", "key", "worker", "lease_expires_at", "result",
    "error", "dead_reason", "progress", "finished_at",
)  # fmt: skip


def job_from_row(row: Sequence[Any], history: tuple[Attempt, ...] = ()) -> Job:
    (id_, task, queue, args, state, priority, run_at, created_at, attempts, stalls,
     max_attempts, timeout, fence, key, worker, lease_expires_at, result, error,
     dead_reason, progress, finished_at) = row  # fmt: skip
    return Job(
        id=id_,
        task=task,
        queue=queue,
        args=orjson.loads(args),
        state=State(state),
        priority=priority,
        run_at=run_at,
        created_at=created_at,
        attempts=attempts,
        stalls=stalls,
        max_attempts=max_attempts,
        timeout=timeout,
        fence=fence,
        key=key,
        worker=worker,
        lease_expires_at=lease_expires_at,
        result=decode(result),
        error=error,
        dead_reason=None if dead_reason is None else DeadReason(dead_reason),
        progress=decode(progress),
        finished_at=finished_at,
        history=history,
    )


def attempt_from_row(row: Sequence[Any]) -> Attempt:
    attempt, fence, worker, started_at, ended_at, outcome, error = row
    return Attempt(
        attempt,
        fence,
        worker,
        started_at,
        ended_at,
        None if outcome is None else Outcome(outcome),
        error,
    )
