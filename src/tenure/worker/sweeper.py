"""The sweeper: recovers stalled attempts and attempts of dead workers.

Every worker runs one; the backend's guard makes one sweep per interval across
the whole fleet, so more workers do not mean more sweeping.
"""

from __future__ import annotations

import asyncio
import logging

from tenure.backends.base import Backend, RescueReport
from tenure.worker.periodic import every

log = logging.getLogger("tenure.sweeper")


class Sweeper:
    def __init__(self, backend: Backend, interval: float) -> None:
        self.backend = backend
        self.interval = interval
        self.sweeps = 0
        self.rescued = 0

    async def run_once(self, *, force: bool = False) -> RescueReport:
        """One sweep, unless another worker swept within the interval; ``force`` skips the guard."""
        report = await self.backend.rescue(0.0 if force else self.interval * 0.9)
        if report.swept:
            self.sweeps += 1
            self.rescued += len(report.rescued)
        for r in report.rescued:
            log.warning("rescued job %s (attempt fence %d): %s -> %s", r.job_id, r.fence,
                        r.outcome, r.state)  # fmt: skip
        for w in report.dead_workers:
            log.warning("worker %s is gone; its leases were recovered", w)
        return report

    async def run(self, stop: asyncio.Event) -> None:
        await every(self, stop, log)
