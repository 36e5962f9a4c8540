"""procrastinate: ``procrastinate worker --concurrency N``; async handlers.
Bulk: ``Task.batch_defer`` (one statement)."""

from __future__ import annotations

import asyncio

from procrastinate import App, PsycopgConnector

from harness.records import ENDED, record
from peers import QUEUE, URL, script

app = App(connector=PsycopgConnector(conninfo=URL or "postgresql:///postgres"))


@app.task(name="noop", queue=QUEUE)
async def noop(i: int) -> None:
    record(i)


@app.task(name="sleep", queue=QUEUE)
async def sleep(i: int, seconds: float) -> None:
    record(i)
    await asyncio.sleep(seconds)
    record(i, ENDED)


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
        noop.defer(i=i)

    def enqueue_bulk(self, indices: list[int]) -> None:
        noop.batch_defer(*({"i": i} for i in indices))

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
