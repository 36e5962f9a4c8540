"""The sweeper: recovers stalled attempts and attempts of dead workers, then
prunes finished jobs past their queue's retention (``pruner.py``).

Every worker runs one; the backend's guard makes one sweep per interval across
the whole fleet, so more workers do not mean more sweeping. A sweeper the guard
refused tries again as soon as a sweep is allowed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from tenure.backends.base import Backend, Rescued, RescueReport
from tenure.core.states import State
from tenure.worker.every import every
from tenure.worker.faults import StorageFaults
from tenure.worker.pruner import SHARE, Pruner

log = logging.getLogger("tenure.sweeper")

RETRY_PAST_GUARD = 0.01  # seconds past the guard's window (one landing in it is refused again)
# A sweep this many seconds later than planned means this process was frozen
# or starved; if it froze holding SQLite's write lock, every other worker's
# heartbeat is still waiting for that lock when it wakes. It lets them land
# first (HEARTBEATS_LAND) rather than take their leases for expired.
LATE = 0.5
HEARTBEATS_LAND = 0.5


class Sweeper:
    """Recovers stalled attempts and those of dead workers, one sweep per interval."""

    def __init__(
        self,
        backend: Backend,
        interval: float,
        on_dead: Callable[[str], None] | None = None,
        on_rescued: Callable[[Rescued], None] | None = None,
    ) -> None:
        self.backend = backend
        self.interval = interval
        self.on_dead = on_dead  # called with each job a sweep dead-letters
        self.on_rescued = on_rescued  # called with each attempt a sweep recovers
        self.pruner = Pruner(backend)
        self.sweeps = 0
        self.rescued = 0
        self._due: float | None = None  # when the next sweep is planned (monotonic)

    async def run_once(self, *, force: bool = False) -> RescueReport:
        """One sweep, unless another worker swept within the interval; ``force`` skips the guard."""
        late = 0.0 if self._due is None else time.monotonic() - self._due
        if late > LATE:
            log.debug("sweep %.1f s late: letting heartbeats land first", late)
            await asyncio.sleep(HEARTBEATS_LAND)
        report = await self.backend.rescue(0.0 if force else self.interval * 0.9)
        if report.swept:
            self.sweeps += 1
            self.rescued += len(report.rescued)
        for r in report.rescued:
            _log_recovery(r)
            if self.on_rescued is not None:
                self.on_rescued(r)
            if r.state is State.DEAD and self.on_dead is not None:
                self.on_dead(r.job_id)
        for w in report.dead_workers:
            log.warning("worker %s is gone; its leases were recovered", w)
        if report.swept:  # after the recoveries: they never wait for it
            await self.pruner.run_once(self.interval * SHARE)
        return report

    async def run(self, stop: asyncio.Event, faults: StorageFaults | None = None) -> None:
        await every(self, stop, log, self._wait_after, faults=faults, what="sweep")

    def _wait_after(self, report: RescueReport) -> float:
        """After a sweep, an interval; after one the guard refused, until one is
        allowed (``retry_in``, which a backend may spread over its fleet): if
        the fleet's last sweep was a worker's that died then, its jobs are
        recovered soon after the interval (waiting a whole interval from a
        refusal took up to twice that)."""
        wait = self.interval
        if not report.swept:
            wait = report.retry_in + RETRY_PAST_GUARD
        self._due = time.monotonic() + wait
        return wait


def _log_recovery(r: Rescued) -> None:
    silent = "at an unknown time" if r.silent_for is None else f"{r.silent_for:.1f} s"
    proof = "heartbeat" if r.detector == "worker_gone" else "lease renewal"
    log.warning("recovered job %s (%s) of worker %s: %s, %s after its last %s; now %s",
                r.job_id, r.task, r.worker, r.detector, silent, proof, r.state,
                extra={"job_id": r.job_id, "task": r.task, "queue": r.queue, "fence": r.fence,
                       "worker": r.worker, "outcome": str(r.outcome), "detector": str(r.detector),
                       "silent_for": r.silent_for, "state": str(r.state)})  # fmt: skip
