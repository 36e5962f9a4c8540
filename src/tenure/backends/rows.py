"""Rows as the SQL backends return them, into Jobs and Attempts.

Every SQL backend selects a job's columns in the order of ``JOB_COLUMNS``, with
JSON columns as text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from tenure.core.payload import decode
from tenure.core.states import DeadReason, Outcome
from tenure.job import JOB_FIELDS, STATES, Attempt, Job, job_of

JOB_COLUMNS = JOB_FIELDS[:-1]  # all but history


def job_from_row(row: Sequence[Any], history: tuple[Attempt, ...] = ()) -> Job:
    (id_, task, queue, args, state, priority, run_at, created_at, attempts, stalls,
     max_attempts, timeout, fence, key, worker, lease_expires_at, result, error,
     dead_reason, progress, finished_at, traceparent, cancel_requested,
     recovered_from, budget_from) = row  # fmt: skip
    return job_of((
        id_, task, queue, orjson.loads(args), STATES[state], priority, run_at, created_at,
        attempts, stalls, max_attempts, timeout, fence, key, worker, lease_expires_at,
        decode(result), error, None if dead_reason is None else DeadReason(dead_reason),
        decode(progress), finished_at, traceparent, bool(cancel_requested),
        recovered_from, budget_from, history,
    ))  # fmt: skip


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
