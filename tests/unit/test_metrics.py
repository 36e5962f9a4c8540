"""The worker's own counters: what each attempt's end counts, and histograms'
buckets as Prometheus reads them (``le``: a value on a bound is in its bucket)."""

from __future__ import annotations

import asyncio
import os

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tenure.backends.sqlite import SQLiteBackend
from tenure.errors import StorageLost
from tenure.job import Job, JobSpec, in_flow
from tenure.metrics import CountedBackend, Histogram, WorkerMetrics
from tenure.worker.executors.base import Crashed, Raise, Raised, Returned, Stopped, TimedOut


def test_a_value_on_a_bound__is_counted_in_that_bucket_and_above_all_in_inf() -> None:
    h = Histogram((1.0, 2.0))
    for v in (0.5, 1.0, 1.5, 3.0):
        h.observe("q", v)
    family = h.family("x_seconds", "x", "queue")
    buckets = {s.labels["le"]: s.value for s in family.samples if s.name == "x_seconds_bucket"}
    assert buckets == {"1.0": 2, "2.0": 3, "+Inf": 4}
    assert [s.value for s in family.samples if s.name == "x_seconds_sum"] == [6.0]


@pytest.mark.parametrize(
    ("result", "lost", "outcome", "stall"),
    [
        (Returned(None), False, "completed", None),
        (Raised(Raise.ERROR, "tb"), False, "error", None),
        (TimedOut(1.0), False, "timeout", "deadline"),
        (Crashed("gone"), False, "crashed", "executor_died"),
        (Stopped(), True, "stopped", None),
        (Returned(None), True, "lost", None),
    ],
)
def test_an_attempt_s_end__counts_its_outcome_and_the_supervisor_s_stall(
    result: object, lost: bool, outcome: str, stall: str | None
) -> None:
    m = WorkerMetrics()
    m.ended("q", result, 0.25, lost=lost)  # type: ignore[arg-type]
    assert m.attempts == {("q", outcome): 1}
    assert m.stalls == ({} if stall is None else {("q", stall): 1})
    assert m.run.counts["q"][m.run.bounds.index(0.5)] == 1


def test_a_recovered_job_s_start__observes_its_recovery_latency() -> None:
    m = WorkerMetrics(clock=lambda: 1000.0)
    job = JobSpec.create("t", {}).stored("active", 0.0, 0.0)
    m.started(job)
    assert m.recovery.counts == {}
    m.started(job.__class__(**{**job.__dict__, "recovered_from": 998.5}))
    assert m.claimed == {"default": 2}
    assert m.recovery.sums == {"default": 1.5}
    registry = CollectorRegistry()
    registry.register(m)
    text = generate_latest(registry).decode()
    assert 'tenure_recovery_seconds_count{queue="default"} 1.0' in text
    assert 'tenure_claimed_jobs_total{queue="default"} 2.0' in text


def test_a_step_s_first_start__observes_its_wait_since_its_release() -> None:
    m = WorkerMetrics(clock=lambda: 1000.0)
    first = dict(JobSpec.create("t", {}).stored("active", 999.75, 0.0).__dict__, attempts=1)
    m.started(Job(**first))  # no upstream: not a fan-in
    m.started(in_flow(Job(**first), "wf-1", ()))  # a source step: nothing to wait for
    m.started(in_flow(Job(**{**first, "attempts": 2}), "wf-1", ("a",)))  # a retry
    assert m.fan_in.counts == {}
    m.started(in_flow(Job(**first), "wf-1", ("a", "b")))
    assert m.fan_in.sums == {"default": 0.25}
    registry = CollectorRegistry()
    registry.register(m)
    assert 'tenure_fan_in_seconds_count{queue="default"} 1.0' in generate_latest(registry).decode()


def test_a_counted_backend__counts_each_verb_and_its_storage_errors(tmp_path: object) -> None:
    m = WorkerMetrics()
    backend = CountedBackend(SQLiteBackend(f"{tmp_path}/m.db"), m)

    async def scenario() -> None:
        await backend.open()
        await backend.counts("q")
        os.remove(f"{tmp_path}/m.db")
        with pytest.raises(StorageLost):
            await backend.rescue()
        await backend.close()

    asyncio.run(scenario())
    assert m.calls == {"open": 1, "counts": 1, "rescue": 1, "close": 1}
    assert m.errors == {"rescue": 1}
    assert backend.max_payload > 0  # the rest is the backend's own
