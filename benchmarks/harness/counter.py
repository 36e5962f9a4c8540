"""The job of the defaults workload: one Redis ``INCR`` of a counter, a real
round trip where the drain's job is a no-op.

Handlers call :func:`incr` (sync) or :func:`aincr` (async, so that an event
loop is not blocked by it), after their side-channel record. The counter lives
in a Redis database of its own (``$BENCH_COUNTER``), on the run's Redis server
whatever the backend under test; the harness reads it at the end: it must
equal the number of jobs, the proof that they really ran.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

KEY = "bench:counter"

_sync: dict[int, Any] = {}
_async: dict[tuple[int, int], Any] = {}


def incr() -> None:
    """One client per process: a forked child (Celery, RQ) makes its own."""
    client = _sync.get(os.getpid())
    if client is None:
        import redis

        client = _sync[os.getpid()] = redis.Redis.from_url(os.environ["BENCH_COUNTER"])
    client.incr(KEY)


async def aincr() -> None:
    """One client per process and event loop: an asyncio client is bound to its loop."""
    key = (os.getpid(), id(asyncio.get_running_loop()))
    client = _async.get(key)
    if client is None:
        import redis.asyncio

        client = _async[key] = redis.asyncio.Redis.from_url(os.environ["BENCH_COUNTER"])
    await client.incr(KEY)


def read(url: str) -> int:
    """The counter's value (0 before the first ``INCR``), from the harness."""
    import redis

    with redis.Redis.from_url(url) as client:
        return int(client.get(KEY) or 0)
