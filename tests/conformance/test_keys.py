"""Concurrency keys (issue 39): per-key limits and fair turns enforced by the
claim, debounce and unique windows enforced by the enqueue, on every backend.

The contract, beyond what ``QueuePolicy`` and ``JobSpec`` say of their fields:

- a job's ``concurrency_key`` is stored with it and read back (``get``,
  ``claim``, ``list``);
- ``max_active_per_key`` and ``rate_limit_per_key`` hold for each key across
  every claimer, together with the queue's own limits; a job held back by its
  key never holds back another key's jobs (no head-of-line blocking); jobs
  without a key are not limited by them; an ended attempt (completed, failed,
  recovered by the sweep, cancelled) frees its key's place at once;
- ``fair``: successive claims take turns across the keys with due jobs (jobs
  without a key are one key of their own), within a claim too; within a key,
  priority then run_at order the jobs as always;
- ``debounce`` (with ``key``): while a job of the key in the queue has not
  started, an enqueue replaces its args and moves its run_at to now +
  debounce, and returns that job (same id); once it started, an enqueue makes
  a new job;
- ``unique_for`` (with ``key``): an enqueue returns the job of the key while
  it is unfinished, or finished less than ``unique_for`` seconds ago (storage's
  clock); such a finished job is not pruned before its window closes;
- ``key_counts(queue)``: the keys with queued or active jobs, most first.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tenure.config import QueuePolicy
from tenure.core.limits import KeyCount
from tenure.core.states import Outcome, State
from tenure.core.workflows import Step, chain, compile_flow
from tenure.errors import InvalidInput
from tests.conformance.helpers import (
    SHORT_LEASE,
    claim_at_once,
    claim_one,
    claimers,
    decision_for,
    register,
    rescue_until,
    spec,
    wait_for,
)


def keyed(key: str | None, n: int, **kw: Any) -> list[Any]:
    return [spec(queue="q", args={"key": key, "i": i}, concurrency_key=key, **kw) for i in range(n)]


def by_key(jobs: list[Any]) -> Counter[str | None]:
    return Counter(j.concurrency_key for j in jobs)


def active_by_key(backend: Any) -> Counter[str | None]:
    return Counter({c.key: c.active for c in backend.key_counts("q") if c.active})


# -- the key itself -----------------------------------------------------------


def test_concurrency_key__is_stored_and_read_back(backend: Any, worker: str) -> None:
    [job] = backend.enqueue([spec(queue="q", concurrency_key="customer-42")])
    [plain] = backend.enqueue([spec(queue="q", priority=-1)])
    assert job.concurrency_key == "customer-42"
    assert backend.get(job.id).concurrency_key == "customer-42"
    assert backend.get(plain.id).concurrency_key is None
    claimed = backend.claim(worker, ["q"], 2)
    assert [(j.id, j.concurrency_key) for j in claimed] == [
        (job.id, "customer-42"),
        (plain.id, None),
    ]
    listed = {j.id: j.concurrency_key for j in backend.list(queue="q").jobs}
    assert listed == {job.id: "customer-42", plain.id: None}


@pytest.mark.parametrize("bad", ["x" * 129, "a\x07b", "tab\there", "", "nul\x00", 42])
def test_bad_concurrency_key__is_refused_and_nothing_is_stored(backend: Any, bad: Any) -> None:
    good = spec(queue="q")
    with pytest.raises(InvalidInput, match="concurrency_key"):
        backend.enqueue([good, dataclasses.replace(good, id=good.id + "x", concurrency_key=bad)])
    assert sum(backend.counts("q").values()) == 0


@pytest.mark.parametrize(
    "changes",
    [{"max_active_per_key": 0}, {"max_active_per_key": 2.5}, {"rate_limit_per_key": True},
     {"rate_limit_per_key": -1}, {"rate_interval_per_key": 0}, {"fair": "yes"}],
)  # fmt: skip
def test_bad_per_key_policy__is_refused_and_stores_nothing(
    backend: Any, changes: dict[str, Any]
) -> None:
    backend.set_policy("q", QueuePolicy(max_active_per_key=3))
    with pytest.raises(InvalidInput):
        backend.change_policy("q", changes)
    assert backend.get_policy("q") == QueuePolicy(max_active_per_key=3)


# -- max_active_per_key -------------------------------------------------------


def test_max_active_per_key__concurrent_claimers_never_hold_more_of_a_key(
    backend: Any, backend_url: str, open_backend: Callable[[str], Any], portal: Any
) -> None:
    backend.set_policy("q", QueuePolicy(max_active_per_key=2))
    backend.enqueue(keyed("a", 8) + keyed("b", 8) + keyed(None, 4))
    fleet = claimers(backend_url, open_backend)
    held: list[Any] = []
    finished = 0
    while finished < 20:
        held += claim_at_once(portal, fleet, 3)
        counted = by_key(held)
        assert counted["a"] <= 2 and counted["b"] <= 2, counted
        assert active_by_key(backend) == Counter({k: n for k, n in counted.items() if n})
        job = held.pop(0)
        backend.complete(job.id, job.fence)
        finished += 1
    assert backend.counts("q")[State.COMPLETED] == 20


def test_max_active_per_key__a_held_key_does_not_block_the_keys_behind_it(
    backend: Any, worker: str
) -> None:
    backend.set_policy("q", QueuePolicy(max_active_per_key=1))
    backend.enqueue(keyed("a", 5, priority=9))
    [b] = backend.enqueue(keyed("b", 1))
    first = backend.claim(worker, ["q"], 3)
    assert by_key(first) == Counter({"a": 1, "b": 1})
    assert backend.claim(worker, ["q"], 3) == []
    [a] = [j for j in first if j.concurrency_key == "a"]
    backend.complete(a.id, a.fence)
    assert by_key(backend.claim(worker, ["q"], 3)) == Counter({"a": 1})
    assert b.id in {j.id for j in first}


def test_max_active_per_key__a_long_held_key_does_not_block_the_keys_behind_it(
    backend: Any, worker: str
) -> None:
    backend.set_policy("q", QueuePolicy(max_active_per_key=1))
    backend.enqueue(keyed("a", 60, priority=9))
    [b] = backend.enqueue(keyed("b", 1))
    [plain] = backend.enqueue(keyed(None, 1))
    assert {j.id for j in backend.claim(worker, ["q"], 3)} >= {b.id, plain.id}


def test_max_active_per_key__leaves_jobs_without_a_key_unlimited(backend: Any, worker: str) -> None:
    backend.set_policy("q", QueuePolicy(max_active_per_key=1))
    backend.enqueue(keyed(None, 5))
    assert len(backend.claim(worker, ["q"], 5)) == 5


def test_max_active_per_key__counts_jobs_claimed_before_it_was_set(
    backend: Any, worker: str
) -> None:
    backend.enqueue(keyed("a", 5))
    first = backend.claim(worker, ["q"], 2)
    backend.change_policy("q", {"max_active_per_key": 3})
    assert len(backend.claim(worker, ["q"], 5)) == 1
    assert backend.claim(worker, ["q"], 5) == []
    backend.change_policy("q", {"max_active_per_key": None})
    assert len(backend.claim(worker, ["q"], 5)) == 2
    assert len(first) == 2


def test_max_active_per_key__an_ended_attempt_frees_its_place(backend: Any, worker: str) -> None:
    backend.set_policy("q", QueuePolicy(max_active_per_key=1, backoff_base=0.0, backoff_max=0.0))
    backend.enqueue(keyed("a", 3))
    job = claim_one(backend, worker, ("q",))
    assert backend.claim(worker, ["q"], 1) == []
    backend.fail(job.id, job.fence, Outcome.ERROR, "boom", decision_for(backend, job, retry_in=0))
    job = wait_for(lambda: backend.claim(worker, ["q"], 1))[0]
    assert job.attempts == 2  # the same job, retried: its place was freed
    backend.cancel(job.id)  # active: cancel requested; its attempt then ends cancelled
    backend.fail(job.id, job.fence, Outcome.ERROR, "stopped", decision_for(backend, job))
    assert backend.get(job.id).state is State.CANCELLED
    assert len(backend.claim(worker, ["q"], 1)) == 1


def test_max_active_per_key__a_recovered_attempt_frees_its_place(backend: Any) -> None:
    backend.set_policy("q", dataclasses.replace(SHORT_LEASE, max_active_per_key=1))
    backend.enqueue(keyed("a", 2))
    lost = register(backend, "lost-worker", ("q",))
    job = claim_one(backend, lost, ("q",))
    assert backend.claim(lost, ["q"], 1) == []
    rescue_until(backend, job.id)  # its lease expired: the sweep takes it back
    assert active_by_key(backend) == Counter()
    survivor = register(backend, "survivor", ("q",))
    again = backend.claim(survivor, ["q"], 2)
    assert len(again) == 1  # still one of the key at a time
    assert active_by_key(backend) == Counter({"a": 1})


def test_per_key_and_queue_limits__hold_together(backend: Any, worker: str) -> None:
    backend.set_policy("q", QueuePolicy(max_active=3, max_active_per_key=2))
    backend.enqueue(keyed("a", 5) + keyed("b", 5))
    jobs = backend.claim(worker, ["q"], 10)
    assert len(jobs) == 3
    assert max(by_key(jobs).values()) <= 2


# -- rate_limit_per_key -------------------------------------------------------


def test_rate_limit_per_key__each_key_has_its_own_bucket(backend: Any, worker: str) -> None:
    backend.set_policy("q", QueuePolicy(rate_limit_per_key=2, rate_interval_per_key=3600.0))
    backend.enqueue(keyed("a", 5) + keyed("b", 5) + keyed(None, 3))
    jobs = backend.claim(worker, ["q"], 20)
    assert by_key(jobs) == Counter({"a": 2, "b": 2, None: 3})
    assert backend.claim(worker, ["q"], 20) == []


def test_rate_limit_per_key__the_bucket_refills_at_its_rate(backend: Any, worker: str) -> None:
    backend.set_policy("q", QueuePolicy(rate_limit_per_key=4, rate_interval_per_key=3600.0))
    backend.enqueue(keyed("a", 40))
    assert len(backend.claim(worker, ["q"], 10)) == 4
    assert backend.claim(worker, ["q"], 10) == []
    backend.change_policy("q", {"rate_interval_per_key": 0.2})  # 20 a second from now on
    began = time.monotonic()
    started = len(wait_for(lambda: backend.claim(worker, ["q"], 10)))
    while time.monotonic() - began < 0.5:
        started += len(backend.claim(worker, ["q"], 10))
    assert 1 <= started <= 4 + 20 * (time.monotonic() - began) + 1


# -- fair ---------------------------------------------------------------------


def test_fair__one_claim_takes_turns_across_keys(backend: Any, worker: str) -> None:
    backend.set_policy("q", QueuePolicy(fair=True))
    backend.enqueue(keyed("a", 20))
    backend.enqueue(keyed("b", 2) + keyed(None, 2))
    assert by_key(backend.claim(worker, ["q"], 6)) == Counter({"a": 2, "b": 2, None: 2})
    assert by_key(backend.claim(worker, ["q"], 4)) == Counter({"a": 4})


def test_fair__successive_claims_take_turns(backend: Any, worker: str) -> None:
    backend.set_policy("q", QueuePolicy(fair=True))
    for key in ("a", "b", "c"):
        backend.enqueue(keyed(key, 10))
    served = [claim_one(backend, worker, ("q",)).concurrency_key for _ in range(9)]
    assert Counter(served) == Counter({"a": 3, "b": 3, "c": 3})
    assert all(x != y for x, y in itertools.pairwise(served)), served


def test_fair__priority_still_orders_jobs_within_a_key(backend: Any, worker: str) -> None:
    backend.set_policy("q", QueuePolicy(fair=True))
    low = backend.enqueue(keyed("a", 2, priority=0))
    high = backend.enqueue(keyed("a", 2, priority=5))
    backend.enqueue(keyed("b", 4))
    taken = [j for j in backend.claim(worker, ["q"], 4) if j.concurrency_key == "a"]
    assert [j.id for j in taken] == [j.id for j in high]
    assert all(j.id not in {x.id for x in taken} for j in low)


def test_fair_off__keeps_priority_then_run_at_order(backend: Any, worker: str) -> None:
    first = backend.enqueue(keyed("a", 6))
    backend.enqueue(keyed("b", 2))
    assert [j.id for j in backend.claim(worker, ["q"], 6)] == [j.id for j in first]


def test_fair__with_max_active_per_key(backend: Any, worker: str) -> None:
    backend.set_policy("q", QueuePolicy(fair=True, max_active_per_key=1))
    backend.enqueue(keyed("a", 5) + keyed("b", 5) + keyed("c", 5))
    assert by_key(backend.claim(worker, ["q"], 10)) == Counter({"a": 1, "b": 1, "c": 1})


# -- debounce -----------------------------------------------------------------


def test_debounce__replaces_the_waiting_jobs_args_and_moves_its_start(backend: Any) -> None:
    [first] = backend.enqueue([spec(queue="q", args={"n": 1}, key="k", debounce=30.0)])
    assert first.state is State.SCHEDULED
    assert first.run_at >= first.created_at + 29.9
    [again] = backend.enqueue([spec(queue="q", args={"n": 2}, key="k", debounce=60.0)])
    assert again.id == first.id
    stored = backend.get(first.id)
    assert stored.args == {"n": 2}
    assert stored.run_at >= first.run_at + 29.0
    assert stored.state is State.SCHEDULED
    assert sum(backend.counts("q").values()) == 1


def test_debounce__within_one_batch_the_last_args_win(backend: Any) -> None:
    jobs = backend.enqueue(
        [spec(queue="q", args={"n": n}, key="k", debounce=30.0) for n in range(5)]
    )
    assert len({j.id for j in jobs}) == 1
    assert backend.get(jobs[0].id).args == {"n": 4}
    assert sum(backend.counts("q").values()) == 1


def test_debounce__once_started_a_new_enqueue_makes_a_new_job(backend: Any, worker: str) -> None:
    [first] = backend.enqueue([spec(queue="q", args={"n": 1}, key="k", debounce=0.05)])
    started = wait_for(lambda: backend.claim(worker, ["q"], 1))[0]
    assert started.id == first.id
    [second] = backend.enqueue([spec(queue="q", args={"n": 2}, key="k", debounce=30.0)])
    assert second.id != first.id
    assert second.state is State.SCHEDULED
    [third] = backend.enqueue([spec(queue="q", args={"n": 3}, key="k", debounce=30.0)])
    assert third.id == second.id
    assert backend.get(second.id).args == {"n": 3}
    assert backend.get(first.id).args == {"n": 1}


def test_debounce__runs_once_with_the_last_args(backend: Any, worker: str) -> None:
    for n in range(5):
        backend.enqueue([spec(queue="q", args={"n": n}, key="k", debounce=0.2)])
    job = wait_for(lambda: backend.claim(worker, ["q"], 5), timeout=5.0)
    assert [j.args for j in job] == [{"n": 4}]


# -- unique_for ---------------------------------------------------------------


def test_plain_key__dedupes_against_unfinished_jobs_only(backend: Any, worker: str) -> None:
    [first] = backend.enqueue([spec(queue="q", key="k")])
    job = claim_one(backend, worker, ("q",))
    backend.complete(job.id, job.fence)
    [second] = backend.enqueue([spec(queue="q", key="k")])
    assert second.id != first.id


def test_unique_for__returns_the_job_finished_within_the_window(backend: Any, worker: str) -> None:
    [first] = backend.enqueue([spec(queue="q", key="k", unique_for=3600.0)])
    [same] = backend.enqueue([spec(queue="q", key="k", unique_for=3600.0)])
    assert same.id == first.id
    job = claim_one(backend, worker, ("q",))
    backend.complete(job.id, job.fence, {"done": True})
    [after] = backend.enqueue([spec(queue="q", key="k", unique_for=3600.0)])
    assert after.id == first.id
    assert after.state is State.COMPLETED
    assert sum(backend.counts("q").values()) == 1


def test_unique_for__a_new_job_once_the_window_closed(backend: Any, worker: str) -> None:
    [first] = backend.enqueue([spec(queue="q", key="k", unique_for=0.3)])
    job = claim_one(backend, worker, ("q",))
    backend.fail(job.id, job.fence, Outcome.ERROR, "boom", decision_for(backend, job, fatal=True))
    [same] = backend.enqueue([spec(queue="q", key="k", unique_for=0.3)])
    assert same.id == first.id and same.state is State.DEAD
    fresh = wait_for(
        lambda: [j for j in backend.enqueue([spec(queue="q", key="k", unique_for=0.3)])
                 if j.id != first.id],
        timeout=5.0,
    )  # fmt: skip
    assert fresh[0].state is State.QUEUED


def test_unique_for__a_finished_job_is_kept_while_its_window_is_open(
    backend: Any, worker: str
) -> None:
    backend.set_policy("q", QueuePolicy(keep_completed=0.0))
    [first] = backend.enqueue([spec(queue="q", key="k", unique_for=3600.0)])
    job = claim_one(backend, worker, ("q",))
    backend.complete(job.id, job.fence)
    backend.prune(1000)
    assert backend.get(first.id).state is State.COMPLETED
    [again] = backend.enqueue([spec(queue="q", key="k", unique_for=3600.0)])
    assert again.id == first.id


# -- key_counts ---------------------------------------------------------------


def test_key_counts__counts_queued_and_active_jobs_per_key(backend: Any, worker: str) -> None:
    assert backend.key_counts("q") == []
    backend.enqueue(keyed("a", 3) + keyed("b", 1) + keyed(None, 2))
    backend.enqueue([spec(queue="q", concurrency_key="later", delay=3600.0)])
    backend.claim(worker, ["q"], 1)  # the first of a
    counts = backend.key_counts("q")
    assert counts[0] == KeyCount("a", 2, 1)
    assert set(counts) == {KeyCount("a", 2, 1), KeyCount(None, 2, 0), KeyCount("b", 1, 0)}
    assert backend.key_counts("q", limit=1) == [KeyCount("a", 2, 1)]


def test_key_counts__forget_a_key_once_its_jobs_finished(backend: Any, worker: str) -> None:
    backend.enqueue(keyed("a", 1))
    job = claim_one(backend, worker, ("q",))
    backend.complete(job.id, job.fence)
    assert backend.key_counts("q") == []


# -- workflows ------------------------------------------------------------------


def test_a_workflows_step__keeps_its_concurrency_key(backend: Any, worker: str) -> None:
    steps = [Step(spec(n, queue="q", concurrency_key="tenant-1")) for n in ("a", "b")]
    run = backend.enqueue_workflow(compile_flow(chain(*steps)))
    assert [j.concurrency_key for j in run.jobs] == ["tenant-1", "tenant-1"]
    assert claim_one(backend, worker, ("q",)).concurrency_key == "tenant-1"
