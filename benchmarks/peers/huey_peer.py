"""Huey: ``huey_consumer peers.huey_peer.huey -k thread -w N``. No bulk
enqueue API."""

from __future__ import annotations

import time

from huey import RedisHuey

from harness import counter
from harness.records import ENDED, record
from peers import QUEUE, TASK, URL, script

DEFAULTS = {
    "pool": "threads (`-k thread`), in the consumer process",
    "concurrency": "1 (`-w 1`)",
    "prefetch": "none: one job per pop",
}

huey = RedisHuey(QUEUE, url=URL or "redis://127.0.0.1:6379/0")


@huey.task()
def noop(i: int) -> None:
    record(i)


@huey.task()
def incr(i: int) -> None:
    record(i)
    counter.incr()


@huey.task()
def sleep(i: int, seconds: float) -> None:
    record(i)
    time.sleep(seconds)
    record(i, ENDED)


JOBS = {"noop": noop, "incr": incr}


class Client:
    BULK = None

    def enqueue(self, i: int) -> None:
        JOBS[TASK](i)

    def enqueue_sleep(self, i: int, seconds: float) -> None:
        sleep(i, seconds)

    def close(self) -> None:
        pass


def worker_command(concurrency: int | None) -> list[str]:
    argv = [script("huey_consumer"), "peers.huey_peer.huey", "--quiet"]
    if concurrency is not None:
        argv += ["--worker-type", "thread", "--workers", str(concurrency)]
    return argv
