"""Periodic jobs' storage verb: a tick's job is stored only by moving its
schedule's last tick forward, atomically, so that one job is made per tick
however many workers tick, and whatever became of earlier ticks' jobs."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tenure.backends.base import Tick
from tenure.core.states import State
from tenure.errors import InvalidInput, JobNotFound
from tenure.portal import Portal
from tests.conformance.helpers import all_jobs, claim_one, spec

T0 = 1_700_000_000.0  # a tick in the past, seconds since the epoch


def tick_spec(tick: float, name: str = "nightly", **kw: Any) -> Any:
    return spec("report", {"kind": "daily"}, key=f"{name}@{tick}", run_at=tick, **kw)


def test_enqueue_tick__stores_the_job_and_moves_the_last_tick(backend: Any) -> None:
    s = tick_spec(T0)
    job = backend.enqueue_tick("nightly", T0, s)
    assert job is not None
    assert (job.id, job.state, job.key, job.run_at) == (s.id, State.QUEUED, s.key, T0)
    assert backend.get(job.id).args == {"kind": "daily"}
    found = backend.last_ticks([("default", "nightly")])
    assert found == {("default", "nightly"): Tick(T0, job.id)}
    later = backend.enqueue_tick("nightly", T0 + 86_400, tick_spec(T0 + 86_400))
    found = backend.last_ticks([("default", "nightly")])
    assert found == {("default", "nightly"): Tick(T0 + 86_400, later.id)}


def test_enqueue_tick_of_the_same_or_an_earlier_tick__stores_nothing(backend: Any) -> None:
    first = backend.enqueue_tick("nightly", T0, tick_spec(T0))
    for tick in (T0, T0 - 60):
        again = tick_spec(tick)
        assert backend.enqueue_tick("nightly", tick, again) is None
        with pytest.raises(JobNotFound):
            backend.get(again.id)
    assert [j.id for j in all_jobs(backend)] == [first.id]
    assert backend.last_ticks([("default", "nightly")])["default", "nightly"].at == T0


def test_a_tick_whose_job_completed__makes_no_second_job(backend: Any, worker: str) -> None:
    """What ``key=`` alone would not do: its job is finished, its key free again."""
    backend.enqueue_tick("nightly", T0, tick_spec(T0))
    job = claim_one(backend, worker)
    backend.complete(job.id, job.fence)
    assert backend.enqueue_tick("nightly", T0, tick_spec(T0)) is None
    assert backend.counts("default")[State.COMPLETED] == 1
    assert len(all_jobs(backend)) == 1


def test_schedules_tick_apart__by_name_and_by_queue(backend: Any) -> None:
    made = [
        backend.enqueue_tick("nightly", T0, tick_spec(T0)),
        backend.enqueue_tick("hourly", T0, tick_spec(T0, "hourly")),
        backend.enqueue_tick("nightly", T0, tick_spec(T0, queue="reports")),
    ]
    assert None not in made
    wanted = [("default", "nightly"), ("default", "hourly"), ("reports", "nightly"), ("x", "y")]
    found = backend.last_ticks(wanted)
    assert found == {
        ("default", "nightly"): Tick(T0, made[0].id),
        ("default", "hourly"): Tick(T0, made[1].id),
        ("reports", "nightly"): Tick(T0, made[2].id),
    }
    assert backend.last_ticks([]) == {}


def test_a_tick_of_a_fraction_of_a_second__reads_back_exactly(backend: Any) -> None:
    tick = T0 + 0.123456
    job = backend.enqueue_tick("fast", tick, tick_spec(tick, "fast"))
    assert backend.last_ticks([("default", "fast")])["default", "fast"] == Tick(tick, job.id)
    assert backend.enqueue_tick("fast", tick, tick_spec(tick, "fast")) is None
    assert backend.enqueue_tick("fast", tick + 1e-6, tick_spec(tick + 1e-6, "fast")) is not None


BAD_TICKS = [("bad name", T0), ("", T0), (None, T0), ("ok", -1.0), ("ok", float("nan")),
             ("ok", float("inf")), ("ok", True), ("ok", "1700000000")]  # fmt: skip
BAD_SCHEDULES = ["nightly", [("default",)], [("default", "no pe")], [1], None]


def test_ticks_with_bad_input__are_refused(backend: Any) -> None:
    for schedule, tick in BAD_TICKS:
        with pytest.raises(InvalidInput):
            backend.enqueue_tick(schedule, tick, tick_spec(T0))
    for schedules in BAD_SCHEDULES:
        with pytest.raises(InvalidInput):
            backend.last_ticks(schedules)
    assert all_jobs(backend) == []


TICKERS = 4
TICKS = 15


def test_concurrent_tickers__make_one_job_per_tick(
    backend: Any, backend_url: str, open_backend: Callable[[str], Any], portal: Portal
) -> None:
    """Several backends (each what one worker holds: its own connections) tick
    the same ticks at once; every tick gets one job, and only one."""
    tickers = [open_backend(backend_url).inner for _ in range(TICKERS)]

    async def tick_all(b: Any, seed: int, together: asyncio.Barrier) -> list[str]:
        rng, made = random.Random(seed), []
        for n in range(TICKS):
            tick = T0 + n
            await together.wait()  # all at each tick (else the first winner stays ahead)
            await asyncio.sleep(rng.random() * 0.001)  # and in a new order each time
            job = await b.enqueue_tick("racy", tick, tick_spec(tick, "racy"))
            if job is not None:
                made.append(job.key)
        return made

    async def race() -> list[list[str]]:
        together = asyncio.Barrier(TICKERS)
        return list(
            await asyncio.gather(*(tick_all(b, i, together) for i, b in enumerate(tickers)))
        )

    made = portal.run(race())
    keys = Counter(k for per_ticker in made for k in per_ticker)
    assert keys == Counter(f"racy@{T0 + n}" for n in range(TICKS))
    assert sum(1 for per_ticker in made if per_ticker) >= 2, "no contention happened"
    stored = all_jobs(backend)
    assert sorted(j.key for j in stored) == sorted(keys)
    assert backend.last_ticks([("default", "racy")])["default", "racy"].at == T0 + TICKS - 1
