"""Lease and fence arithmetic.

A lease is a worker's time-limited claim on one attempt: ``(job_id, fence,
worker_id, expires_at)``. The fence grows by one at every claim; every write
about an attempt presents it, and storage refuses a stale one.
"""

from __future__ import annotations

from dataclasses import dataclass

FIRST_FENCE = 1


@dataclass(frozen=True, slots=True)
class Lease:
    """A worker's claim on one attempt of one job."""

    job_id: str
    fence: int
    worker_id: str
    expires_at: float | None  # None for at-most-once claims: no lease to renew

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


def next_fence(fence: int) -> int:
    """The fence a new claim of a job carries."""
    return fence + 1


def expires_at(now: float, ttl: float) -> float:
    """When a lease taken or renewed at ``now`` runs out."""
    return now + ttl


def is_current(stored_fence: int, presented_fence: int) -> bool:
    """Whether a write presenting ``presented_fence`` may touch the attempt."""
    return stored_fence == presented_fence


def lost_leases(held: set[tuple[str, int]], renewed: set[tuple[str, int]]) -> set[tuple[str, int]]:
    """The leases a heartbeat failed to renew: held before, not renewed now."""
    return held - renewed
