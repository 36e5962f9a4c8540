"""Dramatiq: ``dramatiq peers.dramatiq_peer --processes 1 --threads N`` (a
supervisor process forks the worker process). No bulk enqueue API."""

from __future__ import annotations

import os
import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from harness import counter
from harness.records import ENDED, record
from peers import QUEUE, TASK, URL, script

CORES = os.cpu_count() or 1
DEFAULTS = {
    "pool": f"threads, in one process per core ({CORES} here) under a parent process",
    "concurrency": f"8 threads per process ({8 * CORES} here)",
    "prefetch": "2 per thread: 16 per process",
}

broker = RedisBroker(url=URL or "redis://127.0.0.1:6379/0")
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE)
def noop(i: int) -> None:
    record(i)


@dramatiq.actor(queue_name=QUEUE)
def incr(i: int) -> None:
    record(i)
    counter.incr()


@dramatiq.actor(queue_name=QUEUE)
def sleep(i: int, seconds: float) -> None:
    record(i)
    time.sleep(seconds)
    record(i, ENDED)


JOBS = {"noop": noop, "incr": incr}


class Client:
    BULK = None

    def enqueue(self, i: int) -> None:
        JOBS[TASK].send(i)

    def enqueue_sleep(self, i: int, seconds: float) -> None:
        sleep.send(i, seconds)

    def close(self) -> None:
        broker.close()


def worker_command(concurrency: int | None) -> list[str]:
    argv = [script("dramatiq"), "peers.dramatiq_peer", "--queues", QUEUE]
    if concurrency is not None:
        argv += ["--processes", "1", "--threads", str(concurrency)]
    return argv
