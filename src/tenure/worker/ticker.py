"""The ticker: enqueues the jobs of periodic schedules (``app.periodic``) at their ticks.

Every worker runs one, for the schedules of the queues it serves. No worker
leads: each enqueues every tick, and storage keeps one job per tick
(``Backend.enqueue_tick`` moves the schedule's last tick forward in the
transaction that stores the job). Between ticks it sleeps until the next one.
At start-up it reads each schedule's last tick from storage and, unless the
schedule skips missed ticks, enqueues the most recent tick that fell while no
worker ran. A tick enqueued late (storage was down, the worker was frozen)
is the most recent one due: several missed ticks make one job.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from tenure.backends.base import Backend
from tenure.core.clock import SYSTEM_CLOCK, Clock
from tenure.core.schedules import Schedule
from tenure.task import Task
from tenure.worker.every import every
from tenure.worker.faults import StorageFaults

log = logging.getLogger("tenure.periodic")

RETRY = 1.0  # seconds before trying again when storage failed
LONGEST_SLEEP = 60.0  # a wall clock set forward is noticed within this long


class Ticker:
    """Enqueues one job per tick of the periodic schedules of the queues served."""

    def __init__(
        self,
        backend: Backend,
        schedules: Sequence[Schedule],
        tasks: Mapping[str, Task[Any, Any]],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.backend = backend
        self.schedules = list(schedules)
        self.tasks = tasks
        self.clock = clock
        self.interval = RETRY  # what every() waits after a failure
        self.enqueued = 0  # ticks whose job this ticker made
        self._next: dict[str, float] | None = None  # by schedule: the next tick owed

    async def run_once(self) -> float:
        """Enqueue the ticks due now (at the first call, those missed before it);
        return the seconds until the next tick."""
        now = self.clock.now()
        if self._next is None:
            self._next = await self._catch_up(now)
        for schedule in self.schedules:
            if self._next[schedule.name] <= now:
                await self._enqueue(schedule, schedule.last_at_or_before(now))
                self._next[schedule.name] = schedule.next_after(now)
        return min(self._next.values(), default=now + LONGEST_SLEEP) - self.clock.now()

    async def _catch_up(self, now: float) -> dict[str, float]:
        last = await self.backend.last_ticks([(s.queue, s.name) for s in self.schedules])
        for schedule in self.schedules:
            tick = last.get((schedule.queue, schedule.name))
            owed = schedule.owed_at_start(None if tick is None else tick.at, now)
            if owed is not None:
                await self._enqueue(schedule, owed)
        return {s.name: s.next_after(now) for s in self.schedules}

    async def _enqueue(self, schedule: Schedule, tick: float) -> None:
        key = schedule.key(tick)
        # run_at is the tick: a job enqueued early by a clock ahead waits for it
        spec = self.tasks[schedule.task].spec(dict(schedule.args), run_at=tick, key=key)
        job = await self.backend.enqueue_tick(schedule.name, tick, spec)
        if job is not None:
            self.enqueued += 1
            fields = {"job_id": job.id, "schedule": schedule.name}
            log.info("periodic %s: enqueued job %s for tick %s", schedule.name, job.id,
                     key.rpartition("@")[2], extra=fields)  # fmt: skip

    def wait_after(self, seconds: float) -> float:
        return min(max(seconds, 0.0), LONGEST_SLEEP)

    async def run(self, stop: asyncio.Event, faults: StorageFaults | None = None) -> None:
        await every(self, stop, log, self.wait_after, faults=faults, what="periodic")
