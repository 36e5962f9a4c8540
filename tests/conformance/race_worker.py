"""The body of one worker process in the race tests (spawned, so importable).

Each process opens its own backend on the shared storage, registers a worker,
and claims and completes until the queue is empty. It writes what it claimed
to a JSON file, so the test can check that no lease was handed out twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
from pathlib import Path
from typing import Any

from tenure.backends import from_url
from tenure.backends.base import WorkerInfo
from tenure.job import JobSpec


async def _drain(url: str, worker_id: str, queue: str, seed: int, start: Any) -> list[list[Any]]:
    backend = from_url(url)
    await backend.open()
    try:
        await backend.register_worker(
            WorkerInfo(
                id=worker_id, hostname=socket.gethostname(), pid=os.getpid(), queues=(queue,)
            )
        )
        await asyncio.to_thread(start.wait, 30)
        rng = random.Random(seed)
        claims: list[list[Any]] = []
        while True:
            jobs = await backend.claim(worker_id, [queue], rng.randint(1, 5))
            if not jobs:
                break
            for job in jobs:
                claims.append([job.id, job.fence])
                await backend.complete(job.id, job.fence, {"by": worker_id})
        await backend.deregister_worker(worker_id)
        return claims
    finally:
        await backend.close()


def drain_queue(url: str, worker_id: str, seed: int, start: Any, out: str) -> None:
    """Claim (batches of 1 to 5) and complete until the default queue is empty."""
    claims = asyncio.run(_drain(url, worker_id, "default", seed, start))
    Path(out).write_text(json.dumps(claims))


async def _enqueue_with_key(url: str, key: str, n: int, start: Any) -> list[str]:
    backend = from_url(url)
    await backend.open()
    try:
        await asyncio.to_thread(start.wait, 30)
        ids = []
        for i in range(n):
            [job] = await backend.enqueue([JobSpec.create("t", {"i": i}, key=key)])
            ids.append(job.id)
        return ids
    finally:
        await backend.close()


def enqueue_with_key(url: str, key: str, n: int, start: Any, out: str) -> None:
    """Enqueue ``n`` jobs with the same key, one call each."""
    ids = asyncio.run(_enqueue_with_key(url, key, n, start))
    Path(out).write_text(json.dumps(ids))
