"""Helpers shared by the conformance suite. Backend-agnostic: protocol verbs only."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from tenure.backends.base import WorkerInfo
from tenure.config import QueuePolicy
from tenure.core.retry import Decision, decide
from tenure.core.states import Outcome, State
from tenure.job import Job, JobSpec

T = TypeVar("T")

# A lease short enough to expire within a test, with a heartbeat at half of it.
SHORT_LEASE = QueuePolicy(lease_ttl=0.2, heartbeat_interval=0.1)


def wait_for(predicate: Callable[[], T], timeout: float = 3.0, interval: float = 0.01) -> T:
    """Poll ``predicate`` until it returns something truthy; return that value.

    Fails the test when ``timeout`` seconds pass first. Never a fixed sleep: the
    condition is checked as soon as it can be true.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout} s: {predicate!r}")
        time.sleep(interval)


def spec(task: str = "t", args: dict[str, Any] | None = None, **kw: Any) -> JobSpec:
    return JobSpec.create(task, {"a": 1} if args is None else args, **kw)


def enqueue_one(
    backend: Any, task: str = "t", args: dict[str, Any] | None = None, **kw: Any
) -> Job:
    jobs: list[Job] = backend.enqueue([spec(task, args, **kw)])
    assert len(jobs) == 1
    return jobs[0]


CLAIMERS = 6  # backends claiming at once, as many workers would


def claimers(backend_url: str, open_backend: Callable[[str], Any]) -> list[tuple[Any, str]]:
    """Backends on the same storage, each with a worker registered for queue q."""
    found = []
    for i in range(CLAIMERS):
        b = open_backend(backend_url)
        found.append((b, register(b, f"claimer-{i}", ("q",))))
    return found


def claim_at_once(portal: Any, claiming: list[tuple[Any, str]], limit: int) -> list[Any]:
    """Every claimer claims up to ``limit`` jobs of q twice, all at the same time
    (each on its own connection); the jobs they got."""

    async def all_at_once() -> list[list[Any]]:
        claims = [b.inner.claim(w, ["q"], limit) for b, w in claiming for _ in range(2)]
        return await asyncio.gather(*claims)

    return [job for jobs in portal.run(all_at_once()) for job in jobs]


def register(backend: Any, worker_id: str, queues: tuple[str, ...] = ("default",)) -> str:
    backend.register_worker(
        WorkerInfo(id=worker_id, hostname="test-host", pid=12345, queues=queues)
    )
    return worker_id


def claim_one(backend: Any, worker_id: str, queues: tuple[str, ...] = ("default",)) -> Job:
    jobs: list[Job] = backend.claim(worker_id, list(queues), 1)
    assert len(jobs) == 1, f"expected one claimable job, got {jobs!r}"
    return jobs[0]


def decision_for(
    backend: Any,
    job: Job,
    outcome: Outcome = Outcome.ERROR,
    *,
    fatal: bool = False,
    retry_in: float | None = None,
) -> Decision:
    """What ``tenure.core.retry`` decides for ``job`` (as stored now) after ``outcome``."""
    policy = backend.get_policy(job.queue)
    current = backend.get(job.id)
    return decide(
        outcome,
        attempts=current.attempts - current.budget_from,
        stalls=current.stalls,
        max_attempts=current.max_attempts or policy.max_attempts,
        max_stalls=policy.max_stalls,
        policy=policy,
        retry_in=retry_in,
        fatal=fatal,
        rng=random.Random(0),
    )


def rescue_until(backend: Any, job_id: str, timeout: float = 3.0) -> Any:
    """Sweep until one sweep recovers ``job_id``; return that ``Rescued`` entry."""

    def rescued() -> Any:
        report = backend.rescue()
        for r in report.rescued:
            if r.job_id == job_id:
                return r
        return None

    return wait_for(rescued, timeout)


def all_jobs(backend: Any, **filters: Any) -> list[Job]:
    """Every job the listing yields, following cursors."""
    jobs: list[Job] = []
    after = None
    while True:
        page = backend.list(limit=100, after=after, **filters)
        jobs.extend(page.jobs)
        if page.next_cursor is None:
            return jobs
        after = page.next_cursor


def nonzero_counts(backend: Any, queue: str = "default") -> dict[State, int]:
    return {s: n for s, n in backend.counts(queue).items() if n}
