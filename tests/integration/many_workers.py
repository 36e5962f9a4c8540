"""Many tenure workers in one process: ``python -m tests.integration.many_workers
N`` runs N workers on ``$TENURE_URL``'s ``default`` queue until its stdin
closes, then drains them. Each has its own backend and connections, as N
worker processes would; thread pools at the default concurrency, no-op
handlers: cheaper on a small machine than N processes with their executors.
(One signal handler per process: the stop is stdin's end, for all of them.)"""

from __future__ import annotations

import asyncio
import sys

import tenure
from tenure.config import WorkerConfig
from tenure.worker.supervisor import Supervisor

app = tenure.App()


@app.task(name="noop")
def noop() -> None:
    return None


async def main(count: int) -> None:
    workers = [Supervisor(app, WorkerConfig(pool="thread")) for _ in range(count)]
    running = asyncio.gather(*(w.run() for w in workers))
    await asyncio.to_thread(sys.stdin.read)
    for worker in workers:
        worker.request_stop()
    await running


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
