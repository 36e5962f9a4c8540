"""Fleet-wide limits and pause, enforced by the claim itself on every backend."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tenure.config import QueuePolicy
from tenure.core.states import State
from tests.conformance.helpers import claim_at_once, claimers, register, spec, wait_for


def test_max_active__concurrent_claimers_never_hold_more_than_it(
    backend: Any, backend_url: str, open_backend: Callable[[str], Any], portal: Any
) -> None:
    backend.set_policy("q", QueuePolicy(max_active=3))
    backend.enqueue([spec(queue="q") for _ in range(24)])
    fleet = claimers(backend_url, open_backend)
    held: list[Any] = []
    finished = 0
    while finished < 24:
        held += claim_at_once(portal, fleet, 4)
        assert len(held) <= 3
        assert backend.counts("q")[State.ACTIVE] == len(held)
        job = held.pop(0)  # one finishes; its slot is free for the next round
        backend.complete(job.id, job.fence)
        finished += 1
    assert backend.counts("q")[State.COMPLETED] == 24


def test_max_active__counts_jobs_claimed_before_it_was_set(backend: Any, worker: str) -> None:
    backend.enqueue([spec(queue="q") for _ in range(5)])
    first = backend.claim(worker, ["q"], 2)
    backend.change_policy("q", {"max_active": 3})
    assert len(backend.claim(worker, ["q"], 5)) == 1
    assert backend.claim(worker, ["q"], 5) == []
    backend.change_policy("q", {"max_active": None})
    assert len(backend.claim(worker, ["q"], 5)) == 2
    assert len(first) == 2


def test_max_active__of_one_queue_leaves_the_others_free(backend: Any, worker: str) -> None:
    backend.set_policy("q", QueuePolicy(max_active=1))
    backend.enqueue([spec(queue="q", priority=9) for _ in range(3)])
    backend.enqueue([spec(queue="other") for _ in range(3)])
    jobs = backend.claim(worker, ["q", "other"], 4)
    assert sorted(j.queue for j in jobs) == ["other", "other", "other", "q"]


def test_rate_limit__concurrent_claimers_start_only_the_bucket(
    backend: Any, backend_url: str, open_backend: Callable[[str], Any], portal: Any
) -> None:
    backend.set_policy("q", QueuePolicy(rate_limit=5, rate_interval=3600.0))
    backend.enqueue([spec(queue="q") for _ in range(20)])
    fleet = claimers(backend_url, open_backend)
    assert len(claim_at_once(portal, fleet, 3)) == 5
    assert claim_at_once(portal, fleet, 3) == []  # a token comes back in 12 minutes


def test_rate_limit__the_bucket_refills_at_its_rate(backend: Any, worker: str) -> None:
    backend.set_policy("q", QueuePolicy(rate_limit=4, rate_interval=3600.0))
    backend.enqueue([spec(queue="q") for _ in range(40)])
    assert len(backend.claim(worker, ["q"], 10)) == 4
    assert backend.claim(worker, ["q"], 10) == []
    # Refilled at 20 a second from now on: within a span of t seconds, at most
    # the whole bucket (4) plus 20 * t more starts.
    backend.change_policy("q", {"rate_interval": 0.2})
    began = time.monotonic()
    started = len(wait_for(lambda: backend.claim(worker, ["q"], 10)))
    while time.monotonic() - began < 0.5:
        started += len(backend.claim(worker, ["q"], 10))
    assert 1 <= started <= 4 + 20 * (time.monotonic() - began) + 1


def test_paused_queue__claims_nothing_and_enqueues_still_land(backend: Any, worker: str) -> None:
    backend.enqueue([spec(queue="q")])
    backend.change_policy("q", {"paused": True})
    backend.enqueue([spec(queue="q"), spec(queue="other")])
    assert [j.queue for j in backend.claim(worker, ["q", "other"], 5)] == ["other"]
    assert backend.counts("q")[State.QUEUED] == 2
    backend.change_policy("q", {"paused": False})
    assert len(backend.claim(worker, ["q"], 5)) == 2


@pytest.mark.parametrize(
    "changes",
    [{"max_active": 0}, {"max_active": 1.5}, {"rate_limit": True}, {"rate_interval": 0},
     {"paused": "yes"}],
)  # fmt: skip
def test_bad_limit__is_refused_and_stores_nothing(backend: Any, changes: dict[str, Any]) -> None:
    from tenure.errors import InvalidInput

    with pytest.raises(InvalidInput):
        backend.change_policy("q", changes)
    assert backend.get_policy("q") == QueuePolicy()


def test_delete_queue__removes_its_jobs_policy_and_events_only(backend: Any, worker: str) -> None:
    from tenure.errors import JobNotFound

    backend.set_policy("q", QueuePolicy(max_attempts=7))
    jobs = backend.enqueue([spec(queue="q"), spec(queue="q", delay=60), spec(queue="q")])
    [other] = backend.enqueue([spec(queue="other")])
    done = backend.claim(worker, ["q"], 1)[0]
    backend.complete(done.id, done.fence)
    assert backend.read_events("q", None, 100)
    assert backend.delete_queue("q") == 3
    for job in jobs:
        with pytest.raises(JobNotFound):
            backend.get(job.id)
    assert backend.counts("q") == {s: 0 for s in State}
    assert backend.get_policy("q") == QueuePolicy()
    assert backend.read_events("q", None, 100) == []
    assert "q" not in backend.queues()
    assert backend.get(other.id).state is State.QUEUED
    backend.enqueue([spec(queue="q")])  # the name can be used again
    assert len(backend.claim(worker, ["q"], 5)) == 1


def test_delete_queue_with_an_active_job__is_refused_and_changes_nothing(
    backend: Any, worker: str
) -> None:
    from tenure.errors import InvalidTransition

    backend.enqueue([spec(queue="q"), spec(queue="q")])
    job = backend.claim(worker, ["q"], 1)[0]
    with pytest.raises(InvalidTransition, match="1 active job"):
        backend.delete_queue("q")
    assert backend.counts("q")[State.QUEUED] == 1
    backend.complete(job.id, job.fence)
    assert backend.delete_queue("q") == 2


def test_workers__count_the_leases_each_holds(backend: Any) -> None:
    busy, idle = register(backend, "busy", ("q", "r")), register(backend, "idle", ("q",))
    backend.enqueue([spec(queue="q"), spec(queue="q"), spec(queue="r")])
    backend.claim(busy, ["q", "r"], 3)
    assert {w.id: w.leases for w in backend.workers()} == {busy: 3, idle: 0}
