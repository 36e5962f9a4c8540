"""arq: ``arq peers.arq_peer.WorkerSettings``; async handlers; ``max_jobs`` is
the concurrency. No bulk enqueue API."""

from __future__ import annotations

import asyncio
import os
from typing import Any, ClassVar

from arq import create_pool
from arq.connections import RedisSettings

from harness import counter
from harness.records import ENDED, record
from peers import QUEUE, TASK, URL, script

DEFAULTS = {
    "pool": "asyncio, 1 process",
    "concurrency": "10 (`max_jobs`)",
    "prefetch": "reads up to 100 queued ids per poll, every 0.5 s (`poll_delay`)",
}
REDIS = RedisSettings.from_dsn(URL or "redis://127.0.0.1:6379/0")


async def noop(ctx: dict[str, Any], i: int) -> None:
    record(i)


async def incr(ctx: dict[str, Any], i: int) -> None:
    record(i)
    await counter.aincr()


async def sleep(ctx: dict[str, Any], i: int, seconds: float) -> None:
    record(i)
    await asyncio.sleep(seconds)
    record(i, ENDED)


# Quiet, as for every library here: arq logs each job at INFO by default.
LOG_CONFIG: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "root": {"level": "WARNING"},
}


class WorkerSettings:
    functions: ClassVar[list[Any]] = [noop, incr, sleep]
    redis_settings = REDIS
    queue_name = QUEUE
    if os.environ.get("BENCH_CONCURRENCY"):
        max_jobs = int(os.environ["BENCH_CONCURRENCY"])


class Client:
    BULK = None

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pool = self.loop.run_until_complete(create_pool(REDIS))

    def enqueue(self, i: int) -> None:
        self.loop.run_until_complete(self.pool.enqueue_job(TASK, i, _queue_name=QUEUE))

    def enqueue_sleep(self, i: int, seconds: float) -> None:
        self.loop.run_until_complete(self.pool.enqueue_job("sleep", i, seconds, _queue_name=QUEUE))

    def close(self) -> None:
        self.loop.run_until_complete(self.pool.aclose())
        self.loop.close()


def worker_command(concurrency: int | None) -> list[str]:
    return [
        script("arq"),
        "peers.arq_peer.WorkerSettings",
        "--custom-log-dict",
        "peers.arq_peer.LOG_CONFIG",
    ]
