"""claim: taking due jobs, in batches, with a new fence, an attempt and a lease."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from tenure.config import QueuePolicy
from tenure.core.states import State
from tests.conformance.helpers import claim_one, enqueue_one, register, spec


def test_claim__takes_a_batch_of_up_to_limit_in_one_call(backend: Any, worker: str) -> None:
    backend.enqueue([spec(args={"i": i}) for i in range(5)])
    first = backend.claim(worker, ["default"], 3)
    assert len(first) == 3
    rest = backend.claim(worker, ["default"], 10)
    assert len(rest) == 2
    assert {j.id for j in first}.isdisjoint({j.id for j in rest})
    assert backend.claim(worker, ["default"], 10) == []
    assert backend.counts("default")[State.ACTIVE] == 5


def test_claim_on_an_empty_queue__returns_nothing(backend: Any, worker: str) -> None:
    assert backend.claim(worker, ["default"], 5) == []


def test_claim_with_limit_0__takes_nothing(backend: Any, worker: str) -> None:
    enqueue_one(backend)
    assert backend.claim(worker, ["default"], 0) == []
    assert backend.counts("default")[State.QUEUED] == 1


def test_claim__returns_the_jobs_as_stored(backend: Any, worker: str) -> None:
    backend.enqueue([spec(args={"i": i}) for i in range(3)])
    for job in backend.claim(worker, ["default"], 3):
        assert dataclasses.replace(backend.get(job.id), history=()) == job


def test_claim__never_returns_more_than_available(backend: Any, worker: str) -> None:
    backend.enqueue([spec() for _ in range(2)])
    assert len(backend.claim(worker, ["default"], 100)) == 2


def test_claimed_job__is_active_with_fence_attempt_worker_and_lease(
    backend: Any, worker: str
) -> None:
    job = enqueue_one(backend)
    ttl = backend.get_policy("default").lease_ttl
    before = time.time()
    claimed = claim_one(backend, worker)
    after = time.time()
    for j in (claimed, backend.get(job.id)):
        assert j.id == job.id
        assert j.state == State.ACTIVE
        assert j.fence == job.fence + 1
        assert j.attempts == job.attempts + 1
        assert j.worker == worker
        assert j.lease_expires_at is not None
        assert before + ttl - 1 <= j.lease_expires_at <= after + ttl + 1


def test_claim__records_a_running_attempt_in_history(backend: Any, worker: str) -> None:
    job = enqueue_one(backend)
    before = time.time()
    claimed = claim_one(backend, worker)
    [attempt] = backend.get(job.id).history
    assert attempt.attempt == 1
    assert attempt.fence == claimed.fence
    assert attempt.worker == worker
    assert attempt.outcome is None
    assert attempt.ended_at is None
    assert attempt.started_at >= before - 1


def test_claim_on_an_at_most_once_queue__has_no_lease(backend: Any) -> None:
    backend.set_policy("amo", QueuePolicy(delivery="at-most-once"))
    wid = register(backend, "amo-worker", ("amo",))
    job = enqueue_one(backend, queue="amo")
    claimed = claim_one(backend, wid, ("amo",))
    assert claimed.id == job.id
    assert claimed.state == State.ACTIVE
    assert claimed.fence == 1
    assert claimed.lease_expires_at is None
    assert backend.get(job.id).lease_expires_at is None


def test_claim__takes_only_from_the_listed_queues(backend: Any) -> None:
    wid = register(backend, "w", ("a", "b", "c"))
    a = enqueue_one(backend, queue="a")
    b = enqueue_one(backend, queue="b")
    c = enqueue_one(backend, queue="c")
    claimed = backend.claim(wid, ["a", "c"], 10)
    assert {j.id for j in claimed} == {a.id, c.id}
    assert backend.get(b.id).state == State.QUEUED
    assert [j.id for j in backend.claim(wid, ["b"], 10)] == [b.id]


def test_claim_across_queues__takes_the_best_of_all_in_order(backend: Any) -> None:
    wid = register(backend, "w", ("a", "b"))
    a_low, b_high, a_high, b_low, a_mid = (
        enqueue_one(backend, queue=q, priority=p)
        for q, p in (("a", 0), ("b", 9), ("a", 9), ("b", 0), ("a", 5))
    )
    claimed = backend.claim(wid, ["a", "b"], 3)
    assert [j.id for j in claimed] == [b_high.id, a_high.id, a_mid.id]
    rest = backend.claim(wid, ["b", "a"], 10)
    assert [j.id for j in rest] == [a_low.id, b_low.id]


def test_claim__uses_the_lease_ttl_of_the_jobs_queue(backend: Any) -> None:
    backend.set_policy("slow", QueuePolicy(lease_ttl=100.0, heartbeat_interval=10.0))
    backend.set_policy("fast", QueuePolicy(lease_ttl=5.0, heartbeat_interval=1.0))
    wid = register(backend, "w", ("slow", "fast"))
    enqueue_one(backend, queue="slow")
    enqueue_one(backend, queue="fast")
    now = time.time()
    by_queue = {j.queue: j for j in backend.claim(wid, ["slow", "fast"], 10)}
    assert by_queue["slow"].lease_expires_at is not None
    assert by_queue["fast"].lease_expires_at is not None
    assert abs(by_queue["slow"].lease_expires_at - (now + 100.0)) < 2
    assert abs(by_queue["fast"].lease_expires_at - (now + 5.0)) < 2


def test_claimed_job__is_not_claimed_again(backend: Any, worker: str) -> None:
    enqueue_one(backend)
    claim_one(backend, worker)
    other = register(backend, "worker-2")
    assert backend.claim(other, ["default"], 10) == []


def test_cancelled_and_completed_jobs__are_not_claimable(backend: Any, worker: str) -> None:
    cancelled = enqueue_one(backend)
    backend.cancel(cancelled.id)
    done = enqueue_one(backend)
    claimed = claim_one(backend, worker)
    assert claimed.id == done.id
    backend.complete(claimed.id, claimed.fence, "ok")
    assert backend.claim(worker, ["default"], 10) == []
