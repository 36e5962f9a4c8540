"""The lease keeper: one heartbeat per interval renews every lease the worker holds.

It runs in the supervisor, never in the code that runs handlers, so a handler
cannot delay it whatever it does. A lease the heartbeat reports lost was
recovered by the sweeper: its attempt is stopped and must never settle. A
lease whose job's cancel was requested is told to its holder, once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from tenure.backends.base import Backend, LeaseRef
from tenure.errors import LivenessLost
from tenure.worker.every import every

log = logging.getLogger("tenure.leases")


class LeaseKeeper:
    """Renews every lease the worker holds, in one heartbeat per interval."""

    def __init__(
        self,
        backend: Backend,
        worker_id: str,
        interval: float,
        on_liveness_lost: Callable[[], Awaitable[None]] | None = None,
        on_cancel_requested: Callable[[LeaseRef], None] | None = None,
    ) -> None:
        self.backend = backend
        self.worker_id = worker_id
        self.interval = interval
        self.on_liveness_lost = on_liveness_lost or _nothing
        self.on_cancel_requested = on_cancel_requested or _ignore
        self._lost_liveness = False
        self._held: dict[LeaseRef, Callable[[], None]] = {}
        self._cancel_told: set[LeaseRef] = set()  # held leases whose cancel was told

    @property
    def held(self) -> set[LeaseRef]:
        return set(self._held)

    def hold(self, lease: LeaseRef, on_lost: Callable[[], None]) -> None:
        self._held[lease] = on_lost

    def settling(self, lease: LeaseRef) -> None:
        """The attempt is over and being settled: keep renewing its lease, but a
        heartbeat that finds it gone (settled a moment ago) has nothing to stop."""
        if lease in self._held:
            self._held[lease] = _quiet

    def drop(self, lease: LeaseRef) -> None:
        self._held.pop(lease, None)
        self._cancel_told.discard(lease)

    async def run_once(self) -> set[LeaseRef]:
        """Renew every held lease; stop the attempts whose lease is lost; tell the
        holder of each running attempt whose job's cancel was requested, once.

        It runs even with no lease held: it is also how the worker learns that
        storage no longer sees it alive, before it claims under a dead identity.
        """
        if self._lost_liveness:  # registering again failed last time: try again first
            await self.on_liveness_lost()
            self._lost_liveness = False
        try:
            renewal = await self.backend.heartbeat(self.worker_id, self.held)
        except LivenessLost as exc:
            log.error("%s: stopping every attempt and registering again", exc)
            lost = self.held
            self._stop(lost)
            self._lost_liveness = True
            await self.on_liveness_lost()
            self._lost_liveness = False
            return lost
        self._stop(set(renewal.lost))
        for lease in renewal.cancel_requested - self._cancel_told:
            if self._held.get(lease, _quiet) is not _quiet:  # running, not being settled
                self._cancel_told.add(lease)
                self.on_cancel_requested(lease)
        return set(renewal.lost)

    def _stop(self, lost: set[LeaseRef]) -> None:
        for lease in lost:
            self._cancel_told.discard(lease)
            on_lost = self._held.pop(lease, None)
            if on_lost is not None:  # the holder says it, knowing the attempt
                on_lost()

    async def run(self, stop: asyncio.Event) -> None:
        await every(self, stop, log)


async def _nothing() -> None:
    pass


def _quiet() -> None:
    pass


def _ignore(lease: LeaseRef) -> None:
    pass
