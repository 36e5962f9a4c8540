"""enqueue: storing new jobs, in order, idempotently by key, and refusing bad input."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenure.core.states import Outcome, State
from tenure.errors import InvalidInput
from tenure.job import JobSpec
from tests.conformance.helpers import (
    all_jobs,
    claim_one,
    decision_for,
    enqueue_one,
    spec,
    wait_for,
)


def test_enqueue_one__returns_a_queued_job_with_its_fields(backend: Any) -> None:
    s = JobSpec.create("send", {"to": "a@example.com", "n": [1, 2]}, queue="mail", priority=5)
    [job] = backend.enqueue([s])
    assert job.id == s.id
    assert job.task == "send"
    assert job.queue == "mail"
    assert job.args == {"to": "a@example.com", "n": [1, 2]}
    assert job.state == State.QUEUED
    assert job.priority == 5
    assert job.attempts == 0
    assert job.stalls == 0
    assert job.fence == 0
    assert job.worker is None
    assert job.dead_reason is None
    assert backend.get(job.id) == job


def test_enqueue_many__returns_jobs_in_order(backend: Any) -> None:
    specs = [spec(args={"i": i}) for i in range(20)]
    jobs = backend.enqueue(specs)
    assert [j.id for j in jobs] == [s.id for s in specs]
    assert [j.args["i"] for j in jobs] == list(range(20))
    assert all(j.state == State.QUEUED for j in jobs)
    assert [backend.get(j.id) for j in jobs] == jobs
    assert backend.counts("default")[State.QUEUED] == 20


# Any JSON, with the characters that storage formats escape (quotes,
# backslashes, tabs, newlines, NUL, "\\N"), and numbers that JSON parsers
# like to rewrite (1e16, -0.0, subnormals).
TEXT = st.text(max_size=8) | st.sampled_from(
    ["\\", "\\N", "\t", "\n", "\r", '"', "\x00", "\\u0000", "é€😀", "a\\\tb"]
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | TEXT
    | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([1e16, -0.0, 5e-324]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)  # fmt: skip


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(args_list=st.lists(st.dictionaries(TEXT, JSON, max_size=4), min_size=1, max_size=4))
def test_enqueue_many__stores_any_json_arguments_as_given(
    backend: Any, args_list: list[dict[str, Any]]
) -> None:
    jobs = backend.enqueue([spec(args=a) for a in args_list])
    assert [orjson.dumps(j.args) for j in jobs] == [orjson.dumps(a) for a in args_list]
    assert [orjson.dumps(backend.get(j.id).args) for j in jobs] == [
        orjson.dumps(a) for a in args_list
    ]
    assert [backend.get(j.id) for j in jobs] == jobs


def test_enqueue_many_with_mixed_options__returns_what_storage_reads_back(backend: Any) -> None:
    now = time.time()
    specs = [
        spec(queue="a"),
        spec(queue="b", priority=-7, max_attempts=2, timeout=1.5),
        spec(queue="a", delay=30.25),
        spec(queue="b", run_at=now - 100.125, timeout=7),
        spec(queue="a", run_at=now + 3600.5, priority=1_000_000),
        dataclasses.replace(spec(), args=b'{\n\t"a": [1,\r\n 2], "b": "\\\\t"}'),
    ]
    jobs = backend.enqueue(specs)
    assert [j.state for j in jobs] == [State.QUEUED, State.QUEUED, State.SCHEDULED,
                                       State.QUEUED, State.SCHEDULED, State.QUEUED]  # fmt: skip
    assert jobs[5].args == {"a": [1, 2], "b": "\\t"}
    assert jobs[3].run_at == now - 100.125
    assert jobs[2].run_at == jobs[2].created_at + 30.25
    assert (jobs[1].max_attempts, jobs[1].timeout, jobs[3].timeout) == (2, 1.5, 7.0)
    assert [backend.get(j.id) for j in jobs] == jobs
    assert sorted(backend.queues()) == ["a", "b", "default"]


def test_enqueue_of_a_spec_stored_already__returns_the_stored_job(
    backend: Any, worker: str
) -> None:
    """A retried call (the first reply was lost) stores nothing twice, with or
    without a key, in a batch of its own or with new specs."""
    plain, keyed = spec(args={"n": 1}), spec(args={"n": 2}, key="k")
    first = backend.enqueue([plain, keyed])
    claimed = claim_one(backend, worker)
    assert claimed.id == plain.id
    new = spec(args={"n": 3})
    again = backend.enqueue([plain, new, keyed, plain])
    stored = {j.id: dataclasses.replace(backend.get(j.id), history=()) for j in first}
    assert again[0] == again[3] == stored[plain.id]
    assert again[0].state == State.ACTIVE
    assert again[2] == stored[keyed.id] == first[1]
    assert again[1].id == new.id and again[1].state == State.QUEUED
    assert backend.enqueue([plain]) == [stored[plain.id]]
    assert len(all_jobs(backend)) == 3


def test_enqueue_of_a_new_spec_twice_in_one_call__stores_it_once(backend: Any, worker: str) -> None:
    new, other = spec(args={"n": 1}), spec(args={"n": 2})
    jobs = backend.enqueue([new, other, new])
    assert jobs[0] == jobs[2] and jobs[0].id == new.id and jobs[1].id == other.id
    assert jobs[0].state == State.QUEUED
    assert sorted(j.id for j in all_jobs(backend)) == sorted([new.id, other.id])
    claimed = backend.claim(worker, ["default"], 10)
    assert sorted(j.id for j in claimed) == sorted([new.id, other.id])  # each once


def test_enqueue_empty_batch__returns_nothing(backend: Any) -> None:
    assert backend.enqueue([]) == []
    assert sum(backend.counts("default").values()) == 0


def test_enqueue_with_delay__is_scheduled_in_the_future(backend: Any) -> None:
    before = time.time()
    job = enqueue_one(backend, delay=60)
    assert job.state == State.SCHEDULED
    assert job.run_at >= before + 59
    assert backend.get(job.id).state == State.SCHEDULED


def test_enqueue_with_future_run_at__is_scheduled(backend: Any) -> None:
    run_at = time.time() + 60
    job = enqueue_one(backend, run_at=run_at)
    assert job.state == State.SCHEDULED
    assert job.run_at == pytest.approx(run_at, abs=1e-3)


def test_enqueue_with_past_run_at__is_queued(backend: Any) -> None:
    job = enqueue_one(backend, run_at=time.time() - 60)
    assert job.state == State.QUEUED


def test_delayed_job__is_not_claimable_until_due_then_is(backend: Any, worker: str) -> None:
    job = enqueue_one(backend, delay=0.3)
    assert backend.claim(worker, ["default"], 10) == []
    claimed = wait_for(lambda: backend.claim(worker, ["default"], 10), timeout=3)
    assert [j.id for j in claimed] == [job.id]
    assert claimed[0].state == State.ACTIVE
    assert time.time() >= job.run_at


def test_claim__takes_higher_priority_first_then_older(backend: Any, worker: str) -> None:
    low = enqueue_one(backend, args={"n": "low"}, priority=-5)
    high_old = enqueue_one(backend, args={"n": "high_old"}, priority=10)
    mid = enqueue_one(backend, args={"n": "mid"})
    high_new = enqueue_one(backend, args={"n": "high_new"}, priority=10)
    mid_new = enqueue_one(backend, args={"n": "mid_new"})
    order = [claim_one(backend, worker).id for _ in range(5)]
    assert order == [high_old.id, high_new.id, mid.id, mid_new.id, low.id]


def test_claim_of_a_batch__follows_priority_order(backend: Any, worker: str) -> None:
    jobs = [enqueue_one(backend, args={"i": i}, priority=p) for i, p in enumerate([1, 3, 2])]
    claimed = backend.claim(worker, ["default"], 2)
    assert {j.id for j in claimed} == {jobs[1].id, jobs[2].id}


# -- key= idempotency ------------------------------------------------------------


def test_enqueue_same_key_while_queued__returns_the_first_job(backend: Any) -> None:
    first = enqueue_one(backend, args={"v": 1}, key="k1")
    second = enqueue_one(backend, args={"v": 2}, key="k1")
    assert second.id == first.id
    assert second.args == {"v": 1}
    assert backend.counts("default")[State.QUEUED] == 1


def test_enqueue_same_key_while_scheduled__returns_the_first_job(backend: Any) -> None:
    first = enqueue_one(backend, key="k1", delay=60)
    second = enqueue_one(backend, key="k1")
    assert second.id == first.id
    assert second.state == State.SCHEDULED
    assert nonzero_total(backend) == 1


def test_enqueue_same_key_while_active__returns_the_first_job(backend: Any, worker: str) -> None:
    first = enqueue_one(backend, key="k1")
    claim_one(backend, worker)
    second = enqueue_one(backend, key="k1")
    assert second.id == first.id
    assert second.state == State.ACTIVE
    assert nonzero_total(backend) == 1


def test_enqueue_same_key_twice_in_one_batch__returns_one_job_twice(backend: Any) -> None:
    a, other, b = backend.enqueue([spec(key="k"), spec(key="other"), spec(key="k")])
    assert a.id == b.id
    assert other.id != a.id
    assert backend.counts("default")[State.QUEUED] == 2


def test_enqueue_same_key_after_first_completed__makes_a_new_job(backend: Any, worker: str) -> None:
    first = enqueue_one(backend, key="k1")
    claimed = claim_one(backend, worker)
    backend.complete(claimed.id, claimed.fence, None)
    second = enqueue_one(backend, key="k1")
    assert second.id != first.id
    assert second.state == State.QUEUED
    assert backend.get(first.id).state == State.COMPLETED


def test_enqueue_same_key_after_first_dead__makes_a_new_job(backend: Any, worker: str) -> None:
    first = enqueue_one(backend, key="k1")
    claimed = claim_one(backend, worker)
    decision = decision_for(backend, claimed, fatal=True)
    backend.fail(claimed.id, claimed.fence, Outcome.ERROR, "boom", decision)
    second = enqueue_one(backend, key="k1")
    assert second.id != first.id


def test_enqueue_same_key_after_first_cancelled__makes_a_new_job(backend: Any) -> None:
    first = enqueue_one(backend, key="k1")
    backend.cancel(first.id)
    second = enqueue_one(backend, key="k1")
    assert second.id != first.id
    assert second.state == State.QUEUED


def test_enqueue_same_key_in_different_queues__does_not_collide(backend: Any) -> None:
    a = enqueue_one(backend, key="k1", queue="a")
    b = enqueue_one(backend, key="k1", queue="b")
    assert a.id != b.id
    assert backend.counts("a")[State.QUEUED] == 1
    assert backend.counts("b")[State.QUEUED] == 1


# -- bad input -------------------------------------------------------------------


class Opaque:
    pass


BAD_INPUTS: dict[str, dict[str, Any]] = {
    "queue with a space": {"queue": "bad name!"},
    "empty queue": {"queue": ""},
    "queue of 101 chars": {"queue": "q" * 101},
    "task with a space": {"task": "bad name!"},
    "empty task": {"task": ""},
    "task of 101 chars": {"task": "t" * 101},
    "args with a set": {"args": {"s": {1, 2}}},
    "args with an object": {"args": {"o": Opaque()}},
    "args a list": {"args": [1, 2]},
    "args a string": {"args": "a=1"},
    "args with int keys": {"args": {1: "x"}},
    "payload over 1 MiB": {"args": {"blob": "x" * (1024 * 1024)}},
    "negative delay": {"delay": -1},
    "nan delay": {"delay": float("nan")},
    "float priority": {"priority": 1.5},
    "string priority": {"priority": "1"},
    "bool priority": {"priority": True},
    "empty key": {"key": ""},
    "key with a NUL": {"key": "a\x00b"},
}


@pytest.mark.parametrize("bad", list(BAD_INPUTS.values()), ids=list(BAD_INPUTS))
def test_enqueue_bad_input__raises_invalid_input_and_stores_nothing(
    backend: Any, bad: dict[str, Any]
) -> None:
    enqueue_one(backend, args={"pre": True})
    before = (backend.counts("default"), backend.queues(), len(all_jobs(backend)))
    kw = dict(bad)
    task = kw.pop("task", "t")
    args = kw.pop("args", {"a": 1})
    with pytest.raises(InvalidInput):
        backend.enqueue([spec(args={"good": 1}), JobSpec.create(task, args, **kw)])
    after = (backend.counts("default"), backend.queues(), len(all_jobs(backend)))
    assert after == before


def test_enqueue_batch_with_a_malformed_spec__stores_none_of_the_batch(backend: Any) -> None:
    """A spec built around JobSpec.create's checks is refused by storage too,
    and the whole batch with it (one transaction)."""
    good = spec(args={"good": 1})
    malformed = dataclasses.replace(spec(args={"bad": 1}), queue="bad name!")
    with pytest.raises(InvalidInput):
        backend.enqueue([good, malformed])
    assert all_jobs(backend) == []
    assert backend.queues() == []


def nonzero_total(backend: Any, queue: str = "default") -> int:
    return sum(backend.counts(queue).values())
