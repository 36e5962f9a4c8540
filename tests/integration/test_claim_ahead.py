"""Claims ahead of the free slots: only for short jobs, in queues without
``max_active``; a job claimed ahead begins when a slot frees, and a drain hands it back
at once, unrun and without penalty. A completion is never held back for long
to make a fuller cycle, whatever the other slots run."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tenure import App, Outcome, State, WorkerConfig
from tenure.worker import Supervisor
from tenure.worker.pacing import MAX_AHEAD_PER_SLOT, MAX_AHEAD_PER_SLOT_COSTLY

CONFIG = WorkerConfig(concurrency=2, pool="thread", idle_poll_min=0.005, idle_poll_max=0.05)


class Worker:
    """A supervisor on its own loop, in a thread of this process."""

    def __init__(self, app: App, config: WorkerConfig = CONFIG) -> None:
        self.supervisor = Supervisor(app, config)
        self.draining = False
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_until_complete, args=(self.supervisor.run(),), daemon=True
        )
        self.thread.start()

    def call(self, fn: Callable[[], Any]) -> None:
        self.loop.call_soon_threadsafe(fn)

    def pace(self, run_time: float, cycle_time: float) -> None:
        """Set the pace the worker measured (its moving averages), and wake it."""

        def set_pace() -> None:
            self.supervisor.pace.run_time, self.supervisor.pace.cycle_time = run_time, cycle_time
            self.supervisor.wake.set()

        self.call(set_pace)

    def drain(self) -> None:
        if not self.draining:
            self.draining = True
            self.call(self.supervisor.request_stop)

    def stop(self) -> None:
        self.drain()
        self.thread.join(30)
        assert not self.thread.is_alive()
        self.loop.close()


@pytest.fixture
def gated(backend_url: str) -> Iterator[tuple[App, threading.Event]]:
    gate = threading.Event()
    with App(backend_url) as app:

        @app.task
        def hold() -> str:
            gate.wait(30)
            return "done"

        app.enqueue_many("hold", [{} for _ in range(10)])
        yield app, gate
        gate.set()


def active(app: App) -> int:
    return app.queue().counts()[State.ACTIVE]


def wait_for(predicate: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def ahead_per_slot(worker: Worker) -> int:
    """The cap on claims ahead, per slot, on the worker's storage."""
    costly = worker.supervisor.backend.capabilities.costly_cycles
    return MAX_AHEAD_PER_SLOT_COSTLY if costly else MAX_AHEAD_PER_SLOT


def settled_for_a_while(worker: Worker) -> None:
    """Until the worker's loop has looked again at what it was told (its
    wake-up spent) and waits with no cycle out: what is checked next is that
    it did nothing more. Asked on its loop, between two of its callbacks."""

    def looked() -> bool:
        answered, idle = threading.Event(), []

        def ask() -> None:
            cycles = worker.supervisor.cycles
            idle.append(not worker.supervisor.wake.is_set() and cycles.in_flight == 0)
            answered.set()

        worker.call(ask)
        return answered.wait(5) and idle[0]

    wait_for(looked)


@pytest.mark.parametrize("delivery", ["at-least-once", "at-most-once"])
def test_short_jobs_on_a_server__are_claimed_ahead_and_a_drain_hands_those_back(
    gated: tuple[App, threading.Event], delivery: str
) -> None:
    app, gate = gated
    app.queue().set_policy(delivery=delivery)
    worker = Worker(app)
    try:
        wait_for(lambda: active(app) == 2)  # no pace measured yet: no claim ahead
        settled_for_a_while(worker)
        assert active(app) == 2
        app.enqueue_many("hold", [{} for _ in range(30)])
        worker.pace(run_time=0.00001, cycle_time=0.001)  # 200 a cycle: capped
        ahead = 2 * ahead_per_slot(worker)
        wait_for(lambda: active(app) == 2 + ahead)
        settled_for_a_while(worker)
        assert active(app) == 2 + ahead
        worker.drain()
        wait_for(lambda: app.queue().counts()[State.QUEUED] == 38)  # while 2 still run
        assert active(app) == 2
    finally:
        gate.set()
        worker.stop()
    jobs = [app.get_job(j.id) for j in app.jobs(limit=50).jobs]
    assert sorted(j.state for j in jobs) == [State.COMPLETED] * 2 + [State.QUEUED] * 38
    back = [j for j in jobs if j.history and j.state is State.QUEUED]
    assert len(back) == ahead
    for job in back:
        assert job.attempts == 0 and [a.outcome for a in job.history] == [Outcome.RELEASED]


@pytest.mark.parametrize("why", ["long jobs", "max_active"])
def test_no_claims_ahead__for_long_jobs_or_queues_with_max_active(
    gated: tuple[App, threading.Event], why: str
) -> None:
    app, gate = gated
    if why == "max_active":
        app.queue().set_policy(max_active=100)
    worker = Worker(app)
    try:
        wait_for(lambda: active(app) == 2)
        if why == "long jobs":  # a job runs as long as 100 cycles, or 20 batch horizons
            worker.pace(run_time=0.1, cycle_time=0.001)
        else:
            worker.pace(run_time=0.0001, cycle_time=0.001)
        settled_for_a_while(worker)
        assert active(app) == 2
        assert app.queue().counts()[State.QUEUED] == 8
    finally:
        gate.set()
        worker.stop()


def test_a_job_waiting_for_a_slot__goes_back_unrun_on_a_drain_also_at_most_once(
    gated: tuple[App, threading.Event],
) -> None:
    """A job claimed but not begun reached no handler: a drain releases it, in
    an at-most-once queue too (dead-lettering it would lose a job never run).
    Here a job arrives with no slot free, as when a pool process dies under a
    claim in flight."""
    app, gate = gated
    app.queue().set_policy(delivery="at-most-once")
    worker = Worker(app)
    supervisor = worker.supervisor
    try:
        wait_for(lambda: active(app) == 2)

        async def claim_with_no_slot_free() -> None:
            [job] = await supervisor.backend.claim(supervisor.worker_id, ["default"], 1)
            supervisor.attempts.start(job)

        worker.call(lambda: asyncio.ensure_future(claim_with_no_slot_free()))
        wait_for(lambda: supervisor.attempts.unbegun == 1)
        worker.drain()
        wait_for(lambda: app.queue().counts()[State.QUEUED] == 8)
    finally:
        gate.set()
        worker.stop()
    jobs = [app.get_job(j.id) for j in app.jobs(limit=20).jobs]
    assert sorted(j.state for j in jobs) == [State.COMPLETED] * 2 + [State.QUEUED] * 8
    [back] = [j for j in jobs if j.history and j.state is State.QUEUED]
    assert back.attempts == 0 and [a.outcome for a in back.history] == [Outcome.RELEASED]


def test_a_completion_is_written_soon__while_the_other_slots_stay_busy(backend_url: str) -> None:
    """Jobs claimed ahead wait while every slot is busy; the one job that ends
    meanwhile is completed at once (on SQLite and PostgreSQL, after the batch
    horizon), not when the others end."""
    gates = [threading.Event() for _ in range(40)]
    with App(backend_url) as app:

        @app.task
        def hold(n: int) -> int:
            gates[n].wait(30)
            return n

        jobs = app.enqueue_many("hold", [{"n": n} for n in range(40)])
        worker = Worker(app)
        try:
            wait_for(lambda: active(app) == 2)
            ahead = 2 * ahead_per_slot(worker)
            worker.pace(run_time=0.00001, cycle_time=0.001)
            wait_for(lambda: active(app) == 2 + ahead)
            gates[0].set()
            wait_for(lambda: app.get_job(jobs[0].id).state is State.COMPLETED, timeout=5.0)
            # 1 began in its slot, the others still wait; the cycle that wrote the
            # completion may have claimed one more, or not, by whether the job's
            # long run had slowed the pace it measured (and so its claims ahead)
            assert active(app) in (1 + ahead, 2 + ahead)
            assert app.queue().counts()[State.COMPLETED] == 1
        finally:
            for gate in gates:
                gate.set()
            worker.stop()
        counts = app.queue().counts()  # the drain handed back those still waiting
        assert counts[State.COMPLETED] + counts[State.QUEUED] == 40
