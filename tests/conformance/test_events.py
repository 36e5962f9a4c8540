"""Lifecycle events: every transition records one (or two, for a failed
attempt: what noticed it, then the job's fate), in the transition's own
transaction, readable in order and resumable from any id."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from tenure.core.retry import Decision
from tenure.core.states import DeadReason, Outcome, State
from tenure.errors import InvalidInput
from tests.conformance.helpers import (
    SHORT_LEASE,
    claim_one,
    enqueue_one,
    register,
    rescue_until,
    spec,
)


def events(backend: Any, queue: str | None = None, after: str | None = None) -> list[Any]:
    return list(backend.read_events(queue, after, 1000))


def kinds(backend: Any, job_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e.kind, e.data) for e in events(backend) if e.job_id == job_id]


def test_a_job_run_to_completion__records_enqueued_started_progress_completed(
    backend: Any, worker: str
) -> None:
    job = enqueue_one(backend, task="send")
    claimed = claim_one(backend, worker)
    backend.progress(job.id, claimed.fence, {"done": 3})
    backend.complete_many([(job.id, claimed.fence, b'"ok"')])
    found = events(backend)
    assert [e.kind for e in found] == ["enqueued", "started", "progress", "completed"]
    assert {(e.job_id, e.queue) for e in found} == {(job.id, "default")}
    assert found[0].data == {"task": "send", "state": "queued"}
    assert found[1].data == {"attempt": 1, "worker": worker}
    assert found[2].data == {"progress": {"done": 3}}
    assert all(isinstance(e.id, str) and e.at > 0 for e in found)
    assert len({e.id for e in found}) == 4


def test_complete__records_completed(backend: Any, worker: str) -> None:
    job = enqueue_one(backend)
    claimed = claim_one(backend, worker)
    backend.complete(job.id, claimed.fence, None)
    assert kinds(backend, job.id)[-1] == ("completed", {})


def test_a_stale_completion__records_nothing(backend: Any, worker: str) -> None:
    job = enqueue_one(backend)
    claimed = claim_one(backend, worker)
    before = events(backend)
    assert backend.complete_many([(job.id, claimed.fence + 1, b"null")]) == {
        (job.id, claimed.fence + 1)
    }
    assert events(backend) == before


def test_an_error_with_budget_left__records_retrying_with_its_delay(
    backend: Any, worker: str
) -> None:
    job = enqueue_one(backend)
    claimed = claim_one(backend, worker)
    backend.fail(job.id, claimed.fence, Outcome.ERROR, "boom", Decision(State.SCHEDULED, 2.5))
    assert kinds(backend, job.id)[-1] == ("retrying", {"delay": 2.5, "outcome": "error"})


def test_a_fatal_error__records_dead_with_its_reason(backend: Any, worker: str) -> None:
    job = enqueue_one(backend)
    claimed = claim_one(backend, worker)
    decision = Decision(State.DEAD, dead_reason=DeadReason.ERROR)
    backend.fail(job.id, claimed.fence, Outcome.ERROR, "Fail", decision)
    assert kinds(backend, job.id)[-1] == ("dead", {"dead_reason": "error", "outcome": "error"})


@pytest.mark.parametrize(
    ("outcome", "detector"),
    [(Outcome.CRASHED, "executor_died"), (Outcome.TIMEOUT, "deadline")],
)
def test_a_failure_the_supervisor_noticed__records_stalled_with_its_detector(
    backend: Any, worker: str, outcome: Outcome, detector: str
) -> None:
    """What the worker records through fail: its executor died, or the deadline hit."""
    job = enqueue_one(backend)
    claimed = claim_one(backend, worker)
    backend.fail(job.id, claimed.fence, outcome, "x", Decision(State.QUEUED, stall=True))
    assert kinds(backend, job.id)[-2:] == [
        ("stalled", {"detector": detector}),
        ("retrying", {"delay": 0.0, "outcome": outcome.value}),
    ]


def test_an_expired_lease__records_stalled_lease_expired(backend: Any) -> None:
    backend.set_policy("default", SHORT_LEASE)
    worker = register(backend, "worker-1")
    job = enqueue_one(backend)
    claim_one(backend, worker)
    rescued = rescue_until(backend, job.id)
    silent_for = round(rescued.silent_for, 3)
    assert silent_for >= SHORT_LEASE.lease_ttl - 0.001  # silent for a whole lease at least
    assert kinds(backend, job.id)[-2:] == [
        ("stalled", {"detector": "lease_expired", "worker": worker, "silent_for": silent_for}),
        ("retrying", {"delay": 0.0, "outcome": "stalled"}),
    ]


def test_a_gone_worker__records_stalled_worker_gone_then_dead(
    backend: Any, backend_url: str, open_killable: Callable[[str], Any]
) -> None:
    enqueue_one(backend, max_attempts=1)
    doomed = open_killable(backend_url)
    register(doomed, "doomed")
    job = claim_one(doomed, "doomed")
    doomed.close()  # as a kill -9 would: no deregister
    rescued = rescue_until(backend, job.id)
    silent_for = round(rescued.silent_for, 3)
    assert kinds(backend, job.id)[-2:] == [
        ("stalled", {"detector": "worker_gone", "worker": "doomed", "silent_for": silent_for}),
        ("dead", {"dead_reason": "crashed", "outcome": "crashed"}),
    ]


def test_a_large_batch__records_each_job_enqueued_in_order_with_its_task_and_state(
    backend: Any,
) -> None:
    """A batch large enough for PostgreSQL's COPY, of two queues, tasks and states."""
    specs = [spec("a" if i % 3 else "b", queue="q1" if i % 2 else "q2",
                  delay=60 if i % 5 == 0 else 0) for i in range(250)]  # fmt: skip
    jobs = backend.enqueue(specs)
    for queue in ("q1", "q2"):
        found = [(e.job_id, e.kind, e.data) for e in events(backend, queue)]
        assert found == [(j.id, "enqueued", {"task": j.task, "state": str(j.state)})
                         for j in jobs if j.queue == queue]  # fmt: skip
    # One queue's jobs of one task and state (PostgreSQL stores their data once),
    # and a queue with events off: none.
    backend.change_policy("off", {"events": False})
    alike = backend.enqueue([spec("c", queue=q) for q in ["q3"] * 150 + ["off"] * 150])
    found = [(e.job_id, e.kind, e.data) for e in events(backend, "q3")]
    assert found == [(j.id, "enqueued", {"task": "c", "state": "queued"}) for j in alike[:150]]
    assert events(backend, "off") == []


def test_release_cancel_retry_and_purge__record_their_events(backend: Any, worker: str) -> None:
    held = enqueue_one(backend)
    claimed = claim_one(backend, worker)
    backend.release(held.id, claimed.fence)
    assert kinds(backend, held.id)[-1] == ("released", {})
    waiting = enqueue_one(backend, delay=60)
    assert kinds(backend, waiting.id) == [("enqueued", {"task": "t", "state": "scheduled"})]
    backend.cancel(waiting.id)
    assert kinds(backend, waiting.id)[-1] == ("cancelled", {})
    again = claim_one(backend, worker)
    backend.fail(
        again.id,
        again.fence,
        Outcome.ERROR,
        "x",
        Decision(State.DEAD, dead_reason=DeadReason.ERROR),
    )
    assert backend.retry_dead("default") == 1
    attempts = backend.get(held.id).attempts
    assert kinds(backend, held.id)[-1] == ("retried", {"by": "python", "attempts": attempts})
    third = claim_one(backend, worker)
    backend.fail(
        third.id,
        third.fence,
        Outcome.ERROR,
        "x",
        Decision(State.DEAD, dead_reason=DeadReason.ERROR),
    )
    assert backend.purge_dead("default", [held.id]) == 1
    assert kinds(backend, held.id)[-1] == ("purged", {})


def test_events__come_in_id_order_and_resume_after_any_id_without_gaps(
    backend: Any, backend_url: str, open_backend: Callable[[str], Any]
) -> None:
    for i in range(30):
        enqueue_one(backend, queue=("a", "b", "c")[i % 3])
    every = events(backend)
    assert len(every) == 30
    reader = open_backend(backend_url)  # a reader that restarted: a new connection
    for cut in (0, 1, 13, 29):
        assert events(reader, after=every[cut].id) == every[cut + 1 :]
    only_b = events(reader, queue="b")
    assert only_b == [e for e in every if e.queue == "b"]
    assert events(reader, queue="b", after=only_b[4].id) == only_b[5:]


def test_a_reader__waits_for_the_next_event(
    backend: Any, backend_url: str, open_backend: Callable[[str], Any]
) -> None:
    enqueue_one(backend)
    [first] = events(backend)
    assert backend.read_events(None, first.id, 10, 0.05) == []
    writer = open_backend(backend_url)
    timer = threading.Timer(0.3, lambda: enqueue_one(writer))
    timer.start()
    try:
        found = backend.read_events(None, first.id, 10, 10.0)
    finally:
        timer.join()
    assert [e.kind for e in found] == ["enqueued"]


def test_a_queue_with_events_off__records_none(backend: Any, worker: str) -> None:
    backend.change_policy("default", {"events": False})
    job = enqueue_one(backend)
    claimed = claim_one(backend, worker)
    backend.complete_many([(job.id, claimed.fence, b"null")])
    enqueue_one(backend, queue="other")
    assert [e.queue for e in events(backend)] == ["other"]


def test_events_policy__must_be_a_bool(backend: Any) -> None:
    with pytest.raises(InvalidInput, match="events must be true or false"):
        backend.change_policy("default", {"events": 1})


def test_a_bad_event_id__is_invalid_input(backend: Any) -> None:
    with pytest.raises(InvalidInput):
        events(backend, after="not an id")


def test_a_batch__resumes_after_any_of_its_events_and_reads_in_pages(
    backend: Any, worker: str
) -> None:
    """A batch's events may be stored together (one row, one entry): still one
    event each, each resumable after, read a page at a time."""
    jobs = backend.enqueue([spec() for _ in range(10)])
    claimed = backend.claim(worker, ["default"], 10)
    backend.complete_many([(j.id, j.fence, b"null") for j in claimed])
    every = events(backend)
    assert [e.kind for e in every] == ["enqueued"] * 10 + ["started"] * 10 + ["completed"] * 10
    assert [e.job_id for e in every[:10]] == [j.id for j in jobs]
    assert [e.data["attempt"] for e in every[10:20]] == [1] * 10
    for cut in (3, 9, 14, 25):
        assert events(backend, after=every[cut].id) == every[cut + 1 :]
    pages, after = [], None
    while page := list(backend.read_events(None, after, 4)):
        pages.append(page)
        after = page[-1].id
    assert [len(p) for p in pages] == [4] * 7 + [2]
    assert [e for p in pages for e in p] == every


def test_a_cycle__records_its_completions_then_its_claims_each_resumable(
    backend: Any, worker: str
) -> None:
    """One complete_and_claim (a worker's cycle, one transaction): the
    completions' events, then the claims', each its own id."""
    backend.enqueue([spec() for _ in range(6)])
    first = backend.claim(worker, ["default"], 3)
    before = events(backend)
    lost, second = backend.complete_and_claim(
        [(j.id, j.fence, b"null") for j in first], worker, ["default"], 3
    )
    assert not lost
    cycle = events(backend, after=before[-1].id)
    assert [e.kind for e in cycle] == ["completed"] * 3 + ["started"] * 3
    assert {e.job_id for e in cycle[:3]} == {j.id for j in first}
    assert {e.job_id for e in cycle[3:]} == {j.id for j in second}
    assert [e.data for e in cycle] == [{}] * 3 + [{"attempt": 1, "worker": worker}] * 3
    for cut in range(len(cycle)):
        assert events(backend, after=cycle[cut].id) == cycle[cut + 1 :]


def test_a_sweep__keeps_the_newest_events_max_count_events_of_a_queue(backend: Any) -> None:
    backend.change_policy("default", {"events_max_count": 2})
    jobs = [enqueue_one(backend) for _ in range(40)]
    other = enqueue_one(backend, queue="other")
    assert backend.rescue().swept
    kept = [e.job_id for e in events(backend, "default")]
    # Redis trims whole nodes of its streams (MAXLEN ~): at least the newest two
    assert kept[-2:] == [j.id for j in jobs[-2:]]
    assert len(kept) == 2 or backend_url_is_redis(backend)
    assert [e.job_id for e in events(backend, "other")] == [other.id]


def backend_url_is_redis(backend: Any) -> bool:
    return str(backend.url).startswith("redis")
