"""What a lease holder writes: heartbeat, progress, complete, fail, release.

Every write presents ``(job_id, fence)``; a stale fence raises LeaseLost and
changes nothing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenure.config import QueuePolicy
from tenure.core.retry import Decision
from tenure.core.states import DeadReason, Outcome, State
from tenure.errors import InvalidInput, JobNotFound, LeaseLost
from tenure.job import Job
from tests.conformance.helpers import (
    SHORT_LEASE,
    claim_one,
    decision_for,
    enqueue_one,
    register,
    rescue_until,
    spec,
    wait_for,
)
from tests.conformance.test_enqueue import JSON

RETRY_NOW = Decision(State.QUEUED)

# -- heartbeat -------------------------------------------------------------------


def test_heartbeat__moves_every_lease_forward(backend: Any, worker: str) -> None:
    backend.enqueue([spec(), spec()])
    claimed = backend.claim(worker, ["default"], 2)
    before = {j.id: j.lease_expires_at for j in claimed}
    leases = {(j.id, j.fence) for j in claimed}

    def renewed() -> bool:
        assert backend.heartbeat(worker, leases).lost == set()
        now = {j: backend.get(j).lease_expires_at for j in before}
        return all(now[j] > before[j] for j in before)

    wait_for(renewed, timeout=2)


def test_heartbeat__keeps_a_healthy_job_from_being_rescued(backend: Any) -> None:
    # a lease of 0.4 s was outlived once in a full run (PostgreSQL, 2 busy
    # cores): a pause of the test's own loop, not a missed renewal
    policy = QueuePolicy(lease_ttl=1.0, heartbeat_interval=0.5)
    backend.set_policy("default", policy)
    worker = register(backend, "worker-1")
    enqueue_one(backend)
    job = claim_one(backend, worker)
    end = time.monotonic() + 2.5 * policy.lease_ttl  # well past the first lease's expiry
    while time.monotonic() < end:
        assert backend.heartbeat(worker, {(job.id, job.fence)}).lost == set()
        assert backend.rescue().rescued == ()
        time.sleep(policy.heartbeat_interval / 4)
    stored = backend.get(job.id)
    assert stored.state == State.ACTIVE
    assert stored.fence == job.fence
    assert stored.stalls == 0


def test_heartbeat__reports_a_completed_lease_as_lost(backend: Any, worker: str) -> None:
    backend.enqueue([spec(), spec()])
    done, running = backend.claim(worker, ["default"], 2)
    backend.complete(done.id, done.fence, None)
    lost = backend.heartbeat(worker, {(done.id, done.fence), (running.id, running.fence)}).lost
    assert lost == {(done.id, done.fence)}


def test_heartbeat__reports_a_stale_fence_as_lost(backend: Any, worker: str) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    lost = backend.heartbeat(worker, {(job.id, job.fence - 1), (job.id, job.fence)}).lost
    assert lost == {(job.id, job.fence - 1)}


def test_heartbeat__reports_an_unknown_job_as_lost(backend: Any, worker: str) -> None:
    ghost = (str(uuid.uuid4()), 1)
    assert backend.heartbeat(worker, {ghost}).lost == {ghost}


def test_heartbeat__reports_a_rescued_lease_as_lost(backend: Any) -> None:
    backend.set_policy("default", SHORT_LEASE)
    worker = register(backend, "worker-1")
    enqueue_one(backend)
    job = claim_one(backend, worker)
    rescue_until(backend, job.id)
    assert backend.heartbeat(worker, {(job.id, job.fence)}).lost == {(job.id, job.fence)}


def test_heartbeat_by_another_worker__reports_the_lease_lost_and_renews_nothing(
    backend: Any, worker: str
) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    intruder = register(backend, "worker-2")
    before = backend.get(job.id)
    assert backend.heartbeat(intruder, {(job.id, job.fence)}).lost == {(job.id, job.fence)}
    assert backend.get(job.id) == before


def test_heartbeat_with_no_leases__returns_nothing(backend: Any, worker: str) -> None:
    assert backend.heartbeat(worker, set()).lost == set()


# -- complete --------------------------------------------------------------------


@pytest.mark.parametrize(
    "result", [None, 42, "ok", [1, "two", None], {"nested": {"x": [1.5, True]}}]
)
def test_complete__stores_the_json_result(backend: Any, worker: str, result: Any) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    backend.complete(job.id, job.fence, result)
    stored = backend.get(job.id)
    assert stored.state == State.COMPLETED
    assert stored.result == result
    assert stored.finished_at is not None
    [attempt] = stored.history
    assert attempt.outcome == Outcome.COMPLETED
    assert attempt.ended_at is not None
    assert attempt.ended_at >= attempt.started_at


def test_complete_with_random_job_id__raises_job_not_found(backend: Any, worker: str) -> None:
    with pytest.raises(JobNotFound):
        backend.complete(str(uuid.uuid4()), 1, None)


def test_complete_twice__is_refused_the_second_time(backend: Any, worker: str) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    backend.complete(job.id, job.fence, "first")
    before = backend.get(job.id)
    with pytest.raises(LeaseLost):
        backend.complete(job.id, job.fence, "second")
    assert backend.get(job.id) == before


def test_complete_many__completes_the_held_and_reports_the_rest_lost(
    backend: Any, worker: str
) -> None:
    backend.enqueue([spec(args={"i": i}) for i in range(3)])
    a, b, c = backend.claim(worker, ["default"], 3)
    backend.complete(c.id, c.fence, "already")
    unknown = str(uuid.uuid4())
    items = [(a.id, a.fence, b'{"r":1}'), (b.id, b.fence + 1, b"2"), (c.id, c.fence, b"3"),
             (unknown, 1, b"null")]  # fmt: skip
    lost = backend.complete_many(items)
    assert lost == {(b.id, b.fence + 1), (c.id, c.fence), (unknown, 1)}
    assert backend.get(a.id).result == {"r": 1}
    assert backend.get(a.id).history[-1].outcome == Outcome.COMPLETED
    assert backend.get(b.id).state == State.ACTIVE  # a stale fence changed nothing
    assert backend.get(c.id).result == "already"


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(results=st.lists(JSON, min_size=1, max_size=4))
def test_complete_many__stores_any_json_results_as_given(
    backend: Any, worker: str, results: list[Any]
) -> None:
    """The batched completion (a worker's cycle) stores each result's JSON as it
    came, whatever it holds."""
    backend.enqueue([spec() for _ in results])
    jobs = backend.claim(worker, ["default"], len(results))
    items = [(j.id, j.fence, orjson.dumps(r)) for j, r in zip(jobs, results, strict=True)]
    assert backend.complete_many(items) == set()
    stored = [orjson.dumps(backend.get(j.id).result) for j in jobs]
    assert stored == [orjson.dumps(r) for r in results]


def test_complete_and_claim__completes_then_claims_in_one_call(backend: Any, worker: str) -> None:
    backend.enqueue([spec(args={"i": i}) for i in range(4)])
    first = claim_one(backend, worker)
    stale = (str(uuid.uuid4()), 7, b"null")
    lost, claimed = backend.complete_and_claim(
        [(first.id, first.fence, b'"done"'), stale], worker, ["default"], 2
    )
    assert lost == {stale[:2]}
    assert backend.get(first.id).state == State.COMPLETED
    assert backend.get(first.id).result == "done"
    assert [j.args["i"] for j in claimed] == [1, 2]
    assert all(backend.get(j.id).state == State.ACTIVE and j.worker == worker for j in claimed)
    # either part may be empty
    assert backend.complete_and_claim([], worker, ["default"], 5)[0] == set()
    lost, none = backend.complete_and_claim(
        [(j.id, j.fence, b"1") for j in claimed], worker, ["default"], 0
    )
    assert (lost, none) == (set(), [])
    assert backend.counts("default")[State.COMPLETED] == 3
    assert backend.complete_and_claim([], worker, ["default"], 0) == (set(), [])


def test_complete_and_claim__batches_of_thousands_settle_every_job(
    backend: Any, worker: str
) -> None:
    """Large cycles (the Redis scripts write each set in pieces) lose nothing."""
    backend.enqueue([spec(args={"i": i}) for i in range(2_500)])
    first = backend.claim(worker, ["default"], 1_200)
    items = [(j.id, j.fence, b"%d" % j.args["i"]) for j in first]
    lost, rest = backend.complete_and_claim(items, worker, ["default"], 2_000)
    assert lost == set()
    assert len(rest) == 1_300
    assert [j.args["i"] for j in first + rest] == list(range(2_500))
    counts = backend.counts("default")
    assert (counts[State.COMPLETED], counts[State.ACTIVE], counts[State.QUEUED]) == (
        1_200,
        1_300,
        0,
    )
    done, running = backend.get(first[-1].id), backend.get(rest[-1].id)
    assert (done.state, done.result, done.worker, done.lease_expires_at) == (
        State.COMPLETED, 1_199, None, None)  # fmt: skip
    assert (running.state, running.worker) == (State.ACTIVE, worker)
    assert backend.complete_many([(j.id, j.fence, b"null") for j in rest]) == set()
    assert backend.counts("default")[State.COMPLETED] == 2_500


def test_complete_and_claim__never_claims_a_job_it_completes(backend: Any, worker: str) -> None:
    job = enqueue_one(backend)
    held = claim_one(backend, worker)
    lost, claimed = backend.complete_and_claim(
        [(held.id, held.fence, b"null")], worker, ["default"], 5
    )
    assert (lost, claimed) == (set(), [])
    assert backend.get(job.id).state == State.COMPLETED


# -- stale fences: every write is refused and changes nothing ---------------------


def _complete(b: Any, job: Job, fence: int) -> None:
    b.complete(job.id, fence, {"stale": True})


def _fail(b: Any, job: Job, fence: int) -> None:
    b.fail(job.id, fence, Outcome.ERROR, "stale error", RETRY_NOW)


def _fail_dead(b: Any, job: Job, fence: int) -> None:
    b.fail(
        job.id, fence, Outcome.ERROR, "stale", Decision(State.DEAD, dead_reason=DeadReason.ERROR)
    )


def _release(b: Any, job: Job, fence: int) -> None:
    b.release(job.id, fence)


def _progress(b: Any, job: Job, fence: int) -> None:
    b.progress(job.id, fence, {"pct": 99})


WRITES: dict[str, Callable[[Any, Job, int], None]] = {
    "complete": _complete,
    "fail": _fail,
    "fail_dead": _fail_dead,
    "release": _release,
    "progress": _progress,
}


@pytest.mark.parametrize("write", list(WRITES.values()), ids=list(WRITES))
def test_write_with_stale_fence__is_refused_and_changes_nothing(
    backend: Any, worker: str, write: Callable[[Any, Job, int], None]
) -> None:
    enqueue_one(backend)
    first = claim_one(backend, worker)
    backend.fail(first.id, first.fence, Outcome.ERROR, "first attempt", RETRY_NOW)
    second = claim_one(backend, worker)
    assert second.fence == first.fence + 1
    before = backend.get(first.id)
    with pytest.raises(LeaseLost):
        write(backend, first, first.fence)
    assert backend.get(first.id) == before


@pytest.mark.parametrize("write", list(WRITES.values()), ids=list(WRITES))
def test_write_with_future_fence__is_refused_and_changes_nothing(
    backend: Any, worker: str, write: Callable[[Any, Job, int], None]
) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    before = backend.get(job.id)
    with pytest.raises(LeaseLost):
        write(backend, job, job.fence + 1)
    assert backend.get(job.id) == before


@pytest.mark.parametrize("write", list(WRITES.values()), ids=list(WRITES))
def test_write_to_a_queued_job__is_refused_and_changes_nothing(
    backend: Any, write: Callable[[Any, Job, int], None]
) -> None:
    job = enqueue_one(backend)
    before = backend.get(job.id)
    with pytest.raises(LeaseLost):
        write(backend, job, job.fence)
    assert backend.get(job.id) == before


class NotJson:
    pass


@pytest.mark.parametrize(
    "result",
    [{1, 2}, NotJson(), {"blob": "x" * (1024 * 1024 + 1)}],
    ids=["set", "object", "over-1MiB"],
)
def test_complete_with_a_result_that_is_not_json__raises_invalid_input_and_changes_nothing(
    backend: Any, worker: str, result: Any
) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    before = backend.get(job.id)
    with pytest.raises(InvalidInput):
        backend.complete(job.id, job.fence, result)
    assert backend.get(job.id) == before
    backend.complete(job.id, job.fence, "fine")
    assert backend.get(job.id).result == "fine"


def test_progress_that_is_not_json__raises_invalid_input_and_changes_nothing(
    backend: Any, worker: str
) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    backend.progress(job.id, job.fence, {"pct": 1})
    before = backend.get(job.id)
    with pytest.raises(InvalidInput):
        backend.progress(job.id, job.fence, {"bad": object()})
    assert backend.get(job.id) == before


# -- progress --------------------------------------------------------------------


def test_progress__records_json_for_the_current_attempt(backend: Any, worker: str) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    backend.progress(job.id, job.fence, {"pct": 10})
    backend.progress(job.id, job.fence, {"pct": 50, "step": "b"})
    stored = backend.get(job.id)
    assert stored.progress == {"pct": 50, "step": "b"}
    assert stored.state == State.ACTIVE
    assert stored.fence == job.fence


# -- fail ------------------------------------------------------------------------


def test_fail_with_backoff__schedules_the_job_in_the_future(backend: Any, worker: str) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    decision = decision_for(backend, job, Outcome.ERROR)
    assert decision.state == State.SCHEDULED
    assert decision.delay > 0
    before = time.time()
    backend.fail(job.id, job.fence, Outcome.ERROR, "Traceback: ValueError: boom", decision)
    stored = backend.get(job.id)
    assert stored.state == State.SCHEDULED
    assert stored.run_at >= before + decision.delay - 0.5
    assert stored.attempts == 1
    assert stored.stalls == 0
    assert stored.worker is None
    assert stored.lease_expires_at is None
    assert stored.error is not None and "boom" in stored.error
    [attempt] = stored.history
    assert attempt.outcome == Outcome.ERROR
    assert attempt.error is not None and "boom" in attempt.error
    assert attempt.ended_at is not None
    assert backend.claim(worker, ["default"], 1) == []


def test_fail_with_retry_now__queues_the_job_for_the_next_claim(backend: Any, worker: str) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    decision = decision_for(backend, job, Outcome.ERROR, retry_in=0)
    assert decision.state == State.QUEUED
    backend.fail(job.id, job.fence, Outcome.ERROR, "try again", decision)
    assert backend.get(job.id).state == State.QUEUED
    again = claim_one(backend, worker)
    assert again.id == job.id
    assert again.fence == job.fence + 1
    assert again.attempts == 2
    history = backend.get(job.id).history
    assert [(a.attempt, a.fence, a.outcome) for a in history] == [
        (1, job.fence, Outcome.ERROR),
        (2, job.fence + 1, None),
    ]


def test_fail_on_last_attempt__sends_the_job_dead_with_reason(backend: Any, worker: str) -> None:
    enqueue_one(backend, max_attempts=1)
    job = claim_one(backend, worker)
    decision = decision_for(backend, job, Outcome.ERROR)
    assert decision.state == State.DEAD
    backend.fail(job.id, job.fence, Outcome.ERROR, "boom", decision)
    stored = backend.get(job.id)
    assert stored.state == State.DEAD
    assert stored.dead_reason == DeadReason.MAX_ATTEMPTS
    assert stored.finished_at is not None
    assert stored.history[-1].outcome == Outcome.ERROR


def test_fail_with_timeout__records_the_timeout_outcome(backend: Any, worker: str) -> None:
    enqueue_one(backend, max_attempts=1)
    job = claim_one(backend, worker)
    decision = decision_for(backend, job, Outcome.TIMEOUT)
    backend.fail(job.id, job.fence, Outcome.TIMEOUT, "deadline of 1 s exceeded", decision)
    stored = backend.get(job.id)
    assert stored.state == State.DEAD
    assert stored.dead_reason == DeadReason.TIMEOUT
    assert stored.history[-1].outcome == Outcome.TIMEOUT


def test_fail_with_a_stall_decision__consumes_a_stall(backend: Any, worker: str) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    decision = decision_for(backend, job, Outcome.CRASHED)
    assert decision.stall
    backend.fail(job.id, job.fence, Outcome.CRASHED, "executor died", decision)
    stored = backend.get(job.id)
    assert stored.state == State.QUEUED
    assert stored.stalls == 1
    assert stored.attempts == 1
    assert stored.history[-1].outcome == Outcome.CRASHED


def test_fail_with_random_job_id__raises_job_not_found(backend: Any) -> None:
    with pytest.raises(JobNotFound):
        backend.fail(str(uuid.uuid4()), 1, Outcome.ERROR, "x", RETRY_NOW)


# -- release ---------------------------------------------------------------------


def test_release__requeues_the_job_and_the_attempt_does_not_count(
    backend: Any, worker: str
) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    backend.release(job.id, job.fence)
    stored = backend.get(job.id)
    assert stored.state == State.QUEUED
    assert stored.attempts == 0
    assert stored.stalls == 0
    assert stored.worker is None
    assert stored.lease_expires_at is None
    assert [a.outcome for a in stored.history] == [Outcome.RELEASED]
    again = claim_one(backend, worker)
    assert again.fence == job.fence + 1
    assert again.attempts == 1


def test_release_after_a_failed_attempt__keeps_the_earlier_attempt(
    backend: Any, worker: str
) -> None:
    enqueue_one(backend)
    first = claim_one(backend, worker)
    backend.fail(first.id, first.fence, Outcome.ERROR, "boom", RETRY_NOW)
    second = claim_one(backend, worker)
    assert second.attempts == 2
    backend.release(second.id, second.fence)
    stored = backend.get(second.id)
    assert stored.attempts == 1
    assert [a.outcome for a in stored.history] == [Outcome.ERROR, Outcome.RELEASED]
