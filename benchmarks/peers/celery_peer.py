"""Celery: ``celery worker --pool threads --concurrency N`` (in-process, like
the others; the defaults — prefork, one child per core — for kill -9). No
result backend. No bulk enqueue API (a group sends its messages one by one)."""

from __future__ import annotations

import os
import time

from celery import Celery

from harness import counter
from harness.records import ENDED, record
from peers import QUEUE, TASK, URL, script

CORES = os.cpu_count() or 1
DEFAULTS = {
    "pool": f"prefork: one child process per core ({CORES} here)",
    "concurrency": f"1 per child: {CORES}",
    "prefetch": f"{4 * CORES} (4 x concurrency, `worker_prefetch_multiplier`)",
}

app = Celery("bench", broker=URL or "redis://127.0.0.1:6379/0")
app.conf.task_default_queue = QUEUE
app.conf.broker_connection_retry_on_startup = True


@app.task(name="noop")
def noop(i: int) -> None:
    record(i)


@app.task(name="incr")
def incr(i: int) -> None:
    record(i)
    counter.incr()


@app.task(name="sleep")
def sleep(i: int, seconds: float) -> None:
    record(i)
    time.sleep(seconds)
    record(i, ENDED)


JOBS = {"noop": noop, "incr": incr}


class Client:
    BULK = None

    def enqueue(self, i: int) -> None:
        JOBS[TASK].delay(i)

    def enqueue_sleep(self, i: int, seconds: float) -> None:
        sleep.delay(i, seconds)

    def close(self) -> None:
        app.close()


def worker_command(concurrency: int | None) -> list[str]:
    argv = [
        script("celery"),
        "-A",
        "peers.celery_peer",
        "worker",
        "--queues",
        QUEUE,
        "--loglevel",
        "WARNING",
    ]
    if concurrency is not None:
        argv += ["--pool", "threads", "--concurrency", str(concurrency)]
    return argv
