"""The history checker's per-key rule (issue 39; ``history.py`` calls it).

The soak's queues have a ``max_active_per_key`` (``manifest.json``'s
``key_limits``, by queue) and most of its jobs a ``concurrency_key``, which the
driver writes down with each request (``requests.jsonl``). The rules, each a
must-be-zero row:

- at no moment do more handlers of one key's jobs run than the queue's
  ``max_active_per_key``, counted from the handlers' own records (the side
  channel's start and end of each execution), not from storage's counts;
- storage keeps on each job the concurrency key it was asked for (a job
  stored without its key would escape the limit unseen).

When an execution ended, for this count: at its ``end`` line; one without
(its process was killed) at its kill, the start of the fault that explains
its attempt's end, or else at its last sign of life. An execution whose
attempt storage recovered (a frozen or cut-off worker's, which may still run
and return later) gave its slot up at the recovery: storage must let another
job of the key start then, as for a worker that never comes back. That such a
handler ran on is ``OVERLAP``'s concern (a fault explains it), not this rule's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tenure.job import Job
    from tests.fault.history import Checker, Execution, Row

KEY_OVER = "jobs of one key running above max_active_per_key"
KEY_LOST = "jobs stored without the concurrency key asked for"
KEY_MUST_BE_ZERO = (KEY_OVER, KEY_LOST)


class KeyRules:
    """The per-key rules over one run; findings go to the checker's."""

    def __init__(self, checker: Checker) -> None:
        self.checker, self.f = checker, checker.f
        self.limits = checker.run.key_limits
        self.asked = {r.job_id: r.concurrency_key for r in checker.run.requests
                      if r.job_id is not None}  # fmt: skip

    def rows(self, row: Callable[[str], Row], plain: Callable[[str, float], Row]) -> list[Row]:
        """The rules' rows, then how much the limit was put to work."""
        spans: dict[tuple[str, str], list[tuple[float, float, str]]] = defaultdict(list)
        for (job_id, fence), x in self.checker.runs.items():
            job = self.checker.jobs.get(job_id)
            key = self.asked.get(job_id)
            if job is None or key is None:
                continue
            if self.limits.get(job.queue) is not None:
                spans[(job.queue, key)].append((x.start, self._end(job, fence, x), job_id))
        for job_id, key in self.asked.items():
            job = self.checker.jobs.get(job_id)
            if job is not None and job.concurrency_key != key:
                self.f.add(KEY_LOST, job_id, f"asked {key!r}, stored {job.concurrency_key!r}")
        most = 0
        for (queue, key), of_key in spans.items():
            peak, at, job_id = _peak(of_key)
            most = max(most, peak)
            limit = self.limits[queue]
            if peak > limit:
                self.f.add(KEY_OVER, job_id, f"key {key!r} of {queue}: {peak} handlers ran at "
                           f"mono {at:.3f}, max_active_per_key {limit}")  # fmt: skip
        executions = sum(len(s) for s in spans.values())
        return [row(name) for name in KEY_MUST_BE_ZERO] + [
            plain("keyed handler executions (under max_active_per_key)", executions),
            plain("  keys", len(spans)),
            plain("  most of one key running at once", most),
        ]

    def _end(self, job: Job, fence: int, x: Execution) -> float:
        """When execution ``x`` (of ``job``'s attempt ``fence``) gave up its slot,
        on the side channel's clock."""
        end = x.end.mono if x.end is not None else x.last
        attempt = next((a for a in job.history if a.fence == fence), None)
        fault = None if attempt is None else self.checker.explain(job, attempt)
        offset = self.checker.run.wall_minus_mono
        if attempt is None or fault is None or offset is None:
            return end
        if x.end is None:  # killed: it ran until the kill at most
            end = max(end, fault.started - offset)
        if attempt.ended_at is not None:  # recovered: its slot was free from then
            end = min(end, attempt.ended_at - offset)
        return end


def _peak(spans: list[tuple[float, float, str]]) -> tuple[int, float, str]:
    """The most spans open at once, when, and the job whose start made it so.
    A span that ends when another starts is not open with it."""
    moments = sorted([(start, 1, job_id) for start, _, job_id in spans]
                     + [(end, -1, job_id) for _, end, job_id in spans])  # fmt: skip
    running = peak = 0
    at, which = 0.0, ""
    for when, step, job_id in moments:
        running += step
        if running > peak:
            peak, at, which = running, when, job_id
    return peak, at, which
