"""The lease keeper: one heartbeat per interval renews every lease the worker holds.

It runs in the supervisor, never in the code that runs handlers, so a handler
cannot delay it whatever it does. A lease the heartbeat reports lost was
recovered by the sweeper: its attempt is stopped and must never settle.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from tenure.backends.base import Backend, LeaseRef
from tenure.worker.periodic import every

log = logging.getLogger("tenure.leases")


class LeaseKeeper:
    def __init__(self, backend: Backend, worker_id: str, interval: float) -> None:
        self.backend = backend
        self.worker_id = worker_id
        self.interval = interval
        self._held: dict[LeaseRef, Callable[[], None]] = {}

    @property
    def held(self) -> set[LeaseRef]:
        return set(self._held)

    def hold(self, lease: LeaseRef, on_lost: Callable[[], None]) -> None:
        self._held[lease] = on_lost

    def drop(self, lease: LeaseRef) -> None:
        self._held.pop(lease, None)

    async def run_once(self) -> set[LeaseRef]:
        """Renew every held lease; stop the attempts whose lease is lost."""
        if not self._held:
            return set()
        lost = await self.backend.heartbeat(self.worker_id, self.held)
        for lease in lost:
            on_lost = self._held.pop(lease, None)
            if on_lost is not None:
                log.warning("lease lost on job %s (fence %d): stopping its attempt", *lease)
                on_lost()
        return lost

    async def run(self, stop: asyncio.Event) -> None:
        await every(self, stop, log)
