"""What operators do and see: cancel, get, list, counts, policies, queues, workers.

Cancelling an active job (a request to its worker) is in test_abort.py."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from typing import Any

import pytest

from tenure.backends.base import WorkerInfo
from tenure.config import QueuePolicy
from tenure.core.retry import Decision
from tenure.core.states import DeadReason, Outcome, State
from tenure.errors import InvalidInput, InvalidTransition, JobNotFound
from tests.conformance.helpers import (
    all_jobs,
    claim_one,
    enqueue_one,
    register,
    spec,
    wait_for,
)

# -- cancel ----------------------------------------------------------------------


def test_cancel_queued_job__cancels_it(backend: Any) -> None:
    job = enqueue_one(backend)
    cancelled = backend.cancel(job.id)
    assert cancelled.id == job.id
    assert cancelled.state == State.CANCELLED
    assert backend.get(job.id).state == State.CANCELLED
    assert backend.counts("default")[State.CANCELLED] == 1


def test_cancel_scheduled_job__cancels_it(backend: Any) -> None:
    job = enqueue_one(backend, delay=60)
    assert backend.cancel(job.id).state == State.CANCELLED
    assert backend.get(job.id).state == State.CANCELLED


def test_cancel_completed_job__raises_invalid_transition(backend: Any, worker: str) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    backend.complete(job.id, job.fence, None)
    with pytest.raises(InvalidTransition):
        backend.cancel(job.id)
    assert backend.get(job.id).state == State.COMPLETED


def test_cancel_dead_job__raises_invalid_transition(backend: Any, worker: str) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    dead = Decision(State.DEAD, dead_reason=DeadReason.ERROR)
    backend.fail(job.id, job.fence, Outcome.ERROR, "x", dead)
    with pytest.raises(InvalidTransition):
        backend.cancel(job.id)


def test_cancel_twice__raises_invalid_transition(backend: Any) -> None:
    job = enqueue_one(backend)
    backend.cancel(job.id)
    with pytest.raises(InvalidTransition):
        backend.cancel(job.id)


def test_invalid_transition__is_a_kind_of_invalid_input() -> None:
    assert issubclass(InvalidTransition, InvalidInput)


def test_cancel_unknown_job__raises_job_not_found(backend: Any) -> None:
    with pytest.raises(JobNotFound):
        backend.cancel(str(uuid.uuid4()))


# -- get -------------------------------------------------------------------------


def test_get_unknown_job__raises_job_not_found(backend: Any) -> None:
    with pytest.raises(JobNotFound):
        backend.get(str(uuid.uuid4()))


def test_get__returns_history_ordered_by_fence(backend: Any, worker: str) -> None:
    job = enqueue_one(backend)
    for _ in range(2):
        j = claim_one(backend, worker)
        backend.fail(j.id, j.fence, Outcome.ERROR, f"boom {j.fence}", Decision(State.QUEUED))
    last = claim_one(backend, worker)
    backend.complete(last.id, last.fence, {"ok": True})
    history = backend.get(job.id).history
    assert [a.fence for a in history] == [1, 2, 3]
    assert [a.attempt for a in history] == [1, 2, 3]
    assert [a.outcome for a in history] == [Outcome.ERROR, Outcome.ERROR, Outcome.COMPLETED]
    assert [a.worker for a in history] == [worker] * 3
    assert history[0].error is not None and "boom 1" in history[0].error
    assert all(a.ended_at is not None and a.ended_at >= a.started_at for a in history)
    starts = [a.started_at for a in history]
    assert starts == sorted(starts)


# -- match_ids -------------------------------------------------------------------


def enqueue_with_ids(backend: Any, ids: list[str]) -> None:
    backend.enqueue([dataclasses.replace(spec(), id=i) for i in ids])


def test_match_ids__are_the_ids_that_begin_with_the_prefix(backend: Any) -> None:
    ids = ["0190abcd-1111-7aaa-8aaa-000000000001", "0190abcd-1111-7aaa-8aaa-000000000002",
           "0190abcd-2222-7bbb-9bbb-000000000003", "0190abce-0000-7ccc-accc-000000000004",
           "0190abcc-ffff-7ddd-bddd-000000000005"]  # fmt: skip
    enqueue_with_ids(backend, ids)
    assert backend.match_ids("0190abcd", 10) == ids[:3]
    assert backend.match_ids("0190abcd-", 10) == ids[:3]  # punctuation last: every collation
    assert backend.match_ids("0190abcd-1111", 10) == ids[:2]
    assert backend.match_ids("0190abcd-2", 10) == [ids[2]]
    assert backend.match_ids(ids[3], 10) == [ids[3]]  # a whole id is a prefix of itself
    assert backend.match_ids("0190abcd-3", 10) == []
    assert backend.match_ids("0190abc", 10) == sorted(ids)
    assert len(set(backend.match_ids("0190abcd", 2)) & set(ids[:3])) == 2  # at most limit


def test_match_ids__take_glob_and_like_characters_as_themselves(backend: Any) -> None:
    ids = ["a%b_c*d?e[f]g\\h-1", "a%b_c*d?e[f]g\\h-2", "axbxcxdxexfxgxh-3", "a%b_c*d?e[f]g\\hé"]
    enqueue_with_ids(backend, ids)
    assert backend.match_ids("a%b_c*d?e[f]g\\h-", 10) == ids[:2]
    assert backend.match_ids("a%b_c*d?e[f]g\\hé", 10) == [ids[3]]
    assert backend.match_ids("a%", 10) == sorted([ids[0], ids[1], ids[3]])
    assert backend.match_ids("%", 10) == []  # no id tenure makes begins so


def test_match_ids_of_bad_input__raises_invalid_input(backend: Any) -> None:
    for prefix, limit in (("", 5), ("x" * 101, 5), (None, 5), ("0190abcd", 0), ("0190abcd", 101)):
        with pytest.raises(InvalidInput):
            backend.match_ids(prefix, limit)


# -- list ------------------------------------------------------------------------


def test_list__is_newest_first(backend: Any) -> None:
    jobs = [enqueue_one(backend, args={"i": i}) for i in range(5)]
    assert [j.id for j in backend.list().jobs] == [j.id for j in reversed(jobs)]


def test_list__filters_by_queue_and_state(backend: Any) -> None:
    wid = register(backend, "w", ("a", "b"))
    a1 = enqueue_one(backend, queue="a")
    a2 = enqueue_one(backend, queue="a")
    b1 = enqueue_one(backend, queue="b")
    b2 = enqueue_one(backend, queue="b", delay=60)
    claimed = claim_one(backend, wid, ("a",))
    assert claimed.id == a1.id
    assert {j.id for j in all_jobs(backend, queue="a")} == {a1.id, a2.id}
    assert {j.id for j in all_jobs(backend, state=State.QUEUED)} == {a2.id, b1.id}
    assert {j.id for j in all_jobs(backend, queue="b", state=State.SCHEDULED)} == {b2.id}
    assert {j.id for j in all_jobs(backend, queue="a", state=State.ACTIVE)} == {a1.id}
    assert all_jobs(backend, queue="b", state=State.ACTIVE) == []
    assert all_jobs(backend, queue="nowhere") == []


@pytest.mark.parametrize("limit", [1, 5, 7, 23, 50])
def test_list_pages__cover_every_job_exactly_once(backend: Any, limit: int) -> None:
    ids = {j.id for j in backend.enqueue([spec(args={"i": i}) for i in range(23)])}
    enqueue_one(backend, queue="other")
    seen: list[str] = []
    after = None
    for _ in range(100):
        page = backend.list(queue="default", limit=limit, after=after)
        assert len(page.jobs) <= limit
        seen.extend(j.id for j in page.jobs)
        if page.next_cursor is None:
            break
        after = page.next_cursor
    else:
        pytest.fail("pagination did not end")
    assert len(seen) == len(set(seen)) == 23
    assert set(seen) == ids


@pytest.mark.parametrize("limit", [1, 3, 50])
def test_list_pages_across_states__are_newest_first_and_cover_every_job_once(
    backend: Any, worker: str, limit: int
) -> None:
    """Active jobs among settled and waiting ones (PostgreSQL lists them apart)."""
    jobs = backend.enqueue([spec(args={"i": i}) for i in range(9)])
    claimed = backend.claim(worker, ["default"], 5)
    backend.complete(claimed[1].id, claimed[1].fence, None)
    backend.cancel(jobs[7].id)
    seen: list[str] = []
    after = None
    for _ in range(100):
        page = backend.list(limit=limit, after=after)
        seen.extend(j.id for j in page.jobs)
        if page.next_cursor is None:
            break
        after = page.next_cursor
    assert seen == [j.id for j in reversed(jobs)]


def test_list_pages__are_stable_while_jobs_are_added(backend: Any) -> None:
    first = {j.id for j in backend.enqueue([spec(args={"i": i}) for i in range(10)])}
    page = backend.list(limit=4)
    seen = [j.id for j in page.jobs]
    backend.enqueue([spec(args={"new": i}) for i in range(3)])
    after = page.next_cursor
    while after is not None:
        page = backend.list(limit=4, after=after)
        seen.extend(j.id for j in page.jobs)
        after = page.next_cursor
    assert len(seen) == len(set(seen))
    assert set(seen) == first


# -- counts ----------------------------------------------------------------------


def test_counts__has_every_state_as_a_key(backend: Any) -> None:
    counts = backend.counts("never-used")
    assert set(counts) == set(State)
    assert all(n == 0 for n in counts.values())


def test_counts__counts_each_state(backend: Any, worker: str) -> None:
    backend.enqueue([spec() for _ in range(3)])
    enqueue_one(backend, delay=60)
    cancelled = enqueue_one(backend)
    backend.cancel(cancelled.id)
    done = claim_one(backend, worker)
    backend.complete(done.id, done.fence, None)
    claim_one(backend, worker)
    enqueue_one(backend, queue="other")
    counts = backend.counts("default")
    assert set(counts) == set(State)
    assert counts == {
        State.WAITING: 0,
        State.SCHEDULED: 1,
        State.QUEUED: 1,
        State.ACTIVE: 1,
        State.COMPLETED: 1,
        State.DEAD: 0,
        State.CANCELLED: 1,
    }


# -- policies and queues ---------------------------------------------------------


def test_get_policy_of_unknown_queue__returns_the_defaults(backend: Any) -> None:
    assert backend.get_policy("never-seen") == QueuePolicy()


def test_set_policy__round_trips(backend: Any) -> None:
    policy = QueuePolicy(
        lease_ttl=30.0,
        heartbeat_interval=5.0,
        sweep_interval=0.5,
        max_attempts=7,
        max_stalls=2,
        delivery="at-most-once",
        timeout=12.5,
        backoff_base=0.5,
        backoff_max=60.0,
        backoff_jitter=0.0,
    )
    backend.set_policy("tuned", policy)
    assert backend.get_policy("tuned") == policy
    assert backend.get_policy("default") == QueuePolicy()


def test_set_policy__is_seen_by_another_backend(
    backend: Any, backend_url: str, open_backend: Any
) -> None:
    backend.set_policy("q", QueuePolicy(max_attempts=9))
    assert open_backend(backend_url).get_policy("q").max_attempts == 9


def test_set_policy_again__replaces_it(backend: Any) -> None:
    backend.set_policy("q", QueuePolicy(max_attempts=9))
    backend.set_policy("q", QueuePolicy(max_attempts=2))
    assert backend.get_policy("q") == QueuePolicy(max_attempts=2)


def test_change_policy__changes_only_the_fields_given(backend: Any) -> None:
    backend.set_policy("q", QueuePolicy(max_attempts=9, timeout=3.0))
    changed = backend.change_policy("q", {"lease_ttl": 20.0})
    assert changed == QueuePolicy(max_attempts=9, timeout=3.0, lease_ttl=20.0)
    assert backend.get_policy("q") == changed
    assert backend.change_policy("new", {"max_attempts": 2}) == QueuePolicy(max_attempts=2)
    assert "new" in backend.queues()


@pytest.mark.parametrize("changes", [{"lease_ttl": -1}, {"no_such_field": 1}])
def test_change_policy_to_a_bad_policy__stores_nothing(backend: Any, changes: Any) -> None:
    backend.set_policy("q", QueuePolicy(max_attempts=9))
    with pytest.raises(InvalidInput):
        backend.change_policy("q", changes)
    assert backend.get_policy("q") == QueuePolicy(max_attempts=9)
    with pytest.raises(InvalidInput):
        backend.change_policy("unseen", changes)
    assert "unseen" not in backend.queues()


def test_concurrent_changes_of_different_fields__are_all_kept(
    backend_url: str, open_backend: Any
) -> None:
    """Two backends (two processes, say) change one field each, many times,
    at once: no change is lost to the other's read-modify-write."""
    backends = [open_backend(backend_url), open_backend(backend_url)]
    rounds = 30

    def change(b: Any, field: str, values: list[Any]) -> None:
        for value in values:
            b.change_policy("q", {field: value})

    work = [("max_attempts", list(range(2, 2 + rounds))),
            ("lease_ttl", [float(v) for v in range(20, 20 + rounds)])]  # fmt: skip
    threads = [threading.Thread(target=change, args=(b, f, v))
               for b, (f, v) in zip(backends, work, strict=True)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    final = backends[0].get_policy("q")
    assert (final.max_attempts, final.lease_ttl) == (1 + rounds, 19.0 + rounds)


def test_queues__lists_queues_with_jobs_or_a_policy(backend: Any) -> None:
    assert backend.queues() == []
    enqueue_one(backend, queue="with-jobs")
    backend.set_policy("with-policy", QueuePolicy())
    backend.get_policy("only-read")
    backend.counts("only-counted")
    assert sorted(backend.queues()) == ["with-jobs", "with-policy"]


# -- workers ---------------------------------------------------------------------


def test_workers__lists_registered_workers(backend: Any) -> None:
    backend.register_worker(WorkerInfo(id="w1", hostname="h1", pid=101, queues=("a",)))
    backend.register_worker(WorkerInfo(id="w2", hostname="h2", pid=102, queues=("a", "b")))
    by_id = {w.id: w for w in backend.workers()}
    assert set(by_id) == {"w1", "w2"}
    assert (by_id["w1"].hostname, by_id["w1"].pid, tuple(by_id["w1"].queues)) == ("h1", 101, ("a",))
    assert tuple(by_id["w2"].queues) == ("a", "b")
    assert by_id["w1"].started_at > 0


def test_workers__are_seen_by_another_backend(
    backend: Any, backend_url: str, open_backend: Any
) -> None:
    register(backend, "w1")
    assert [w.id for w in open_backend(backend_url).workers()] == ["w1"]


def test_workers__say_which_are_alive_as_the_sweeper_judges_it(
    backend: Any, backend_url: str, open_killable: Any
) -> None:
    register(backend, "w-here")
    victim = open_killable(backend_url)
    register(victim, "w-killed")
    assert {w.id: w.alive for w in backend.workers()} == {"w-here": True, "w-killed": True}
    victim.close()  # without deregistering: to storage, a kill -9
    # PostgreSQL ends the session (and drops its lock) a moment after the close.
    wait_for(lambda: not {w.id: w.alive for w in backend.workers()}["w-killed"])
    assert {w.id: w.alive for w in backend.workers()} == {"w-here": True, "w-killed": False}
    assert backend.rescue().dead_workers == ("w-killed",)  # the sweeper agrees
    assert [w.id for w in backend.workers()] == ["w-here"]


def test_deregister_worker__removes_it(backend: Any) -> None:
    register(backend, "w1")
    register(backend, "w2")
    backend.deregister_worker("w1")
    assert [w.id for w in backend.workers()] == ["w2"]


def test_registered_worker__is_not_rescued_while_its_backend_is_open(
    backend: Any, backend_url: str, open_backend: Any
) -> None:
    other = open_backend(backend_url)
    register(other, "w-other")
    assert backend.rescue().dead_workers == ()
    assert [w.id for w in backend.workers()] == ["w-other"]
