"""Retention: finished jobs are pruned once their queue's policy stops keeping
them (``keep_completed``, ``keep_dead``), in bounded batches, by storage's clock."""

from __future__ import annotations

from typing import Any

import pytest

from tenure.config import QueuePolicy
from tenure.core.states import State
from tenure.errors import InvalidInput, JobNotFound
from tenure.job import Job
from tenure.portal import Portal
from tenure.worker.pruner import Pruner
from tenure.worker.sweeper import Sweeper
from tests.conformance.aging import age, history_rows
from tests.conformance.helpers import (
    all_jobs,
    claim_one,
    enqueue_one,
    nonzero_counts,
    spec,
)
from tests.conformance.test_dlq import bury

DAY = 86_400.0
DEFAULTS = QueuePolicy()


def completed(backend: Any, worker: str, n: int = 1, queue: str = "default") -> list[Job]:
    """``n`` jobs of ``queue``, claimed and completed."""
    backend.enqueue([spec(queue=queue) for _ in range(n)])
    claimed = backend.claim(worker, [queue], n)
    assert len(claimed) == n
    lost = backend.complete_many([(j.id, j.fence, b"1") for j in claimed])
    assert lost == set()
    return list(claimed)


def gone(backend: Any, job: Job) -> bool:
    """The job is gone from storage, with its history."""
    try:
        backend.get(job.id)
    except JobNotFound:
        return history_rows(backend, job) == 0
    return False


def test_a_completed_job_older_than_keep_completed__is_pruned_and_a_younger_one_stays(
    backend: Any, worker: str
) -> None:
    old, young = completed(backend, worker, 2)
    age(backend, [old.id], DEFAULTS.keep_completed + 60)  # type: ignore[operator]
    age(backend, [young.id], DEFAULTS.keep_completed - 60)  # type: ignore[operator]
    assert backend.prune(1000) == 1
    assert gone(backend, old)
    assert backend.get(young.id).state is State.COMPLETED
    assert nonzero_counts(backend) == {State.COMPLETED: 1}
    assert [j.id for j in all_jobs(backend)] == [young.id]
    assert backend.prune(1000) == 0


def test_a_dead_job__is_kept_for_keep_dead_with_its_history_then_pruned_with_it(
    backend: Any, worker: str
) -> None:
    dead = bury(backend, worker)
    assert history_rows(backend, dead) == 2
    age(backend, [dead.id], DEFAULTS.keep_completed + 60)  # type: ignore[operator]
    assert backend.prune(1000) == 0  # past keep_completed, within keep_dead
    assert backend.get(dead.id).state is State.DEAD
    age(backend, [dead.id], DEFAULTS.keep_dead)  # type: ignore[arg-type]
    assert backend.prune(1000) == 1
    assert gone(backend, dead)
    assert nonzero_counts(backend) == {}


def test_a_cancelled_job__is_kept_for_keep_completed(backend: Any) -> None:
    kept, pruned = enqueue_one(backend), enqueue_one(backend, delay=60)
    for job in (kept, pruned):
        backend.cancel(job.id)
    age(backend, [pruned.id], DEFAULTS.keep_completed + 60)  # type: ignore[operator]
    assert backend.prune(1000) == 1
    assert gone(backend, pruned)
    assert nonzero_counts(backend) == {State.CANCELLED: 1}


def test_a_job_cancelled_while_active__is_kept_for_keep_completed_then_pruned_with_its_history(
    backend: Any, worker: str
) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    backend.cancel(job.id)  # marks it; its worker hands it back
    backend.release(job.id, job.fence)
    assert backend.get(job.id).state is State.CANCELLED
    assert history_rows(backend, job) == 1
    assert backend.prune(1000) == 0
    age(backend, [job.id], DEFAULTS.keep_completed + 60)  # type: ignore[operator]
    assert backend.prune(1000) == 1
    assert gone(backend, job)
    assert nonzero_counts(backend) == {}


def test_keep_none__keeps_forever_and_keep_zero__prunes_at_once(backend: Any, worker: str) -> None:
    backend.change_policy("default", {"keep_completed": None, "keep_dead": 0})
    [done] = completed(backend, worker)
    dead = bury(backend, worker)
    age(backend, [done.id], 9 * 365 * DAY)
    assert backend.prune(1000) == 1  # the dead job, unaged
    assert gone(backend, dead)
    assert backend.get(done.id).state is State.COMPLETED


def test_each_queue__follows_its_own_policy(backend: Any, worker: str) -> None:
    backend.change_policy("other", {"keep_completed": 0})
    [default] = completed(backend, worker)
    [other] = completed(backend, worker, queue="other")
    assert backend.prune(1000) == 1
    assert gone(backend, other)
    assert backend.get(default.id).state is State.COMPLETED


def test_a_job_retried_from_the_dlq__is_not_pruned_until_it_finishes_again(
    backend: Any, worker: str
) -> None:
    dead = bury(backend, worker)
    age(backend, [dead.id], DEFAULTS.keep_dead + 60)  # type: ignore[operator]
    assert backend.retry_dead("default", [dead.id]) == 1
    assert backend.prune(1000) == 0
    retried = claim_one(backend, worker)
    assert backend.prune(1000) == 0
    backend.complete(retried.id, retried.fence, None)
    assert backend.prune(1000) == 0  # finished now: kept for keep_completed from now
    job = backend.get(dead.id)
    assert job.state is State.COMPLETED and len(job.history) == 3


def test_prune__deletes_at_most_its_limit_and_the_rest_at_the_next_calls(
    backend: Any, worker: str
) -> None:
    jobs = completed(backend, worker, 15) + completed(backend, worker, 12, queue="other")
    age(backend, [j.id for j in jobs], DEFAULTS.keep_completed + 60)  # type: ignore[operator]
    assert [backend.prune(10) for _ in range(4)] == [10, 10, 7, 0]
    assert all(gone(backend, j) for j in jobs)
    assert nonzero_counts(backend) == nonzero_counts(backend, "other") == {}


def test_a_prune_limit_that_is_not_an_integer_within_1_and_10000__is_invalid_input(
    backend: Any, worker: str
) -> None:
    [job] = completed(backend, worker)
    backend.change_policy("default", {"keep_completed": 0})
    for limit in (0, -1, 10_001, True, 1.5, "10", None):
        with pytest.raises(InvalidInput, match="limit"):
            backend.prune(limit)
    assert backend.get(job.id).state is State.COMPLETED


def test_the_pruner__prunes_batch_after_batch_until_one_is_not_full(
    backend: Any, worker: str, portal: Portal
) -> None:
    jobs = completed(backend, worker, 25)
    age(backend, [j.id for j in jobs], DEFAULTS.keep_completed + 60)  # type: ignore[operator]
    pruner = Pruner(backend.inner, batch=10)
    assert portal.run(pruner.run_once(budget=0.0)) == 10  # a batch, whatever the budget
    assert portal.run(pruner.run_once(budget=60.0)) == 15
    assert nonzero_counts(backend) == {}


def test_a_sweep__prunes_after_its_recoveries(backend: Any, worker: str, portal: Portal) -> None:
    old, young = completed(backend, worker, 2)
    age(backend, [old.id], DEFAULTS.keep_completed + 60)  # type: ignore[operator]
    sweeper = Sweeper(backend.inner, interval=1.0)
    portal.run(sweeper.run_once(force=True))
    assert sweeper.pruner.pruned == 1
    assert gone(backend, old)
    assert backend.get(young.id).state is State.COMPLETED
