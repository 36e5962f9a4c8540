"""tenure: ``tenure worker`` with ``--pool thread`` (the headline, in-process
like the peers) or ``--pool process`` ($BENCH_POOL), or with no such flags
(its defaults); at-most-once delivery when $BENCH_DELIVERY says so; no
lifecycle events when $BENCH_EVENTS is off."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import tenure
from harness import counter
from harness.records import ENDED, record
from peers import QUEUE, TASK, URL
from tenure.config import WorkerConfig
from tenure.core.states import State

app = tenure.App(URL or None)
_worker = WorkerConfig()
DEFAULTS = {
    "pool": f"{_worker.pool} pool",
    "concurrency": str(_worker.concurrency),
    "prefetch": "paced, while jobs are short: at most 6 per slot (12 on PostgreSQL)",
}


@app.task(name="noop", queue=QUEUE)
def noop(i: int) -> None:
    record(i)


@app.task(name="incr", queue=QUEUE)
def incr(i: int) -> None:
    record(i)
    counter.incr()


@app.task(name="sleep", queue=QUEUE)
def sleep(i: int, seconds: float) -> None:
    record(i)
    time.sleep(seconds)
    record(i, ENDED)


class Client:
    BULK = "enqueue_many"

    def __init__(self) -> None:
        policy: dict[str, Any] = {}
        if delivery := os.environ.get("BENCH_DELIVERY"):
            policy["delivery"] = delivery
        if os.environ.get("BENCH_EVENTS") == "off":
            policy["events"] = False
        if policy:
            app.queue(QUEUE).set_policy(**policy)

    def enqueue(self, i: int) -> None:
        app.enqueue(TASK, {"i": i}, queue=QUEUE)

    def enqueue_bulk(self, indices: list[int]) -> None:
        app.enqueue_many(TASK, [{"i": i} for i in indices], queue=QUEUE)

    def enqueue_sleep(self, i: int, seconds: float) -> None:
        app.enqueue("sleep", {"i": i, "seconds": seconds}, queue=QUEUE)

    def verify(self, expected: int) -> dict[str, Any]:
        """tenure's own count, once the last completions are written (10 s at most)."""
        deadline = time.monotonic() + 10.0
        while True:
            counts = app.queue(QUEUE).counts()
            if counts[State.COMPLETED] >= expected or time.monotonic() > deadline:
                return {str(k): v for k, v in counts.items()}
            time.sleep(0.05)

    def close(self) -> None:
        app.close()


def worker_command(concurrency: int | None) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "tenure.cli",
        "worker",
        "peers.tenure_peer:app",
        "--queue",
        QUEUE,
        "--log-level",
        "warning",
    ]
    if concurrency is not None:
        argv += [
            "--concurrency",
            str(concurrency),
            "--pool",
            os.environ.get("BENCH_POOL", "thread"),
        ]
    return argv
