"""Jobs as Redis holds them: the fields of a job's hash and its history entries.

A job is a hash (``<prefix>:{queue}:job:<id>``) whose fields are the Job's,
as strings: numbers in decimal (times with 17 significant digits, so they read
back exactly), JSON for ``args``, ``result`` and ``progress``; an absent field is
None. Internal fields: ``seq`` (insertion order; with ``run_at`` and the id,
it makes the job's member of the ready set), ``lease_ttl`` (while active with
a lease), ``ck`` (its concurrency key), ``uf`` (its unique_for) and
``started_at`` (while active: its attempt's start). ``cancel_requested`` is
``1`` once an active job's cancel was requested, absent otherwise. A
workflow's step also has ``wf`` (its workflow), ``up`` (its upstream ids, JSON),
``may_fail``, ``cancel_reason`` and the internal fields _flow.lua keeps. Each ended attempt is one
JSON entry of the job's history list, with its times as strings; ``get`` adds
the running one's from the job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from tenure.backends.rows import JOB_COLUMNS
from tenure.core.states import DeadReason, Outcome
from tenure.job import STATES, Attempt, Job, JobSpec, in_flow, job_of, keyed


def fields(flat: Sequence[bytes]) -> dict[str, bytes]:
    """A flat HGETALL reply as a dict."""
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def job(flat: Sequence[bytes], history: Sequence[bytes] = ()) -> Job:
    """The Job a hash (flat HGETALL reply) and history entries describe."""
    f = fields(flat)
    decoded = job_of_values([f.get(name) for name in JOB_COLUMNS], history)
    wf, ck = f.get("wf"), f.get("ck")
    if ck is not None:
        keyed(decoded, ck.decode())
    if wf is None:
        return decoded
    return _in_flow(decoded, [wf, f.get("up"), f.get("may_fail"), f.get("cancel_reason")])


# A job's fields as job_of_fields reads them (one HMGET): the Job's, then a
# step's workflow fields and its concurrency key.
READ_FIELDS = (*JOB_COLUMNS, "wf", "up", "may_fail", "cancel_reason", "ck")


def job_of_fields(values: Sequence[Any]) -> Job:
    """The Job of an HMGET of ``READ_FIELDS`` (without its history), as
    :func:`job` reads an HGETALL's, without a dict of its fields between."""
    *columns, wf, up, may_fail, reason, ck = values
    return job_of_values([*columns, None if wf is None else [wf, up, may_fail, reason], ck])


def _in_flow(decoded: Job, values: Sequence[Any]) -> Job:
    """A workflow's step: its workflow, upstream (JSON), may_fail, cancel_reason."""
    wf, up, may_fail, reason = values
    return in_flow(decoded, wf.decode(), orjson.loads(up) if up else (), may_fail is not None,
                   None if reason is None else reason.decode())  # fmt: skip


def job_of_values(values: Sequence[Any], history: Sequence[bytes] = ()) -> Job:
    """The Job of a job's fields in the order of ``JOB_COLUMNS`` (a claim's
    reply: ``JOB_FIELDS`` in _lib.lua, whose last are a step's workflow fields
    and the concurrency key), an absent one None."""
    (id_, task, queue, args, state, priority, run_at, created_at, attempts, stalls,
     max_attempts, timeout, fence, key, worker, lease_expires_at, result, error,
     dead_reason, progress, finished_at, traceparent, cancel_requested,
     recovered_from, budget_from, *step) = values  # fmt: skip
    decoded = job_of((
        id_.decode(), task.decode(), queue.decode(), orjson.loads(args), STATES[state.decode()],
        int(priority), float(run_at), float(created_at), int(attempts), int(stalls),
        None if max_attempts is None else int(max_attempts),
        None if timeout is None else float(timeout), int(fence),
        None if key is None else key.decode(), None if worker is None else worker.decode(),
        None if lease_expires_at is None else float(lease_expires_at),
        None if result is None else orjson.loads(result), None if error is None else error.decode(),
        None if dead_reason is None else DeadReason(dead_reason.decode()),
        None if progress is None else orjson.loads(progress),
        None if finished_at is None else float(finished_at),
        None if traceparent is None else traceparent.decode(), cancel_requested is not None,
        None if recovered_from is None else float(recovered_from),
        0 if budget_from is None else int(budget_from),
        tuple(attempt(entry) for entry in history),
    ))  # fmt: skip
    if len(step) > 1 and step[1] is not None:
        keyed(decoded, step[1].decode())
    return _in_flow(decoded, step[0]) if step and step[0] else decoded


def attempt(entry: bytes) -> Attempt:
    a = orjson.loads(entry)
    ended_at, outcome = a.get("ended_at"), a.get("outcome")
    return Attempt(
        attempt=int(a["attempt"]),
        fence=int(a["fence"]),
        worker=a.get("worker"),
        started_at=float(a["started_at"]),
        ended_at=None if ended_at is None else float(ended_at),
        outcome=None if outcome is None else Outcome(outcome),
        error=a.get("error"),
    )


def number(value: float | int | None) -> str:
    """A number as an ARGV value that reads back exactly; '' for None."""
    return "" if value is None else repr(value)


def shared_args(spec: JobSpec, *, each_keyed: bool = False) -> tuple[str, ...]:
    """The ARGV values enqueue.lua takes once for a run of jobs with the same
    options (``JobSpec.options``): task, delay (the debounce, if any), run_at,
    priority, max_attempts, timeout, traceparent, concurrency_key, whether
    it debounces, unique_for, and whether each job has its own
    concurrency_key (``each_keyed``: then the run's is '')."""
    delay = spec.delay if spec.debounce is None else spec.debounce
    return (
        spec.task, number(delay), number(spec.run_at), str(spec.priority),
        number(spec.max_attempts), number(spec.timeout), spec.traceparent or "",
        "" if each_keyed else spec.concurrency_key or "",
        "" if spec.debounce is None else "1", number(spec.unique_for), "1" if each_keyed else "",
    )  # fmt: skip
