"""The policies of the queues a worker serves, as storage holds them, read now and then."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from tenure.backends.base import Backend
from tenure.config import QueuePolicy
from tenure.errors import TenureError
from tenure.worker.faults import StorageFaults

REFRESH = 5.0  # seconds between reads: a policy change governs the fleet this soon


class Policies:
    """Each queue's policy, read at start and every REFRESH seconds; a queue a
    job came from that the worker does not serve is read when first needed."""

    def __init__(self, backend: Backend, queues: Sequence[str]) -> None:
        self.backend = backend
        self.queues = tuple(queues)
        self.by_queue: dict[str, QueuePolicy] = {}

    async def refresh(self) -> None:
        for q in self.queues:
            self.by_queue[q] = await self.backend.get_policy(q)

    async def get(self, queue: str) -> QueuePolicy:
        if queue not in self.by_queue:
            self.by_queue[queue] = await self.backend.get_policy(queue)
        return self.by_queue[queue]

    def heartbeat_interval(self) -> float:
        return min(p.heartbeat_interval for p in self.by_queue.values())

    def sweep_interval(self) -> float:
        return min(p.sweep_interval for p in self.by_queue.values())

    def limit_claims_ahead(self) -> bool:
        """Whether a queue forbids claims ahead: ``max_active`` (a job waiting
        here holds one of its places, which a free slot elsewhere could use).
        ``max_active_per_key`` does not: a job claimed ahead holds its key's
        place, and the other workers take the other keys' jobs meanwhile.
        At-most-once queues do not: their claim is their one delivery,
        whether the job begins at once or a few milliseconds later."""
        return any(p.max_active is not None for p in self.by_queue.values())

    def fair(self) -> bool:
        """Whether a queue's claims take turns across its keys (``fair``)."""
        return any(p.fair for p in self.by_queue.values())

    def keyed(self) -> bool:
        """Whether a queue's claims look at concurrency keys (QueuePolicy.keyed)."""
        return any(p.keyed for p in self.by_queue.values())

    async def refresh_forever(
        self, stop: asyncio.Event, faults: StorageFaults, refreshed: Callable[[], None]
    ) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), REFRESH)
                return
            try:
                await self.refresh()
            except TenureError as exc:
                faults.failed("policy refresh", exc)
            else:
                faults.succeeded("policy refresh")
                refreshed()
