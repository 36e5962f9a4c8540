"""PgQueuer: ``pgq run peers.pgqueuer_peer:create``, on asyncpg (its fastest
driver); async handlers. Its own defaults: it fetches batches of 10 and caps
nothing (its only per-process cap, ``--max-concurrent-tasks``, must be at least
twice the batch, and a per-entrypoint ``concurrency_limit`` of 4 under batches
of 10 drops it to ~40 jobs/s). Bulk: ``Queries.enqueue`` with lists."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.models import Job
from pgqueuer.queries import Queries

from harness import counter
from harness.records import ENDED, record
from peers import TASK, URL, script

DEFAULTS = {
    "pool": "asyncio, 1 process",
    "concurrency": "no cap: every job of a batch at once",
    "prefetch": "batches of 10 (`--batch-size`)",
}


@asynccontextmanager
async def create() -> AsyncIterator[PgQueuer]:
    connection = await asyncpg.connect(URL)
    pgq = PgQueuer.from_asyncpg_connection(connection)

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        record(int(job.payload or b"0"))

    @pgq.entrypoint("incr")
    async def incr(job: Job) -> None:
        record(int(job.payload or b"0"))
        await counter.aincr()

    @pgq.entrypoint("sleep")
    async def sleep(job: Job) -> None:
        i, seconds = (job.payload or b"0 0").split()
        record(int(i))
        await asyncio.sleep(float(seconds))
        record(int(i), ENDED)

    try:
        yield pgq
    finally:
        await connection.close()


class Client:
    BULK = "Queries.enqueue(lists)"

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.connection = self.loop.run_until_complete(asyncpg.connect(URL))
        self.queries = Queries.from_asyncpg_connection(self.connection)
        if not self.loop.run_until_complete(self.queries.schema_is_installed()):
            self.loop.run_until_complete(self.queries.install())

    def enqueue(self, i: int) -> None:
        self.loop.run_until_complete(self.queries.enqueue(TASK, str(i).encode()))

    def enqueue_bulk(self, indices: list[int]) -> None:
        self.loop.run_until_complete(
            self.queries.enqueue(
                [TASK] * len(indices), [str(i).encode() for i in indices], [0] * len(indices)
            )
        )

    def enqueue_sleep(self, i: int, seconds: float) -> None:
        self.loop.run_until_complete(self.queries.enqueue("sleep", f"{i} {seconds}".encode()))

    def close(self) -> None:
        self.loop.run_until_complete(self.connection.close())
        self.loop.close()


def worker_command(concurrency: int | None) -> list[str]:
    return [script("pgq"), "run", "peers.pgqueuer_peer:create", "--log-level", "WARNING"]
