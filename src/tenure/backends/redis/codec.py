"""Jobs as Redis holds them: the fields of a job's hash and its history entries.

A job is a hash (``<prefix>:{queue}:job:<id>``) whose fields are the Job's,
as strings: numbers in decimal (times with 17 significant digits, so they read
back exactly), JSON for ``args``, ``result`` and ``progress``; an absent field is
None. Internal fields: ``seq`` (insertion order), ``rank`` (its member of the
ready set while queued) and ``lease_ttl`` (while active with a lease). Each
attempt is one JSON entry of the job's history list, with its times as strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from tenure.core.states import DeadReason, Outcome, State
from tenure.job import STATES, Attempt, Job, JobSpec


def fields(flat: Sequence[bytes]) -> dict[str, bytes]:
    """A flat HGETALL reply as a dict."""
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def _text(f: dict[str, bytes], name: str) -> str | None:
    value = f.get(name)
    return None if value is None else value.decode()


def _float(f: dict[str, bytes], name: str) -> float | None:
    value = f.get(name)
    return None if value is None else float(value)


def _json(f: dict[str, bytes], name: str) -> Any:
    value = f.get(name)
    return None if value is None else orjson.loads(value)


def job(flat: Sequence[bytes], history: Sequence[bytes] = ()) -> Job:
    """The Job a hash (flat HGETALL reply) and history entries describe."""
    f = fields(flat)
    max_attempts = f.get("max_attempts")
    dead_reason = f.get("dead_reason")
    return Job(
        id=f["id"].decode(),
        task=f["task"].decode(),
        queue=f["queue"].decode(),
        args=orjson.loads(f["args"]),
        state=State(f["state"].decode()),
        priority=int(f["priority"]),
        run_at=float(f["run_at"]),
        created_at=float(f["created_at"]),
        attempts=int(f["attempts"]),
        stalls=int(f["stalls"]),
        max_attempts=None if max_attempts is None else int(max_attempts),
        timeout=_float(f, "timeout"),
        fence=int(f["fence"]),
        key=_text(f, "key"),
        worker=_text(f, "worker"),
        lease_expires_at=_float(f, "lease_expires_at"),
        result=_json(f, "result"),
        error=_text(f, "error"),
        dead_reason=None if dead_reason is None else DeadReason(dead_reason.decode()),
        progress=_json(f, "progress"),
        finished_at=_float(f, "finished_at"),
        history=tuple(attempt(entry) for entry in history),
    )


def job_of_values(values: Sequence[Any]) -> Job:
    """The Job of a claim's reply: its fields in the order of ``JOB_COLUMNS``
    (``JOB_FIELDS`` in _lib.lua), an absent one None."""
    (id_, task, queue, args, state, priority, run_at, created_at, attempts, stalls,
     max_attempts, timeout, fence, key, worker, lease_expires_at, result, error,
     dead_reason, progress, finished_at) = values  # fmt: skip
    return Job(
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
    )  # fmt: skip


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


def enqueue_args(spec: JobSpec) -> tuple[str | bytes, ...]:
    """The 9 ARGV values enqueue.lua takes per job."""
    return (
        spec.id, spec.task, spec.args, number(spec.delay), number(spec.run_at),
        str(spec.priority), spec.key or "", number(spec.max_attempts), number(spec.timeout),
    )  # fmt: skip
