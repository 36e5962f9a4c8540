"""Fleet-wide limits of a queue, decided once: how many jobs a claim may take
from it, given what storage counts (jobs active, the rate bucket's tokens).

The rate limit is a token bucket kept in storage: it holds up to
``rate_limit`` tokens, refills at ``rate_limit`` per ``rate_interval``
seconds, and each start takes one. A bucket never stored is full. The SQLite
backend calls these; the PostgreSQL statement and the Redis script compute
the same, in their own language (their tests are the conformance suite's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tenure.config import QueuePolicy

# Tokens are floats refilled in small steps: 2.9999999999 is 3.
EPSILON = 1e-9


def refilled(
    policy: QueuePolicy,
    tokens: float | None,
    at: float | None,
    now: float,
    *,
    per_key: bool = False,
) -> float:
    """The bucket's tokens at ``now``: the queue's (only for a queue with a
    ``rate_limit``), or a key's (``per_key``: with a ``rate_limit_per_key``)."""
    rate = policy.rate_limit_per_key if per_key else policy.rate_limit
    interval = policy.rate_interval_per_key if per_key else policy.rate_interval
    assert rate is not None
    if tokens is None or at is None:
        return float(rate)
    gained = max(now - at, 0.0) * rate / interval
    return min(float(rate), tokens + gained)


def allowance(policy: QueuePolicy, limit: int, active: int, tokens: float | None) -> int:
    """How many of ``limit`` jobs a claim may take from the queue now: none
    while it is paused, none beyond ``max_active`` (``active`` counted), none
    beyond the bucket's whole ``tokens``."""
    if policy.paused:
        return 0
    if policy.max_active is not None:
        limit = min(limit, policy.max_active - active)
    if policy.rate_limit is not None and tokens is not None:
        limit = min(limit, math.floor(tokens + EPSILON))
    return max(limit, 0)


def key_allowance(policy: QueuePolicy, limit: int, active: int, tokens: float | None) -> int:
    """How many of ``limit`` jobs of one concurrency key a claim may take now:
    none beyond ``max_active_per_key`` (``active`` counted), none beyond the
    key's bucket's whole ``tokens``."""
    if policy.max_active_per_key is not None:
        limit = min(limit, policy.max_active_per_key - active)
    if policy.rate_limit_per_key is not None and tokens is not None:
        limit = min(limit, math.floor(tokens + EPSILON))
    return max(limit, 0)


@dataclass(frozen=True, slots=True)
class KeyCount:
    """One concurrency key of a queue, as ``Backend.key_counts`` counts it."""

    key: str | None  # None: the queue's jobs enqueued without a key
    queued: int  # its jobs queued (due, waiting for a claim)
    active: int  # its jobs active (claimed, not finished)
