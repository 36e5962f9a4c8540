"""claim passing over tasks: a worker in a rolling deploy leaves the jobs of
the tasks it does not know in their place, for a worker that knows them."""

from __future__ import annotations

import time
from typing import Any

from tenure.config import QueuePolicy
from tenure.core.states import State
from tests.conformance.helpers import claim_one, enqueue_one, register


def test_claim_passing_over_tasks__takes_the_others_in_order(backend: Any, worker: str) -> None:
    first = enqueue_one(backend, "old")
    new = enqueue_one(backend, "new")
    newer = enqueue_one(backend, "newer", priority=5)
    second = enqueue_one(backend, "old")
    claimed = backend.claim(worker, ["default"], 10, skip_tasks=["new", "newer"])
    assert [j.id for j in claimed] == [first.id, second.id]
    for job in (new, newer):
        assert backend.get(job.id).state == State.QUEUED
    assert backend.claim(worker, ["default"], 10, skip_tasks=["new", "newer"]) == []


def test_a_job_passed_over__keeps_its_place_for_a_worker_that_knows_its_task(
    backend: Any, worker: str
) -> None:
    new = enqueue_one(backend, "new")
    old = [enqueue_one(backend, "old") for _ in range(3)]
    assert backend.claim(worker, ["default"], 1, skip_tasks=["new"])[0].id == old[0].id
    knows = register(backend, "worker-2")
    assert [j.id for j in backend.claim(knows, ["default"], 2)] == [new.id, old[1].id]


def test_a_job_handed_back_by_a_worker_that_does_not_know_its_task__goes_to_one_that_does(
    backend: Any, worker: str
) -> None:
    new = enqueue_one(backend, "new")
    old = enqueue_one(backend, "old")
    refused = claim_one(backend, worker)
    backend.release(refused.id, refused.fence)  # in its place, queued at once
    passing_over = backend.claim(worker, ["default"], 10, skip_tasks=["new"])
    assert [j.id for j in passing_over] == [old.id]  # the worker that refused it
    knows = register(backend, "worker-2")
    assert claim_one(backend, knows).id == new.id


def test_claim_passing_over_tasks__passes_over_due_scheduled_jobs_too(
    backend: Any, worker: str
) -> None:
    new = enqueue_one(backend, "new", delay=0.2)
    old = enqueue_one(backend, "old", delay=0.2)  # due when the other is: enqueued after
    deadline = time.monotonic() + 10
    while not (claimed := backend.claim(worker, ["default"], 10, skip_tasks=["new"])):
        assert time.monotonic() < deadline, "the scheduled jobs never came due"
        time.sleep(0.02)
    assert [j.id for j in claimed] == [old.id]
    assert [j.id for j in backend.claim(worker, ["default"], 10)] == [new.id]


def test_claim_passing_over_tasks__across_queues_and_within_max_active(backend: Any) -> None:
    backend.set_policy("limited", QueuePolicy(max_active=2))
    wid = register(backend, "w", ("limited", "plain"))
    jobs = [
        enqueue_one(backend, t, queue=q, priority=p)
        for q, t, p in (("limited", "new", 9), ("limited", "old", 1), ("plain", "new", 8),
                        ("plain", "old", 5), ("limited", "old", 0), ("limited", "old", 0))
    ]  # fmt: skip
    claimed = backend.claim(wid, ["limited", "plain"], 10, skip_tasks=["new"])
    assert [j.id for j in claimed] == [jobs[i].id for i in (3, 1, 4)]  # 2 of "limited" at most
    assert backend.claim(wid, ["limited", "plain"], 10, skip_tasks=["new"]) == []
    rest = backend.claim(wid, ["limited", "plain"], 10)
    assert [j.id for j in rest] == [jobs[2].id]  # "limited" is at max_active


def test_complete_and_claim_passing_over_tasks__completes_and_takes_the_others(
    backend: Any, worker: str
) -> None:
    enqueue_one(backend, "old")
    running = claim_one(backend, worker)
    new = enqueue_one(backend, "new")
    old = enqueue_one(backend, "old")
    items = [(running.id, running.fence, b'"ok"')]
    lost, claimed = backend.complete_and_claim(items, worker, ["default"], 10, skip_tasks=("new",))
    assert lost == set() and [j.id for j in claimed] == [old.id]
    assert backend.get(running.id).state == State.COMPLETED
    assert backend.get(new.id).state == State.QUEUED
