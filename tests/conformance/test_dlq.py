"""The dead-letter queue: dead jobs, retried with budgets reset, or purged."""

from __future__ import annotations

from typing import Any

import pytest

from tenure.config import QueuePolicy
from tenure.core.states import DeadReason, Outcome, State
from tenure.errors import InvalidInput, JobNotFound
from tenure.job import Job
from tests.conformance.helpers import (
    all_jobs,
    claim_one,
    decision_for,
    enqueue_one,
)


def bury(backend: Any, worker: str, queue: str = "default") -> Job:
    """Enqueue a job; its first attempt crashes (an attempt and a stall spent), its
    second fails fatally: it is dead with reason error, attempts 2 and stalls 1."""
    job = enqueue_one(backend, queue=queue)
    first = claim_one(backend, worker, (queue,))
    assert first.id == job.id
    crashed = decision_for(backend, first, Outcome.CRASHED)
    assert crashed.state == State.QUEUED
    backend.fail(first.id, first.fence, Outcome.CRASHED, "executor died", crashed)
    second = claim_one(backend, worker, (queue,))
    assert second.id == job.id
    fatal = decision_for(backend, second, Outcome.ERROR, fatal=True)
    backend.fail(second.id, second.fence, Outcome.ERROR, "Fail: bad input", fatal)
    dead: Job = backend.get(job.id)
    assert (dead.attempts, dead.stalls) == (2, 1)
    return dead


def test_fail_with_fatal_decision__sends_the_job_dead_with_reason_error(
    backend: Any, worker: str
) -> None:
    dead = bury(backend, worker)
    assert dead.state == State.DEAD
    assert dead.dead_reason == DeadReason.ERROR
    assert dead.error is not None and "bad input" in dead.error
    assert dead.worker is None
    assert dead.lease_expires_at is None
    assert [a.outcome for a in dead.history] == [Outcome.CRASHED, Outcome.ERROR]
    assert backend.counts("default")[State.DEAD] == 1


def test_dead_job__is_not_claimable(backend: Any, worker: str) -> None:
    bury(backend, worker)
    assert backend.claim(worker, ["default"], 10) == []


def test_list_dead__shows_the_dead_jobs_only(backend: Any, worker: str) -> None:
    a = bury(backend, worker)
    b = bury(backend, worker)
    enqueue_one(backend)
    page = backend.list(state=State.DEAD)
    assert {j.id for j in page.jobs} == {a.id, b.id}
    assert all(j.state == State.DEAD for j in page.jobs)


def test_retry_dead_of_a_queue__queues_all_with_budgets_reset_and_history_kept(
    backend: Any, worker: str
) -> None:
    a = bury(backend, worker)
    b = bury(backend, worker)
    elsewhere = bury(backend, worker, "other")
    assert backend.retry_dead("default") == 2
    for job in (a, b):
        stored = backend.get(job.id)
        assert stored.state == State.QUEUED
        assert stored.attempts == 2  # numbered on
        assert stored.budget_from == 2  # the budget counts from here
        assert stored.stalls == 0
        assert stored.dead_reason is None
        assert stored.history == job.history
    assert backend.get(elsewhere.id).state == State.DEAD


def test_retry_dead_of_one_id__queues_only_that_job(backend: Any, worker: str) -> None:
    a = bury(backend, worker)
    b = bury(backend, worker)
    assert backend.retry_dead("default", [a.id]) == 1
    assert backend.get(a.id).state == State.QUEUED
    assert backend.get(b.id).state == State.DEAD


def test_retry_dead_of_a_job_that_is_not_dead__moves_nothing(backend: Any, worker: str) -> None:
    queued = enqueue_one(backend)
    before = backend.get(queued.id)
    assert backend.retry_dead("default", [queued.id]) == 0
    assert backend.get(queued.id) == before


def test_retried_dead_job__runs_again_with_a_fresh_budget(backend: Any, worker: str) -> None:
    dead = bury(backend, worker)
    backend.retry_dead("default", [dead.id])
    again = claim_one(backend, worker)
    assert again.id == dead.id
    assert again.attempts == 3  # numbered on: the history is kept
    assert again.stalls == 0
    assert again.fence == dead.fence + 1
    backend.complete(again.id, again.fence, "third time lucky")
    stored = backend.get(dead.id)
    assert stored.state == State.COMPLETED
    assert [a.outcome for a in stored.history] == [
        Outcome.CRASHED,
        Outcome.ERROR,
        Outcome.COMPLETED,
    ]
    assert [a.fence for a in stored.history] == [1, 2, 3]
    assert [a.attempt for a in stored.history] == [1, 2, 3]


def test_a_job_dead_after_its_attempts__retried__runs_attempt_4_with_a_fresh_budget(
    backend: Any, worker: str
) -> None:
    backend.set_policy("default", QueuePolicy(backoff_base=0.0, backoff_jitter=0.0))
    job = enqueue_one(backend, max_attempts=3)
    for _ in range(3):
        claimed = claim_one(backend, worker)
        fate = decision_for(backend, claimed, Outcome.ERROR)
        backend.fail(claimed.id, claimed.fence, Outcome.ERROR, "boom", fate)
    assert (backend.get(job.id).state, fate.dead_reason) == (State.DEAD, DeadReason.MAX_ATTEMPTS)
    assert backend.retry_dead("default", [job.id], "cli") == 1
    for attempt in (4, 5):  # max_attempts again: this one and two more
        claimed = claim_one(backend, worker)
        assert claimed.attempts == attempt
        fate = decision_for(backend, claimed, Outcome.ERROR)
        assert fate.state == State.QUEUED
        backend.fail(claimed.id, claimed.fence, Outcome.ERROR, "boom", fate)
    last = claim_one(backend, worker)
    assert decision_for(backend, last, Outcome.ERROR).state == State.DEAD  # 6: 3 since
    history = backend.get(job.id).history
    assert [a.attempt for a in history] == [1, 2, 3, 4, 5, 6]


def test_retry_dead__records_who_retried_each_job_and_after_how_many_attempts(
    backend: Any, worker: str
) -> None:
    a = bury(backend, worker)
    b = bury(backend, worker)
    backend.retry_dead("default", [a.id], "dashboard")
    backend.retry_dead("default", None)
    retried = {
        e.job_id: e.data for e in backend.read_events(None, None, 1000) if e.kind == "retried"
    }
    assert retried == {
        a.id: {"by": "dashboard", "attempts": 2},
        b.id: {"by": "python", "attempts": 2},
    }


def test_retry_dead_by_someone_unknown__raises_invalid_input(backend: Any, worker: str) -> None:
    dead = bury(backend, worker)
    with pytest.raises(InvalidInput):
        backend.retry_dead("default", [dead.id], "someone")
    assert backend.get(dead.id).state == State.DEAD


def test_purge_dead_of_a_queue__deletes_its_dead_jobs(backend: Any, worker: str) -> None:
    a = bury(backend, worker)
    b = bury(backend, worker)
    elsewhere = bury(backend, worker, "other")
    alive = enqueue_one(backend)
    assert backend.purge_dead("default") == 2
    for job in (a, b):
        with pytest.raises(JobNotFound):
            backend.get(job.id)
    assert backend.get(elsewhere.id).state == State.DEAD
    assert backend.get(alive.id).state == State.QUEUED
    assert backend.counts("default")[State.DEAD] == 0
    assert {j.id for j in all_jobs(backend, queue="default")} == {alive.id}


def test_purge_dead_of_one_id__deletes_only_that_job(backend: Any, worker: str) -> None:
    a = bury(backend, worker)
    b = bury(backend, worker)
    assert backend.purge_dead("default", [a.id]) == 1
    with pytest.raises(JobNotFound):
        backend.get(a.id)
    assert backend.get(b.id).state == State.DEAD


def test_purge_dead__never_deletes_a_job_that_is_not_dead(backend: Any, worker: str) -> None:
    queued = enqueue_one(backend)
    assert backend.purge_dead("default", [queued.id]) == 0
    assert backend.get(queued.id).state == State.QUEUED


@pytest.mark.parametrize("by_id", [False, True], ids=["all", "by_id"])
def test_retry_dead_whose_key_is_taken_by_an_unfinished_job__leaves_it_dead(
    backend: Any, worker: str, by_id: bool
) -> None:
    """key= allows one unfinished job per queue and key: retrying a dead job
    whose key a newer unfinished job holds would make two, so that dead job
    stays dead (the others are retried) and no storage error leaks out."""
    first = enqueue_one(backend, key="k")
    claimed = claim_one(backend, worker)
    fatal = decision_for(backend, claimed, fatal=True)
    backend.fail(claimed.id, claimed.fence, Outcome.ERROR, "x", fatal)
    unrelated = bury(backend, worker)
    newer = enqueue_one(backend, key="k")
    assert newer.id != first.id
    ids = [first.id, unrelated.id] if by_id else None
    assert backend.retry_dead("default", ids) == 1
    assert backend.get(first.id).state == State.DEAD
    assert backend.get(unrelated.id).state == State.QUEUED
    assert backend.get(newer.id).state == State.QUEUED
    again = enqueue_one(backend, key="k")
    assert again.id == newer.id


def kill(backend: Any, worker: str, outcome: Outcome, queue: str = "default") -> Job:
    """A job whose only attempt ends with ``outcome``: dead of that outcome's reason."""
    enqueue_one(backend, queue=queue, max_attempts=1)
    job = claim_one(backend, worker, (queue,))
    backend.fail(job.id, job.fence, outcome, "it broke", decision_for(backend, job, outcome))
    dead: Job = backend.get(job.id)
    assert dead.state == State.DEAD
    return dead


def test_dead_counts__count_the_dead_jobs_of_the_queue_by_reason(
    backend: Any, worker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Redis counts by pieces: three pieces (the last one partly full) for five jobs.
    monkeypatch.setattr("tenure.backends.redis.operators.DEAD_COUNT_PIECE", 2)
    assert backend.dead_counts("default") == {}
    buried = [bury(backend, worker) for _ in range(2)]
    timed_out = kill(backend, worker, Outcome.TIMEOUT)
    exhausted = [kill(backend, worker, Outcome.ERROR) for _ in range(2)]
    kill(backend, worker, Outcome.ERROR, queue="other")
    enqueue_one(backend)  # not dead
    assert timed_out.dead_reason == DeadReason.TIMEOUT
    assert exhausted[0].dead_reason == DeadReason.MAX_ATTEMPTS
    expected = {DeadReason.ERROR: 2, DeadReason.TIMEOUT: 1, DeadReason.MAX_ATTEMPTS: 2}
    assert backend.dead_counts("default") == expected
    assert backend.dead_counts("other") == {DeadReason.MAX_ATTEMPTS: 1}

    backend.retry_dead("default", [buried[0].id])
    backend.purge_dead("default", [exhausted[0].id])
    expected = {DeadReason.ERROR: 1, DeadReason.TIMEOUT: 1, DeadReason.MAX_ATTEMPTS: 1}
    assert backend.dead_counts("default") == expected
    assert backend.dead_counts("nothing-here") == {}
    with pytest.raises(InvalidInput):
        backend.dead_counts("no spaces allowed")
