"""The lease keeper: every renewal of this worker's leases, and what storage answers.

The periodic heartbeat (one per interval, for every lease held) and a
handler's own ``heartbeat()`` and ``progress()`` go through here, and what
storage answers means the same whoever asked: a lease lost was recovered by
the sweeper, so its attempt is stopped and must never settle; a lease whose
job's cancel was requested is told to its attempt, which tells its handler.

It runs in the supervisor, never in the code that runs handlers, so a handler
cannot delay the periodic heartbeat whatever it does.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Protocol

from tenure.backends.base import Backend, LeaseRef, Renewal
from tenure.core.workflows import WorkflowSpec
from tenure.errors import LeaseLost, LivenessLost
from tenure.job import Job
from tenure.worker.identity import Identity

log = logging.getLogger("tenure.leases")


class Holder(Protocol):
    """The attempts whose leases the keeper renews (``attempts.Attempts``)."""

    def held(self) -> Collection[LeaseRef]:
        """The leases to renew: every attempt's not known lost."""

    def lease_lost(self, lease: LeaseRef) -> None:
        """The lease is no longer held: stop its attempt, if it still runs."""

    def cancel_requested(self, lease: LeaseRef) -> None:
        """The job was cancelled while held: tell its attempt's handler, once."""


class LeaseKeeper:
    """Renews the leases of ``holder``'s attempts, in one heartbeat per interval,
    and when a handler asks."""

    def __init__(
        self,
        backend: Backend,
        identity: Identity,
        holder: Holder,
        interval: float = 0.0,
        on_liveness_lost: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.backend = backend
        self.identity = identity
        self.holder = holder
        self.interval = interval
        self.on_liveness_lost = on_liveness_lost or _nothing
        self._lost_liveness = False

    @property
    def held(self) -> set[LeaseRef]:
        return set(self.holder.held())

    async def run_once(self) -> set[LeaseRef]:
        """Renew every held lease; return those lost.

        It runs even with no lease held: it is also how the worker learns that
        storage no longer sees it alive, before it claims under a dead identity.
        """
        if self._lost_liveness:  # registering again failed last time: try again first
            await self.on_liveness_lost()
            self._lost_liveness = False
        held = self.held
        try:
            renewal = await self.renew(held)
        except LivenessLost as exc:
            log.error("%s: stopping every attempt and registering again", exc)
            for lease in held:
                self.holder.lease_lost(lease)
            self._lost_liveness = True
            await self.on_liveness_lost()
            self._lost_liveness = False
            return held
        return set(renewal.lost)

    async def renew(self, leases: Collection[LeaseRef]) -> Renewal:
        """Renew ``leases`` in one round trip, and act on the answer: stop the
        attempts whose lease is lost, tell those whose job's cancel was requested."""
        renewal = await self.backend.heartbeat(self.identity.id, leases)
        for lease in renewal.lost:
            self.holder.lease_lost(lease)
        for lease in renewal.cancel_requested:
            self.holder.cancel_requested(lease)
        return renewal

    async def heartbeat(self, lease: LeaseRef) -> None:
        """A handler renews its own lease; LeaseLost if it is no longer held.
        (LivenessLost goes back to the handler: the periodic heartbeat meets it
        too, and registers again.)"""
        if lease in (await self.renew((lease,))).lost:
            raise LeaseLost(f"job {lease[0]} is no longer held with fence {lease[1]}")

    async def progress(self, lease: LeaseRef, data: Any) -> None:
        """Record a handler's progress report; a lease found lost stops its
        attempt as a heartbeat finding it would."""
        try:
            await self.backend.progress(lease[0], lease[1], data)
        except LeaseLost:
            self.holder.lease_lost(lease)
            raise

    async def spawn(self, lease: LeaseRef, seq: int, spec: WorkflowSpec) -> list[Job]:
        """A step adds work to its workflow; a lease found lost stops its attempt."""
        try:
            return await self.backend.spawn(lease[0], lease[1], seq, spec)
        except LeaseLost:
            self.holder.lease_lost(lease)
            raise


async def _nothing() -> None:
    pass
