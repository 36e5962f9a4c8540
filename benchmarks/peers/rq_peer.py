"""RQ: ``rq worker``. For throughput, ``SimpleWorker`` (the job runs in the
worker's process, as with every library here); RQ runs one job at a time per
process, whatever the concurrency. For kill -9 (defaults), the forking
``Worker``. Bulk: ``Queue.enqueue_many`` (one pipeline)."""

from __future__ import annotations

import time

from redis import Redis
from rq import Queue

from harness import counter
from harness.records import ENDED, record
from peers import QUEUE, TASK, URL, script

DEFAULTS = {
    "pool": "forks a work horse process per job",
    "concurrency": "1",
    "prefetch": "none: one job per pop",
}


def noop(i: int) -> None:
    record(i)


def incr(i: int) -> None:
    record(i)
    counter.incr()


def sleep(i: int, seconds: float) -> None:
    record(i)
    time.sleep(seconds)
    record(i, ENDED)


JOBS = {"noop": noop, "incr": incr}


class Client:
    BULK = "enqueue_many"

    def __init__(self) -> None:
        self.redis = Redis.from_url(URL)
        self.queue = Queue(QUEUE, connection=self.redis)

    def enqueue(self, i: int) -> None:
        self.queue.enqueue(JOBS[TASK], i)

    def enqueue_bulk(self, indices: list[int]) -> None:
        self.queue.enqueue_many([Queue.prepare_data(JOBS[TASK], (i,)) for i in indices])

    def enqueue_sleep(self, i: int, seconds: float) -> None:
        self.queue.enqueue(sleep, i, seconds)

    def close(self) -> None:
        self.redis.close()


def worker_command(concurrency: int | None) -> list[str]:
    argv = [script("rq"), "worker", "--url", URL, "--quiet", QUEUE]
    if concurrency is not None:
        argv += ["--worker-class", "rq.worker.SimpleWorker"]
    return argv
