"""procrastinate: ``procrastinate worker --concurrency N``; async handlers.
Bulk: ``Task.batch_defer`` (one statement)."""

from __future__ import annotations

import asyncio

from procrastinate import App, PsycopgConnector

from harness import counter
from harness.records import ENDED, record
from peers import QUEUE, TASK, URL, script

DEFAULTS = {
    "pool": "asyncio, 1 process",
    "concurrency": "1",
    "prefetch": "none: one job per fetch (LISTEN/NOTIFY, polls every 5 s)",
}

app = App(connector=PsycopgConnector(conninfo=URL or "postgresql:///postgres"))


@app.task(name="noop", queue=QUEUE)
async def noop(i: int) -> None:
    record(i)


@app.task(name="incr", queue=QUEUE)
async def incr(i: int) -> None:
    record(i)
    await counter.aincr()


@app.task(name="sleep", queue=QUEUE)
async def sleep(i: int, seconds: float) -> None:
    record(i)
    await asyncio.sleep(seconds)
    record(i, ENDED)


JOBS = {"noop": noop, "incr": incr}


class Client:
    BULK = "batch_defer"

    def __init__(self) -> None:
        app.open()
        try:
            app.schema_manager.apply_schema()
        except Exception as exc:  # already there (a second client on the same database)
            if "already exists" not in str(exc):
                raise

    def enqueue(self, i: int) -> None:
        JOBS[TASK].defer(i=i)

    def enqueue_bulk(self, indices: list[int]) -> None:
        JOBS[TASK].batch_defer(*({"i": i} for i in indices))

    def enqueue_sleep(self, i: int, seconds: float) -> None:
        sleep.defer(i=i, seconds=seconds)

    def close(self) -> None:
        app.close()


def worker_command(concurrency: int | None) -> list[str]:
    argv = [
        script("procrastinate"),
        "--app",
        "peers.procrastinate_peer.app",
        "--log-level",
        "warning",
        "worker",
        "--queues",
        QUEUE,
    ]
    if concurrency is not None:
        argv += ["--concurrency", str(concurrency)]
    return argv
