"""How jobs, times and errors are written for people: the same in the CLI's
tables and the dashboard's pages."""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from tenure.config import QueuePolicy
from tenure.core.limits import KeyCount
from tenure.core.workflows import Workflow
from tenure.job import Job

SUMMARY_LENGTH = 80  # an error's one-line summary in a table


def when(ts: float | None) -> str:
    """An epoch time as local ISO time without microseconds; ``-`` for none.
    A time no date can show (stored before times were bounded, or by hand)
    is shown as its number, so that one such job does not break a listing."""
    if ts is None:
        return "-"
    try:
        return datetime.fromtimestamp(ts).isoformat(sep=" ", timespec="seconds")
    except (OverflowError, ValueError, OSError, TypeError):
        return f"{ts!r} (epoch s)"


def seconds(duration: float | None) -> str:
    try:
        return "-" if duration is None else f"{duration:.2f} s"
    except (TypeError, ValueError):
        return repr(duration)


def to_json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def summary(error: str | None) -> str:
    """One line of an error: a traceback's last line (the exception), else the first line."""
    if not error:
        return ""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[0]
    if line.startswith("Traceback"):
        line = [x for x in lines if x != "[truncated]"][-1]
    return line if len(line) <= SUMMARY_LENGTH else line[: SUMMARY_LENGTH - 1] + "…"


def job_dict(job: Job) -> dict[str, Any]:
    return dataclasses.asdict(job)


# The policy's fields that concern concurrency keys, as a queue's keys are shown with them.
KEY_LIMITS = ("max_active_per_key", "rate_limit_per_key", "rate_interval_per_key", "fair")


def keys_dict(queue: str, policy: QueuePolicy, counts: Iterable[KeyCount]) -> dict[str, Any]:
    """A queue's concurrency keys with their queued and active jobs, and the
    per-key limits of its policy: ``tenure queue keys --json`` and the API's."""
    return {
        "queue": queue,
        "limits": {name: getattr(policy, name) for name in KEY_LIMITS},
        "keys": [dataclasses.asdict(c) for c in counts],
    }


def workflow_dict(workflow: Workflow) -> dict[str, Any]:
    return dataclasses.asdict(workflow)


@dataclass(frozen=True, slots=True)
class StepRow:
    """One step of a workflow as the CLI and the dashboard show it: numbered
    from 1 in an order where each comes after the steps it waits for, with
    its ``depth`` (the longest path to it from a step that waits for none)
    and the numbers of the steps it ``waits_for``, in its upstream order."""

    number: int
    job: Job
    depth: int
    waits_for: tuple[int, ...]


def workflow_steps(workflow: Workflow) -> list[StepRow]:
    """The steps in order (storage keeps no chains and groups: only the edges
    a step's ``upstream`` lists); among those that may go next, the one written
    first (a spawned step after the one that spawned it). An upstream id that
    is not one of the steps (pruned) is left out."""
    jobs = workflow.by_id()
    position = {job.id: i for i, job in enumerate(workflow.jobs)}
    upstream = {j.id: [u for u in dict.fromkeys(j.upstream) if u in jobs] for j in workflow.jobs}
    pending = {i: len(ups) for i, ups in upstream.items()}
    dependents: dict[str, list[str]] = {}
    for job_id, ups in upstream.items():
        for u in ups:
            dependents.setdefault(u, []).append(job_id)
    ready = [position[i] for i, n in pending.items() if n == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        job_id = workflow.jobs[heapq.heappop(ready)].id
        order.append(job_id)
        for d in dependents.get(job_id, ()):
            pending[d] -= 1
            if pending[d] == 0:
                heapq.heappush(ready, position[d])
    order += [j.id for j in workflow.jobs if pending[j.id] > 0]  # a cycle: storage's bug
    number = {job_id: n for n, job_id in enumerate(order, 1)}
    depth: dict[str, int] = {}
    rows = []
    for job_id in order:
        ups = [u for u in upstream[job_id] if u in depth]
        depth[job_id] = max((depth[u] + 1 for u in ups), default=0)
        rows.append(StepRow(number[job_id], jobs[job_id], depth[job_id],
                            tuple(number[u] for u in upstream[job_id])))  # fmt: skip
    return rows


def spans(numbers: Iterable[int]) -> str:
    """Step numbers as runs: ``1, 3-5, 9``; ``-`` for none."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs) or "-"
