"""rescue: the sweeper recovers expired leases (stalled) and the leases of gone
workers (crashed), spends the budgets, and promotes due scheduled jobs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tenure.config import QueuePolicy
from tenure.core.retry import Decision
from tenure.core.states import DeadReason, Outcome, State
from tenure.errors import LeaseLost
from tests.conformance.helpers import (
    SHORT_LEASE,
    claim_one,
    enqueue_one,
    register,
    rescue_until,
    spec,
    wait_for,
)


@pytest.fixture
def short_lease(backend: Any) -> str:
    """The default queue with a short lease, and a live registered worker on it."""
    backend.set_policy("default", SHORT_LEASE)
    return register(backend, "worker-1")


# -- expired leases: stalled -----------------------------------------------------


def test_expired_lease__is_rescued_as_stalled_and_queued_again(
    backend: Any, short_lease: str
) -> None:
    enqueue_one(backend)
    job = claim_one(backend, short_lease)
    rescued = rescue_until(backend, job.id)
    assert rescued.fence == job.fence
    assert rescued.outcome == Outcome.STALLED
    assert rescued.state == State.QUEUED
    stored = backend.get(job.id)
    assert stored.state == State.QUEUED
    assert stored.stalls == 1
    assert stored.attempts == 1
    assert stored.worker is None
    assert stored.lease_expires_at is None
    [attempt] = stored.history
    assert attempt.outcome == Outcome.STALLED
    assert attempt.ended_at is not None


def test_live_unexpired_lease__is_not_rescued(backend: Any, worker: str) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    report = backend.rescue()
    assert report.swept
    assert report.rescued == ()
    stored = backend.get(job.id)
    assert stored.state == State.ACTIVE
    assert stored.fence == job.fence


def test_rescued_attempt__can_no_longer_settle(backend: Any, short_lease: str) -> None:
    enqueue_one(backend)
    job = claim_one(backend, short_lease)
    rescue_until(backend, job.id)
    before = backend.get(job.id)
    with pytest.raises(LeaseLost):
        backend.complete(job.id, job.fence, "late")
    with pytest.raises(LeaseLost):
        backend.fail(job.id, job.fence, Outcome.ERROR, "late", Decision(State.QUEUED))
    with pytest.raises(LeaseLost):
        backend.release(job.id, job.fence)
    with pytest.raises(LeaseLost):
        backend.progress(job.id, job.fence, {"late": True})
    assert backend.heartbeat(short_lease, {(job.id, job.fence)}).lost == {(job.id, job.fence)}
    assert backend.get(job.id) == before


def test_rescued_job__is_claimed_again_with_the_next_fence(backend: Any, short_lease: str) -> None:
    enqueue_one(backend)
    job = claim_one(backend, short_lease)
    rescue_until(backend, job.id)
    again = claim_one(backend, short_lease)
    assert again.id == job.id
    assert again.fence == job.fence + 1
    assert again.attempts == 2
    assert [(a.fence, a.outcome) for a in backend.get(job.id).history] == [
        (job.fence, Outcome.STALLED),
        (job.fence + 1, None),
    ]


def test_second_stall_with_max_stalls_2__sends_the_job_dead_as_stalled(backend: Any) -> None:
    backend.set_policy("default", SHORT_LEASE.replace(max_stalls=2, max_attempts=5))
    worker = register(backend, "worker-1")
    enqueue_one(backend)
    first = claim_one(backend, worker)
    assert rescue_until(backend, first.id).state == State.QUEUED
    second = claim_one(backend, worker)
    rescued = rescue_until(backend, second.id)
    assert rescued.state == State.DEAD
    assert rescued.outcome == Outcome.STALLED
    stored = backend.get(first.id)
    assert stored.state == State.DEAD
    assert stored.dead_reason == DeadReason.STALLED
    assert stored.stalls == 2
    assert stored.finished_at is not None
    assert [a.outcome for a in stored.history] == [Outcome.STALLED, Outcome.STALLED]


@pytest.mark.parametrize("where", ["policy", "job"])
def test_stall_on_the_last_attempt__sends_the_job_dead(backend: Any, where: str) -> None:
    if where == "policy":
        backend.set_policy("default", SHORT_LEASE.replace(max_attempts=1))
        enqueue_one(backend)
    else:
        backend.set_policy("default", SHORT_LEASE.replace(max_attempts=10))
        enqueue_one(backend, max_attempts=1)
    worker = register(backend, "worker-1")
    job = claim_one(backend, worker)
    rescued = rescue_until(backend, job.id)
    assert rescued.state == State.DEAD
    stored = backend.get(job.id)
    assert stored.state == State.DEAD
    assert stored.dead_reason == DeadReason.STALLED
    assert stored.attempts == 1


def test_expired_leases_of_many_jobs__are_all_rescued_once(backend: Any, short_lease: str) -> None:
    backend.enqueue([spec(args={"i": i}) for i in range(10)])
    claimed = backend.claim(short_lease, ["default"], 10)
    pending = {j.id for j in claimed}
    seen: list[str] = []

    def all_rescued() -> bool:
        for r in backend.rescue().rescued:
            seen.append(r.job_id)
        return set(seen) >= pending

    wait_for(all_rescued)
    assert sorted(seen) == sorted(pending)
    assert backend.counts("default")[State.QUEUED] == 10


# -- gone workers: crashed -------------------------------------------------------


def test_worker_closed_without_deregistering__its_jobs_are_rescued_as_crashed(
    backend: Any, backend_url: str, open_killable: Callable[[str], Any]
) -> None:
    doomed = open_killable(backend_url)
    register(doomed, "doomed")
    enqueue_one(backend)
    job = claim_one(doomed, "doomed")
    assert backend.rescue().rescued == ()  # alive while its backend is open
    doomed.close()  # as a kill -9 would: no deregister
    dead_workers: list[str] = []

    def rescued() -> Any:
        report = backend.rescue()
        dead_workers.extend(report.dead_workers)
        return next((r for r in report.rescued if r.job_id == job.id), None)

    r = wait_for(rescued, timeout=3)
    assert r.outcome == Outcome.CRASHED
    assert r.state == State.QUEUED
    assert r.fence == job.fence
    assert "doomed" in dead_workers
    stored = backend.get(job.id)
    assert stored.state == State.QUEUED
    assert stored.attempts == 1
    assert stored.stalls == 1
    assert stored.history[-1].outcome == Outcome.CRASHED
    assert "doomed" not in {w.id for w in backend.workers()}


def test_crash__consumes_an_attempt_and_a_stall(
    backend: Any, backend_url: str, open_killable: Callable[[str], Any]
) -> None:
    enqueue_one(backend)
    doomed = open_killable(backend_url)
    register(doomed, "doomed")
    job = claim_one(doomed, "doomed")
    doomed.close()
    rescue_until(backend, job.id)
    survivor = register(backend, "survivor")
    again = claim_one(backend, survivor)
    assert again.attempts == 2
    assert again.stalls == 1
    assert again.fence == job.fence + 1


def test_crash_on_the_last_attempt__sends_the_job_dead_as_crashed(
    backend: Any, backend_url: str, open_killable: Callable[[str], Any]
) -> None:
    enqueue_one(backend, max_attempts=1)
    doomed = open_killable(backend_url)
    register(doomed, "doomed")
    job = claim_one(doomed, "doomed")
    doomed.close()
    rescued = rescue_until(backend, job.id)
    assert rescued.outcome == Outcome.CRASHED
    assert rescued.state == State.DEAD
    stored = backend.get(job.id)
    assert stored.state == State.DEAD
    assert stored.dead_reason == DeadReason.CRASHED


def test_active_job_of_an_unregistered_worker__is_rescued_as_crashed(backend: Any) -> None:
    enqueue_one(backend)
    job = claim_one(backend, "never-registered")
    rescued = rescue_until(backend, job.id)
    assert rescued.outcome == Outcome.CRASHED
    assert rescued.state == State.QUEUED
    stored = backend.get(job.id)
    assert stored.stalls == 1
    assert stored.history[-1].outcome == Outcome.CRASHED


def test_deregistered_worker__its_remaining_leases_are_rescued_at_once(
    backend: Any, worker: str
) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    backend.deregister_worker(worker)
    report = backend.rescue()
    assert [(r.job_id, r.outcome) for r in report.rescued] == [(job.id, Outcome.CRASHED)]
    assert backend.get(job.id).state == State.QUEUED


def test_crash_on_an_at_most_once_queue__is_final(
    backend: Any, backend_url: str, open_killable: Callable[[str], Any]
) -> None:
    backend.set_policy("amo", QueuePolicy(delivery="at-most-once"))
    enqueue_one(backend, queue="amo")
    doomed = open_killable(backend_url)
    register(doomed, "doomed", ("amo",))
    job = claim_one(doomed, "doomed", ("amo",))
    doomed.close()
    rescued = rescue_until(backend, job.id)
    assert rescued.state == State.DEAD
    assert backend.get(job.id).state == State.DEAD
    assert backend.claim(register(backend, "w2", ("amo",)), ["amo"], 10) == []


def test_at_most_once_job_of_a_live_worker__is_never_rescued(backend: Any) -> None:
    backend.set_policy("amo", QueuePolicy(delivery="at-most-once"))
    worker = register(backend, "w", ("amo",))
    enqueue_one(backend, queue="amo")
    job = claim_one(backend, worker, ("amo",))
    assert backend.rescue().rescued == ()
    assert backend.get(job.id).state == State.ACTIVE


# -- what storage knows of a recovery ---------------------------------------------


def test_expired_lease__is_reported_with_its_holder_and_its_last_renewal(
    backend: Any, short_lease: str
) -> None:
    enqueue_one(backend, task="mail", queue="default")
    job = claim_one(backend, short_lease)
    assert backend.heartbeat(short_lease, {(job.id, job.fence)}).lost == set()
    renewed = backend.get(job.id).lease_expires_at - SHORT_LEASE.lease_ttl
    rescued = rescue_until(backend, job.id)
    assert (rescued.queue, rescued.task, rescued.worker) == ("default", "mail", short_lease)
    assert rescued.detector == "lease_expired"
    assert rescued.proven_at == pytest.approx(renewed, abs=1e-6)
    assert rescued.silent_for == pytest.approx(rescued.at - renewed, abs=1e-6)
    assert rescued.silent_for >= SHORT_LEASE.lease_ttl - 0.001


def test_gone_worker__is_reported_with_its_last_heartbeat(
    backend: Any, backend_url: str, open_killable: Callable[[str], Any]
) -> None:
    doomed = open_killable(backend_url)
    register(doomed, "doomed")
    enqueue_one(backend, task="mail")
    job = claim_one(doomed, "doomed")
    claimed_at = job.lease_expires_at - QueuePolicy().lease_ttl
    assert doomed.heartbeat("doomed", ()).lost == set()  # alive, its lease not renewed
    [last_seen] = [w.last_seen for w in backend.workers() if w.id == "doomed"]
    assert last_seen > claimed_at
    doomed.close()  # as a kill -9 would: no deregister
    rescued = rescue_until(backend, job.id)
    assert (rescued.queue, rescued.task, rescued.worker) == ("default", "mail", "doomed")
    assert rescued.detector == "worker_gone"
    assert rescued.proven_at == pytest.approx(last_seen, abs=1e-6)
    assert 0 <= rescued.silent_for < 10


def test_unregistered_holder__is_reported_with_its_claim_as_last_proof(backend: Any) -> None:
    enqueue_one(backend)
    job = claim_one(backend, "never-registered")
    rescued = rescue_until(backend, job.id)
    assert (rescued.detector, rescued.worker) == ("worker_gone", "never-registered")
    claimed_at = job.lease_expires_at - QueuePolicy().lease_ttl
    assert rescued.proven_at == pytest.approx(claimed_at, abs=1e-6)


def test_recovered_job__is_claimed_again_with_when_the_lost_attempt_was_last_proven(
    backend: Any, short_lease: str
) -> None:
    enqueue_one(backend)
    job = claim_one(backend, short_lease)
    assert job.recovered_from is None  # never recovered
    rescued = rescue_until(backend, job.id)
    assert backend.get(job.id).recovered_from == pytest.approx(rescued.proven_at, abs=1e-6)
    again = claim_one(backend, short_lease)
    assert again.recovered_from == pytest.approx(rescued.proven_at, abs=1e-6)
    backend.complete(again.id, again.fence, None)
    assert backend.get(job.id).recovered_from is None  # only for the attempt after it


@pytest.mark.parametrize("end", ["fail", "release", "recover"])
def test_recovered_from__goes_when_the_attempt_after_the_recovery_ends(
    backend: Any, short_lease: str, end: str
) -> None:
    enqueue_one(backend)
    first = rescue_until(backend, claim_one(backend, short_lease).id)
    again = claim_one(backend, short_lease)
    if end == "fail":
        backend.fail(again.id, again.fence, Outcome.ERROR, "boom", Decision(State.QUEUED))
    elif end == "release":
        backend.release(again.id, again.fence)
    else:  # a second recovery: from the second attempt's proof
        second = rescue_until(backend, again.id)
        assert second.proven_at > first.proven_at
        assert backend.get(again.id).recovered_from == pytest.approx(second.proven_at, abs=1e-6)
        return
    assert backend.get(again.id).recovered_from is None
    assert claim_one(backend, short_lease).recovered_from is None


def test_dead_lettered_by_a_sweep__has_no_recovered_from(backend: Any) -> None:
    backend.set_policy("default", SHORT_LEASE.replace(max_attempts=1))
    worker = register(backend, "worker-1")
    enqueue_one(backend)
    job = claim_one(backend, worker)
    assert rescue_until(backend, job.id).state == State.DEAD
    assert backend.get(job.id).recovered_from is None


# -- the sweep guard -------------------------------------------------------------


def test_rescue_within_min_interval__is_skipped(backend: Any) -> None:
    assert backend.rescue().swept
    skipped = backend.rescue(min_interval=60)
    assert not skipped.swept
    assert skipped.rescued == ()
    assert backend.rescue().swept


def test_rescue_within_min_interval__says_when_a_sweep_is_allowed(backend: Any) -> None:
    assert backend.rescue().swept
    skipped = backend.rescue(min_interval=60)
    assert not skipped.swept and 59 < skipped.retry_in <= 60
    time.sleep(0.3)
    later = backend.rescue(min_interval=60)
    assert not later.swept and later.retry_in <= skipped.retry_in - 0.25


def test_rescue_guard__is_shared_by_every_backend_on_the_storage(
    backend: Any, backend_url: str, open_backend: Callable[[str], Any]
) -> None:
    other = open_backend(backend_url)
    assert backend.rescue().swept
    assert not other.rescue(min_interval=60).swept


def test_rescue_after_min_interval__sweeps(backend: Any) -> None:
    assert backend.rescue().swept
    wait_for(lambda: backend.rescue(min_interval=0.1).swept, timeout=2)


def test_skipped_sweep__does_not_rescue(backend: Any, short_lease: str) -> None:
    enqueue_one(backend)
    job = claim_one(backend, short_lease)
    assert backend.rescue().swept
    wait_for(lambda: backend.get(job.id).lease_expires_at < time.time(), timeout=2)
    assert backend.rescue(min_interval=60).rescued == ()
    assert backend.get(job.id).state == State.ACTIVE
    rescue_until(backend, job.id)


# -- promotion -------------------------------------------------------------------


def test_rescue__promotes_due_scheduled_jobs_to_queued(backend: Any) -> None:
    due = enqueue_one(backend, delay=0.2)
    later = enqueue_one(backend, delay=60)
    promoted = 0

    def is_queued() -> bool:
        nonlocal promoted
        promoted += backend.rescue().promoted
        state: State = backend.get(due.id).state
        return state == State.QUEUED

    wait_for(is_queued, timeout=3)
    assert promoted == 1
    assert backend.get(later.id).state == State.SCHEDULED
