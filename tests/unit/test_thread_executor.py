"""The thread executor takes attempts beyond its slots: such an
attempt waits for a slot, starts in the thread whose attempt freed it, and is
timed from its start. One that never started can be stopped or withdrawn, and
then never runs. Real threads, a real event loop; the App only names tasks."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tenure import App, State
from tenure.job import Job
from tenure.worker.executors.base import AttemptResult, Raised, Returned, Stopped, TimedOut
from tenure.worker.executors.thread import WAITING_PER_SLOT, ThreadExecutor


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    with App(f"sqlite:///{tmp_path / 'tasks.db'}") as app:
        yield app


_ids = itertools.count()


def job(task: str, **args: Any) -> Job:
    return Job(id=f"{task}-{next(_ids)}", task=task, queue="default", args=args,
               state=State.ACTIVE, priority=0, run_at=0.0, created_at=0.0, fence=1)  # fmt: skip


class NothingAsked:
    """The supervisor's side of a link no handler here uses."""

    async def progress(self, job: Job, data: Any) -> None:
        raise AssertionError("no handler here asks the supervisor anything")

    async def heartbeat(self, job: Job) -> None:
        raise AssertionError("no handler here asks the supervisor anything")


class Ends:
    """What on_end was told, by job id; wait() until n ends are known."""

    def __init__(self) -> None:
        self.by_id: dict[str, tuple[AttemptResult, float]] = {}
        self._changed = asyncio.Event()

    def on_end(self, job: Job) -> Any:
        def ended(result: AttemptResult, ran: float) -> None:
            assert job.id not in self.by_id, "on_end called twice"
            self.by_id[job.id] = (result, ran)
            self._changed.set()

        return ended

    async def wait(self, n: int) -> None:
        async with asyncio.timeout(10):
            while len(self.by_id) < n:
                self._changed.clear()
                await self._changed.wait()


async def started_executor(app: App, slots: int) -> ThreadExecutor:
    executor = ThreadExecutor(app.tasks, NothingAsked(), slots)
    await executor.start()
    return executor


def test_an_attempt_waiting_for_a_slot__is_timed_from_its_start(app: App) -> None:
    @app.task
    def nap(seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    async def main() -> None:
        executor = await started_executor(app, slots=1)
        ends = Ends()
        first, second, third = (job("nap", seconds=s) for s in (0.8, 0.3, 1.0))
        executor.begin(first, None, ends.on_end(first))
        assert executor.capacity() == 0 and executor.room() == WAITING_PER_SLOT
        executor.begin(second, 1.0, ends.on_end(second))  # waits 0.8 s, then runs 0.3 s
        assert executor.capacity() == -1 and executor.room() == WAITING_PER_SLOT - 1
        await ends.wait(2)
        executor.begin(third, 0.2, ends.on_end(third))
        await ends.wait(3)
        await executor.close()
        assert ends.by_id[first.id][0] == Returned(0.8)
        result, ran = ends.by_id[second.id]
        assert result == Returned(0.3)  # 1.1 s after it was begun: its deadline ran from its start
        assert 0.25 < ran < 1.0
        assert ends.by_id[third.id][0] == TimedOut(0.2)  # a deadline still ends an attempt

    asyncio.run(main())


def test_an_attempt_stopped_or_withdrawn_before_it_started__never_runs(app: App) -> None:
    gate = threading.Event()
    ran: list[str] = []

    @app.task
    def hold() -> str:
        gate.wait(10)
        return "held"

    @app.task
    def note(name: str) -> None:
        ran.append(name)

    async def main() -> None:
        executor = await started_executor(app, slots=2)
        ends = Ends()
        holds = [job("hold"), job("hold")]
        stopped, withdrawn = job("note", name="stopped"), job("note", name="withdrawn")
        for j in [*holds, stopped, withdrawn]:
            executor.begin(j, None, ends.on_end(j))
        assert executor.capacity() == -2 and executor.room() == 2 * WAITING_PER_SLOT - 2
        executor.stop((stopped.id, stopped.fence))
        await ends.wait(1)
        assert ends.by_id[stopped.id] == (Stopped(), 0.0)
        assert executor.withdraw() == [withdrawn]
        assert executor.capacity() == 0 and executor.room() == 2 * WAITING_PER_SLOT
        gate.set()
        await ends.wait(3)
        await asyncio.sleep(0.1)  # a started attempt would have run by now
        await executor.close()
        assert [ends.by_id[j.id][0] for j in holds] == [Returned("held")] * 2
        assert withdrawn.id not in ends.by_id  # withdrawn: on_end is not called
        assert ran == []

    asyncio.run(main())


def test_slots_pass_between_sync_and_async_attempts__never_more_at_once_than_slots(
    app: App,
) -> None:
    lock = threading.Lock()
    now = peak = 0

    def enter() -> None:
        nonlocal now, peak
        with lock:
            now += 1
            peak = max(peak, now)

    def leave() -> None:
        nonlocal now
        with lock:
            now -= 1

    @app.task
    def sync_step(n: int) -> int:
        enter()
        time.sleep(0.01)
        leave()
        return n

    @app.task
    async def async_step(n: int) -> int:
        enter()
        await asyncio.sleep(0.01)
        leave()
        return n

    async def main() -> None:
        executor = await started_executor(app, slots=2)
        ends = Ends()
        jobs = [job("async_step" if n % 3 else "sync_step", n=n) for n in range(30)]
        for j in jobs:
            while executor.room() <= 0:
                await ends.wait(len(ends.by_id) + 1)
            executor.begin(j, 5.0, ends.on_end(j))
        await ends.wait(len(jobs))
        await executor.close()
        assert [ends.by_id[j.id][0] for j in jobs] == [Returned(n) for n in range(30)]
        assert peak == 2

    asyncio.run(main())


def test_two_attempts_of_one_job__each_is_stopped_by_its_fence(app: App) -> None:
    # A worker can hold two attempts of one job: the first recovered from under
    # it (it went on running), the second claimed since. Stopping names the attempt.
    @app.task
    def nap(seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    async def main() -> None:
        executor = await started_executor(app, slots=2)
        ends: dict[int, AttemptResult] = {}
        first = job("nap", seconds=5.0)
        second = dataclasses.replace(first, fence=2)
        for attempt in (first, second):
            executor.begin(attempt, None, lambda r, _, f=attempt.fence: ends.__setitem__(f, r))
        executor.stop((first.id, 1))
        executor.stop((first.id, 2))
        async with asyncio.timeout(2):  # well before either handler returns
            while len(ends) < 2:
                await asyncio.sleep(0.01)
        await executor.close()
        assert ends == {1: Stopped(), 2: Stopped()}

    asyncio.run(main())


@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt(), asyncio.CancelledError()])
def test_an_async_handler_raising_a_base_exception__ends_its_attempt_and_the_loop_lives_on(
    app: App, exc: BaseException
) -> None:
    @app.task
    async def leave() -> None:
        raise exc

    @app.task
    async def answer() -> int:
        return 42

    async def main() -> None:
        executor = await started_executor(app, slots=1)
        ends = Ends()
        first, second = job("leave"), job("answer")
        executor.begin(first, None, ends.on_end(first))
        await ends.wait(1)
        executor.begin(second, None, ends.on_end(second))
        await ends.wait(2)
        await executor.close()
        result = ends.by_id[first.id][0]
        assert isinstance(result, Raised) and type(exc).__name__ in result.traceback
        assert ends.by_id[second.id][0] == Returned(42)

    asyncio.run(main())
