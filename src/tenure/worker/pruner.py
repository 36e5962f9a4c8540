"""The pruner: retention of finished jobs, run by the sweeper after its sweep.

It runs only after a sweep that the fleet's guard let through, so one worker
prunes per sweep interval, whatever the fleet's size. Each ``Backend.prune``
is one short transaction (or script call) of at most ``batch`` jobs; while
they come back full, the pruner calls again, within a time budget (a share of
the sweep interval), so that a backlog (a policy shortened, a fleet back
after a week away) is worked off over several sweeps, without holding storage
for long or delaying the next sweep's recoveries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tenure.backends.base import Backend

log = logging.getLogger("tenure.sweeper")

BATCH = 1000  # jobs per prune: a few ms of storage's time (docs/benchmarks.md)
SHARE = 0.25  # of the sweep interval, the most a sweeper spends pruning


class Pruner:
    """Deletes finished jobs past their queue's retention, a batch at a time."""

    def __init__(
        self, backend: Backend, batch: int = BATCH, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.backend = backend
        self.batch = batch
        self.clock = clock
        self.pruned = 0

    async def run_once(self, budget: float) -> int:
        """Prune batches until one is not full or ``budget`` seconds have passed
        (one batch at least); return how many jobs went."""
        started = self.clock()
        pruned = 0
        while True:
            n = await self.backend.prune(self.batch)
            pruned += n
            if n < self.batch or self.clock() - started >= budget:
                break
        self.pruned += pruned
        if pruned:
            log.debug("pruned %d finished jobs", pruned)
        return pruned
