"""An idle worker waits on its wake-up (doorbell, LISTEN, blocking pop) with a
slow safety poll: it costs almost no CPU and a few storage calls a second,
however long it idles. A real worker process on every backend; its CPU read
from /proc, storage's calls from the server's own counters."""

from __future__ import annotations

import os
import time
from urllib.parse import urlsplit

import pytest
import redis as redis_sync

from tenure import State
from tenure.chaos.lab import Lab

WINDOW = 3.0  # seconds of idleness measured
MAX_CPU = 0.05  # of one core: a busy-polling worker took a whole core (SQLite)
MAX_CALLS_PER_S = 15.0  # heartbeat, sweep guard, safety poll, policy refresh


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (its children not included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def storage_calls(url: str, postgres_server: object | None) -> int | None:
    """Calls the storage server has served so far: transactions committed in
    the database (PostgreSQL), scripts run and blocking waits (Redis: the
    commands a script runs count apart); None for SQLite."""
    scheme = urlsplit(url).scheme
    if scheme.startswith("postgres"):
        db = url.rsplit("/", 1)[1]
        return int(
            postgres_server.psql(  # type: ignore[attr-defined]
                f"SELECT xact_commit FROM pg_stat_database WHERE datname = '{db}'"
            )
        )
    if scheme.startswith("redis"):
        with redis_sync.Redis.from_url(url) as r:
            stats = r.info("commandstats")
            return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("evalsha", "blpop"))
    return None


def registered(lab: Lab) -> bool:
    return len(lab.app.call(lab.app.backend.workers())) >= 1


def test_an_idle_worker__costs_almost_no_cpu_and_few_storage_calls(
    backend_url: str, request: pytest.FixtureRequest
) -> None:
    pg = request.getfixturevalue("postgres_server") if "postgres" in backend_url else None
    with Lab(backend_url, "idle") as lab:
        worker = lab.worker("--concurrency", "2")
        lab.wait("the worker to register", lambda: registered(lab))
        job = lab.enqueue("chaos.sleep", seconds=0)  # it has claimed, and gone idle since
        lab.wait("the job", lambda: lab.job(job.id).state is State.COMPLETED)
        time.sleep(1.5)  # past the backoff to the slow safety poll
        cpu, calls, began = cpu_seconds(worker.pid), storage_calls(lab.url, pg), time.monotonic()
        time.sleep(WINDOW)  # the measurement: a rate over a window of idleness
        elapsed = time.monotonic() - began
        cpu = (cpu_seconds(worker.pid) - cpu) / elapsed
        after = storage_calls(lab.url, pg)
        rate = None if calls is None or after is None else (after - calls) / elapsed
        print(f"idle worker: {cpu:.1%} of a core, {rate} storage calls/s")
        assert cpu < MAX_CPU, f"an idle worker used {cpu:.1%} of a core"
        if rate is not None:
            assert rate < MAX_CALLS_PER_S, f"an idle worker made {rate:.0f} storage calls/s"
        job = lab.enqueue("chaos.sleep", seconds=0)  # and it still wakes for a job
        lab.wait("the job", lambda: lab.job(job.id).state is State.COMPLETED, timeout=10)
        assert worker.poll() is None


@pytest.mark.slow
def test_a_worker_held_back_by_max_active__idles_without_polling_storage(
    backend_url: str, request: pytest.FixtureRequest
) -> None:
    """Free slots and a queued job, but the queue's max_active is reached: the
    worker waits for a wake-up (the active job's end, a policy change) with
    its slow safety poll, as if there were nothing queued."""
    pg = request.getfixturevalue("postgres_server") if "postgres" in backend_url else None
    with Lab(backend_url, "held", max_active=1) as lab:
        worker = lab.worker("--concurrency", "2")
        lab.wait("the worker to register", lambda: registered(lab))
        running = lab.enqueue("chaos.sleep", seconds=60)
        held = lab.enqueue("chaos.sleep", seconds=0)
        lab.wait("the first job to run", lambda: lab.job(running.id).state is State.ACTIVE)
        time.sleep(1.5)  # past the backoff to the slow safety poll
        cpu, calls, began = cpu_seconds(worker.pid), storage_calls(lab.url, pg), time.monotonic()
        time.sleep(WINDOW)
        elapsed = time.monotonic() - began
        cpu = (cpu_seconds(worker.pid) - cpu) / elapsed
        after = storage_calls(lab.url, pg)
        rate = None if calls is None or after is None else (after - calls) / elapsed
        print(f"held-back worker: {cpu:.1%} of a core, {rate} storage calls/s")
        assert cpu < MAX_CPU, f"a held-back worker used {cpu:.1%} of a core"
        if rate is not None:
            assert rate < MAX_CALLS_PER_S, f"a held-back worker made {rate:.0f} storage calls/s"
        assert lab.job(held.id).state is State.QUEUED
        lab.app.queue(lab.queue).set_policy(max_active=2)  # room: the worker wakes for it
        lab.wait("the held job", lambda: lab.job(held.id).state is State.COMPLETED, timeout=10)
