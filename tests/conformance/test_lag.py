"""lag: how long a queue's oldest due job has been due, by the storage's clock
(the queue lag a metric shows). Due jobs are queued ones, and scheduled ones
whose time came that nobody promoted yet; a running or finished job is not due."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tenure.errors import InvalidInput
from tests.conformance.helpers import claim_one, enqueue_one, wait_for


def test_a_queue_without_a_due_job__has_no_lag(backend: Any, worker: str) -> None:
    assert backend.lag("default") == 0.0
    enqueue_one(backend, delay=60)  # not due yet
    assert backend.lag("default") == 0.0


def test_lag__is_the_age_of_the_oldest_due_job_of_any_priority(backend: Any) -> None:
    now = time.time()
    enqueue_one(backend, run_at=now - 100, priority=-5)  # oldest, but last in line
    enqueue_one(backend, run_at=now - 10, priority=5)
    enqueue_one(backend, run_at=now - 50)
    enqueue_one(backend, run_at=now - 500, queue="other")
    assert backend.lag("default") == pytest.approx(time.time() - (now - 100), abs=1.0)
    assert backend.lag("other") == pytest.approx(500, abs=1.0)


def test_a_claimed_job__is_no_longer_due(backend: Any, worker: str) -> None:
    enqueue_one(backend, run_at=time.time() - 100)
    enqueue_one(backend, run_at=time.time() - 10)
    claim_one(backend, worker)
    assert backend.lag("default") == pytest.approx(10, abs=1.0)
    claim_one(backend, worker)
    assert backend.lag("default") == 0.0


def test_a_scheduled_job_whose_time_came__counts_before_any_promotion(backend: Any) -> None:
    job = enqueue_one(backend, delay=0.05)
    lag = wait_for(lambda: backend.lag("default"), timeout=2)
    assert 0 < lag <= time.time() - job.run_at + 1.0
    assert backend.get(job.id).state == "scheduled"  # nobody swept or claimed


def test_lag_of_a_bad_queue_name__is_invalid_input(backend: Any) -> None:
    with pytest.raises(InvalidInput):
        backend.lag("a b")
