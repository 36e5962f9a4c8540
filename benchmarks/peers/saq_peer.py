"""SAQ: ``saq peers.saq_peer.settings --workers 1``; async handlers;
``concurrency`` in the settings. No bulk enqueue API (``map`` waits for results)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from saq import Queue

from harness import counter
from harness.records import ENDED, record
from peers import QUEUE, TASK, URL, script

DEFAULTS = {
    "pool": "asyncio, 1 process",
    "concurrency": "10",
    "prefetch": "none: each of its 10 tasks dequeues one job",
}
queue = Queue.from_url(URL or "redis://127.0.0.1:6379/0", name=QUEUE)


async def noop(ctx: dict[str, Any], *, i: int) -> None:
    record(i)


async def incr(ctx: dict[str, Any], *, i: int) -> None:
    record(i)
    await counter.aincr()


async def sleep(ctx: dict[str, Any], *, i: int, seconds: float) -> None:
    record(i)
    await asyncio.sleep(seconds)
    record(i, ENDED)


settings: dict[str, Any] = {"queue": queue, "functions": [noop, incr, sleep]}
if os.environ.get("BENCH_CONCURRENCY"):
    settings["concurrency"] = int(os.environ["BENCH_CONCURRENCY"])


class Client:
    BULK = None

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(queue.connect())

    def enqueue(self, i: int) -> None:
        self.loop.run_until_complete(queue.enqueue(TASK, i=i))

    def enqueue_sleep(self, i: int, seconds: float) -> None:
        self.loop.run_until_complete(queue.enqueue("sleep", i=i, seconds=seconds))

    def close(self) -> None:
        self.loop.run_until_complete(queue.disconnect())
        self.loop.close()


def worker_command(concurrency: int | None) -> list[str]:
    argv = [script("saq"), "peers.saq_peer.settings", "--quiet"]
    return argv if concurrency is None else [*argv, "--workers", "1"]
