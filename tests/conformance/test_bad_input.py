"""Bad input at every door of storage: each is refused with InvalidInput, on
every backend alike, and nothing stored changes.

Values JSON cannot carry, times too far away, integers too large for one of
the stores, policies that would stall or freeze a fleet, and ids, keys and
cursors that are not what they claim to be.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from typing import Any

import pytest

from tenure.config import QueuePolicy
from tenure.errors import InvalidInput
from tenure.job import JobSpec
from tests.conformance.helpers import all_jobs, claim_one, enqueue_one, spec

NAN, INF = float("nan"), float("inf")


@dataclasses.dataclass
class Point:
    x: int


NOT_JSON: dict[str, Any] = {
    "nan": {"x": NAN},
    "infinity in a list": {"x": [1.0, INF]},
    "-infinity deep down": {"x": {"y": [{"z": -INF}]}},
    "a datetime": {"at": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)},
    "a date": {"on": datetime.date(2026, 1, 1)},
    "a dataclass": {"p": Point(1)},
}


@pytest.mark.parametrize("args", list(NOT_JSON.values()), ids=list(NOT_JSON))
def test_arguments_json_cannot_carry__are_refused_at_enqueue(backend: Any, args: Any) -> None:
    with pytest.raises(InvalidInput, match="job arguments must be JSON"):
        backend.enqueue([spec(args=args)])
    assert all_jobs(backend) == []


def test_arguments_with_nulls__are_stored_as_given(backend: Any) -> None:
    """null is JSON: only NaN and the infinities, which orjson writes as null, are refused."""
    args = {"a": None, "b": [None, 1.5, {"c": None}], "d": "null", "e": (1, None)}
    job = enqueue_one(backend, args=args)
    assert backend.get(job.id).args == {**args, "e": [1, None]}


@pytest.mark.parametrize("value", list(NOT_JSON.values()), ids=list(NOT_JSON))
def test_a_result_or_progress_json_cannot_carry__is_refused_and_the_attempt_holds(
    backend: Any, worker: str, value: Any
) -> None:
    enqueue_one(backend)
    job = claim_one(backend, worker)
    with pytest.raises(InvalidInput, match="progress must be JSON"):
        backend.progress(job.id, job.fence, value)
    with pytest.raises(InvalidInput, match="job result must be JSON"):
        backend.complete(job.id, job.fence, value)
    assert backend.complete_many([]) == set()
    stored = backend.get(job.id)
    assert (stored.state, stored.progress, stored.result) == ("active", None, None)
    backend.complete(job.id, job.fence, {"ok": None})
    assert backend.get(job.id).result == {"ok": None}


TEN_YEARS = 10 * 365.25 * 86_400

# Options a spec may not carry, whoever built it: each backend checks every spec.
BAD_OPTIONS: dict[str, dict[str, Any]] = {
    "delay of 1e12 s": {"delay": 1e12},
    "delay just over ten years": {"delay": TEN_YEARS + 1},
    "infinite delay": {"delay": INF},
    "run_at of 1e13": {"run_at": 1e13},
    "run_at before 1970": {"run_at": -1.0},
    "infinite run_at": {"run_at": INF},
    "nan run_at": {"run_at": NAN},
    "bool delay": {"delay": True},
    "max_attempts 2**31": {"max_attempts": 2**31},
    "max_attempts 2**63": {"max_attempts": 2**63},
    "max_attempts 2**100": {"max_attempts": 2**100},
    "bool max_attempts": {"max_attempts": True},
    "priority 2**63": {"priority": 2**63},
    "timeout 1e308": {"timeout": 1e308},
    "infinite timeout": {"timeout": INF},
    "key with a lone surrogate": {"key": "k\udcff"},
    "delay and run_at both": {"delay": 5.0, "run_at": 2e9},
    "queue '.'": {"queue": "."},
    "queue '..'": {"queue": ".."},
}


@pytest.mark.parametrize("bad", list(BAD_OPTIONS.values()), ids=list(BAD_OPTIONS))
def test_a_spec_with_an_option_out_of_bounds__is_refused_and_nothing_is_stored(
    backend: Any, bad: dict[str, Any]
) -> None:
    with pytest.raises(InvalidInput):
        JobSpec.create("t", {}, **bad)
    specs = [spec(), dataclasses.replace(spec(), **bad)]  # built around create's checks
    with pytest.raises(InvalidInput):
        backend.enqueue(specs)
    assert all_jobs(backend) == []


@pytest.mark.parametrize("job_id", [5, None, "", "01a2\udcff", "01a2\x00", "x" * 101])
def test_a_spec_with_a_malformed_id__is_refused_and_nothing_is_stored(
    backend: Any, job_id: Any
) -> None:
    specs = [spec(), dataclasses.replace(spec(), id=job_id)]
    with pytest.raises(InvalidInput, match="invalid job id"):
        backend.enqueue(specs)
    assert all_jobs(backend) == []


def test_times_up_to_ten_years_away__are_accepted(backend: Any) -> None:
    far = enqueue_one(backend, delay=TEN_YEARS - 60)
    assert backend.get(far.id).run_at > far.created_at + TEN_YEARS - 120


BAD_POLICIES: dict[str, dict[str, Any]] = {
    "lease of 1e-9 s": {"lease_ttl": 1e-9, "heartbeat_interval": 1e-10},
    "lease of 1e308 s": {"lease_ttl": 1e308},
    "lease of two hours": {"lease_ttl": 7200.0},
    "infinite lease": {"lease_ttl": INF},
    "bool lease": {"lease_ttl": True},
    "heartbeat of 1e-9 s": {"lease_ttl": 0.1, "heartbeat_interval": 1e-9},
    "sweep of 1e9 s": {"sweep_interval": 1e9},
    "sweep of 0 s": {"sweep_interval": 0},
    "jitter True": {"backoff_jitter": True},
    "jitter 1.5": {"backoff_jitter": 1.5},
    "max_attempts 2**31": {"max_attempts": 2**31},
    "max_attempts 2**64": {"max_attempts": 2**64},
    "max_stalls 2**100": {"max_stalls": 2**100},
    "max_stalls True": {"max_stalls": True},
    "backoff_max 1e308": {"backoff_max": 1e308},
    "infinite backoff_base": {"backoff_base": INF},
    "timeout 1e12": {"timeout": 1e12},
    "nan timeout": {"timeout": NAN},
    "delivery a list": {"delivery": ["at-most-once"]},
    "keep_completed -1": {"keep_completed": -1},
    "keep_completed a day": {"keep_completed": "1d"},
    "nan keep_completed": {"keep_completed": NAN},
    "keep_dead 1e12": {"keep_dead": 1e12},
    "keep_dead True": {"keep_dead": True},
}


@pytest.mark.parametrize("changes", list(BAD_POLICIES.values()), ids=list(BAD_POLICIES))
def test_a_policy_out_of_bounds__is_refused_and_the_stored_one_kept(
    backend: Any, changes: dict[str, Any]
) -> None:
    backend.set_policy("q", QueuePolicy(max_attempts=9))
    with pytest.raises(InvalidInput):
        backend.change_policy("q", changes)
    with pytest.raises(InvalidInput):
        QueuePolicy(**changes)
    assert backend.get_policy("q") == QueuePolicy(max_attempts=9)


def test_a_policy_at_its_bounds__is_stored(backend: Any) -> None:
    edges = QueuePolicy(lease_ttl=3600, heartbeat_interval=1800, sweep_interval=60,
                        max_attempts=1_000_000, max_stalls=1, backoff_jitter=1,
                        timeout=TEN_YEARS, backoff_max=TEN_YEARS, keep_completed=0,
                        keep_dead=TEN_YEARS)  # fmt: skip
    backend.set_policy("q", edges)
    assert backend.get_policy("q") == edges
    short = {"lease_ttl": 0.05, "heartbeat_interval": 0.01, "sweep_interval": 0.01,
             "keep_completed": None, "keep_dead": None}  # fmt: skip
    assert backend.change_policy("q", short) == dataclasses.replace(edges, **short)


BAD_IDS: dict[str, Any] = {
    "an int": 5,
    "None": None,
    "bytes": b"01a2",
    "empty": "",
    "a lone surrogate": "01a2\udcff",
    "a NUL": "01a2\x00",
    "101 characters": "x" * 101,
}


@pytest.mark.parametrize("job_id", list(BAD_IDS.values()), ids=list(BAD_IDS))
def test_a_malformed_job_id__is_invalid_input_for_every_verb(backend: Any, job_id: Any) -> None:
    job = enqueue_one(backend)
    for verb in (backend.get, backend.cancel):
        with pytest.raises(InvalidInput, match="invalid job id"):
            verb(job_id)
    for bulk in (backend.retry_dead, backend.purge_dead):
        with pytest.raises(InvalidInput, match="invalid job id"):
            bulk("default", [job_id])
    assert all_jobs(backend) == [backend.get(job.id)]


def test_job_ids_given_as_one_string_or_a_mapping__are_refused_not_taken_for_parts(
    backend: Any,
) -> None:
    for bulk in (backend.retry_dead, backend.purge_dead):
        for ids in ("abc", {"abc": 1}):
            with pytest.raises(InvalidInput, match="a list of ids"):
                bulk("default", ids)


DOTS = re.escape("other than '.' and '..'")


@pytest.mark.parametrize("name", [".", ".."])
def test_dot_names__are_refused_for_queues_and_tasks(backend: Any, name: str) -> None:
    """A page of a queue named '.' or '..' could never be reached: no such name is stored."""
    for made in ({"task": name}, {"queue": name}):
        with pytest.raises(InvalidInput, match=DOTS):
            backend.enqueue([dataclasses.replace(spec(), **made)])
    with pytest.raises(InvalidInput, match=DOTS):
        backend.change_policy(name, {"max_attempts": 5})
    assert all_jobs(backend) == [] and name not in backend.queues()


BAD_CURSORS: dict[str, Any] = {
    "an int": 5,
    "5,000 digits": "9" * 5000,
    "30 digits": "9" * 30,
    "2**63": str(2**63),
    "a superscript digit": "²",
    "Arabic-Indic digits": "١٢",
    "a lone surrogate": "1\udcff",
    "negative": "-1",
    "a queue of spaces": "12:bad name",
}


@pytest.mark.parametrize("after", list(BAD_CURSORS.values()), ids=list(BAD_CURSORS))
def test_a_malformed_cursor__is_invalid_input(backend: Any, after: Any) -> None:
    enqueue_one(backend)
    with pytest.raises(InvalidInput, match="bad cursor"):
        backend.list(after=after)


@pytest.mark.parametrize("limit", [True, 0, 10_001, 2**64, 1.5, "5"])
def test_a_listing_limit_out_of_bounds__is_invalid_input(backend: Any, limit: Any) -> None:
    with pytest.raises(InvalidInput, match="limit"):
        backend.list(limit=limit)


def test_the_largest_cursor__is_a_valid_one(backend: Any) -> None:
    """Its insertion number is the largest a 64-bit store holds: every job is after it."""
    first, second = enqueue_one(backend), enqueue_one(backend)
    cursor = backend.list(limit=1).next_cursor
    assert cursor is not None
    largest = re.sub(r"^[0-9]+", str(2**63 - 1), cursor)
    assert {j.id for j in backend.list(after=largest).jobs} == {first.id, second.id}
