"""Aborting a running job through storage: a cancel of an active job marks it
``cancel_requested``; its worker learns it from its heartbeat; whatever ends
the attempt then but a completion puts the job in ``cancelled``, for good.
"""

from __future__ import annotations

from typing import Any

import pytest

from tenure.core.retry import CANCELLED, Decision
from tenure.core.states import DeadReason, Outcome, State
from tenure.errors import InvalidTransition, LeaseLost
from tenure.job import Job
from tests.conformance.helpers import (
    SHORT_LEASE,
    claim_one,
    enqueue_one,
    register,
    rescue_until,
    spec,
    wait_for,
)
from tests.conformance.test_events import kinds

RETRY_NOW = Decision(State.QUEUED)


def running(backend: Any, worker: str) -> Job:
    enqueue_one(backend)
    return claim_one(backend, worker)


def requested(backend: Any, worker: str) -> Job:
    """A job claimed by ``worker`` whose cancel was then requested."""
    job = running(backend, worker)
    backend.cancel(job.id)
    return job


def test_cancel_of_an_active_job__marks_it_and_leaves_it_active(backend: Any, worker: str) -> None:
    job = running(backend, worker)
    assert not job.cancel_requested
    marked = backend.cancel(job.id)
    assert (marked.state, marked.cancel_requested, marked.fence) == (State.ACTIVE, True, job.fence)
    again = backend.cancel(job.id)  # a second request changes nothing
    assert (again.state, again.cancel_requested) == (State.ACTIVE, True)
    assert backend.get(job.id).cancel_requested
    assert backend.counts("default")[State.ACTIVE] == 1
    assert [k for k, _ in kinds(backend, job.id)] == ["enqueued", "started"]


def test_heartbeat__reports_a_cancel_request_and_still_renews_the_lease(
    backend: Any, worker: str
) -> None:
    job, other = (running(backend, worker), running(backend, worker))
    leases = {(job.id, job.fence), (other.id, other.fence)}
    assert backend.heartbeat(worker, leases).cancel_requested == frozenset()
    backend.cancel(job.id)
    before = backend.get(job.id).lease_expires_at

    def renewed() -> bool:
        renewal = backend.heartbeat(worker, leases)
        assert renewal.lost == frozenset()
        assert renewal.cancel_requested == {(job.id, job.fence)}
        return bool(backend.get(job.id).lease_expires_at > before)

    wait_for(renewed, timeout=2)


def test_heartbeat_with_a_stale_fence__reports_it_lost_not_cancel_requested(
    backend: Any, worker: str
) -> None:
    job = requested(backend, worker)
    stale = (job.id, job.fence - 1)
    renewal = backend.heartbeat(worker, {stale})
    assert (renewal.lost, renewal.cancel_requested) == ({stale}, frozenset())
    intruder = register(backend, "worker-2")
    renewal = backend.heartbeat(intruder, {(job.id, job.fence)})
    assert renewal.cancel_requested == frozenset()


def test_settle_as_cancelled__ends_the_job_and_its_attempt_cancelled(
    backend: Any, worker: str
) -> None:
    job = requested(backend, worker)
    backend.fail(job.id, job.fence, Outcome.CANCELLED, "stopped by its worker", CANCELLED)
    done = backend.get(job.id)
    assert (done.state, done.attempts, done.worker, done.lease_expires_at) == (
        State.CANCELLED, 1, None, None,
    )  # fmt: skip
    assert done.finished_at is not None and done.error == "stopped by its worker"
    assert [(a.outcome, a.error) for a in done.history] == [
        (Outcome.CANCELLED, "stopped by its worker")
    ]
    assert kinds(backend, job.id)[-1] == ("cancelled", {"outcome": "cancelled"})
    assert backend.counts("default")[State.CANCELLED] == 1
    assert backend.claim(worker, ["default"], 1) == []  # it never runs again


def test_settle_as_cancelled_with_a_stale_fence__is_refused(backend: Any, worker: str) -> None:
    job = requested(backend, worker)
    before = backend.get(job.id)
    with pytest.raises(LeaseLost):
        backend.fail(job.id, job.fence - 1, Outcome.CANCELLED, None, CANCELLED)
    assert backend.get(job.id) == before


@pytest.mark.parametrize(
    "decision",
    [
        RETRY_NOW,
        Decision(State.SCHEDULED, delay=60),
        Decision(State.DEAD, dead_reason=DeadReason.ERROR),
    ],
    ids=["queued", "scheduled", "dead"],
)
def test_a_failure_of_a_cancel_requested_job__cancels_it_whatever_the_decision(
    backend: Any, worker: str, decision: Decision
) -> None:
    """Its worker may have failed the attempt before it learnt of the cancel."""
    job = requested(backend, worker)
    backend.fail(job.id, job.fence, Outcome.ERROR, "boom", decision)
    done = backend.get(job.id)
    assert (done.state, done.dead_reason, done.error) == (State.CANCELLED, None, "boom")
    assert [a.outcome for a in done.history] == [Outcome.ERROR]
    assert kinds(backend, job.id)[-1] == ("cancelled", {"outcome": "error"})
    assert backend.counts("default")[State.CANCELLED] == 1


def test_a_release_of_a_cancel_requested_job__cancels_it(backend: Any, worker: str) -> None:
    """A drain hands back what it stopped: a cancelled job does not go back."""
    job = requested(backend, worker)
    backend.release(job.id, job.fence)
    done = backend.get(job.id)
    assert done.state is State.CANCELLED
    assert [a.outcome for a in done.history] == [Outcome.RELEASED]
    assert kinds(backend, job.id)[-1] == ("cancelled", {"outcome": "released"})
    assert backend.claim(worker, ["default"], 1) == []


def test_a_completion_before_the_cancel_took_effect__stands(backend: Any, worker: str) -> None:
    job = requested(backend, worker)
    backend.complete(job.id, job.fence, "done anyway")
    done = backend.get(job.id)
    assert (done.state, done.result, done.cancel_requested) == (
        State.COMPLETED,
        "done anyway",
        True,
    )
    with pytest.raises(InvalidTransition):
        backend.cancel(job.id)


def test_rescue_of_a_cancel_requested_job_whose_lease_expired__cancels_it(backend: Any) -> None:
    backend.set_policy("default", SHORT_LEASE)
    worker = register(backend, "worker-1")
    job = requested(backend, worker)
    rescued = rescue_until(backend, job.id)
    assert (rescued.outcome, rescued.state) == (Outcome.STALLED, State.CANCELLED)
    done = backend.get(job.id)
    assert done.state is State.CANCELLED and done.finished_at is not None
    assert [a.outcome for a in done.history] == [Outcome.STALLED]
    assert [k for k, _ in kinds(backend, job.id)][-2:] == ["stalled", "cancelled"]
    backend.enqueue([spec()])
    assert claim_one(backend, worker).id != job.id


def test_rescue_of_a_cancel_requested_job_whose_worker_died__cancels_it(
    backend_url: str, backend: Any, open_killable: Any
) -> None:
    victim = open_killable(backend_url)
    worker = register(victim, "doomed")
    job = requested(victim, worker)
    victim.close()  # like a kill -9: its liveness goes, its lease stays
    rescued = rescue_until(backend, job.id, timeout=10)
    assert (rescued.outcome, rescued.state) == (Outcome.CRASHED, State.CANCELLED)
    assert backend.get(job.id).state is State.CANCELLED
    with pytest.raises(LeaseLost):  # the old attempt can no longer settle it
        backend.fail(job.id, job.fence, Outcome.CANCELLED, None, CANCELLED)


def test_cancel_of_a_cancelled_job__is_refused(backend: Any, worker: str) -> None:
    job = requested(backend, worker)
    backend.fail(job.id, job.fence, Outcome.CANCELLED, None, CANCELLED)
    with pytest.raises(InvalidTransition):
        backend.cancel(job.id)
