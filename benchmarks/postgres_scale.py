"""Claim and rescue cost on PostgreSQL at 10,000 and at 1,000,000 queued jobs.

    python benchmarks/postgres_scale.py [--url postgresql://…] [--keys 10000 --per-key 1 --fair]

Without --url it starts a throwaway server from the binaries on the machine.
Prints the median latency of claim (a batch of 10, then completed) and of a
sweep, at both sizes, and their ratio (the target is within 2x). With
--keys, the jobs are spread over that many concurrency keys, and the queue
has max_active_per_key (--per-key) and fair (--fair): a keyed claim.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tenure.backends.base import WorkerInfo
from tenure.backends.postgres import PostgresBackend
from tenure.config import QueuePolicy

FILL = """
INSERT INTO tenure.jobs (id, queue, task, args, state, priority, run_at, created_at,
                         concurrency_key)
SELECT md5(random()::text || g), 'scale', 't', '{}', 'queued', (g %% 3),
       extract(epoch FROM now()) - 1000 + g * 0.001, extract(epoch FROM now()),
       CASE WHEN %(keys)s::int > 0 THEN 'customer-' || (g %% greatest(%(keys)s::int, 1)) END
FROM generate_series(%(first)s::int, %(last)s::int) AS g
"""


async def measure(backend: PostgresBackend, rounds: int) -> tuple[float, float]:
    claims, sweeps = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        jobs = await backend.claim("bench", ["scale"], 10)
        claims.append(time.perf_counter() - started)
        for job in jobs:
            await backend.complete(job.id, job.fence)
        started = time.perf_counter()
        await backend.rescue()
        sweeps.append(time.perf_counter() - started)
    return statistics.median(claims), statistics.median(sweeps)


async def run(url: str, sizes: list[int], rounds: int, policy: QueuePolicy, keys: int) -> None:
    backend = PostgresBackend.from_url(url)
    await backend.open()
    await backend.set_policy("scale", policy)
    await backend.register_worker(WorkerInfo("bench", "host", 0, ("scale",)))
    results = {}
    have = 0
    try:
        for size in sizes:
            async with backend.db.tx() as conn:
                await conn.execute(FILL, {"keys": keys, "first": have + 1, "last": size})
            have = size
            async with backend.db.tx() as conn:
                await conn.execute("ANALYZE tenure.jobs")
            await measure(backend, 20)  # warm up: plans prepared, caches hot
            results[size] = await measure(backend, rounds)
            claim, sweep = results[size]
            print(f"{size:>9,} queued: claim(10) p50 {claim * 1000:.2f} ms, "
                  f"sweep p50 {sweep * 1000:.2f} ms")  # fmt: skip
    finally:
        await backend.close()
    small, large = results[sizes[0]], results[sizes[-1]]
    print(f"ratio {sizes[-1]:,} / {sizes[0]:,}: claim {large[0] / small[0]:.2f}x, "
          f"sweep {large[1] / small[1]:.2f}x (target: within 2x)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--sizes", default="10000,1000000")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--keys", type=int, default=0)
    parser.add_argument("--per-key", type=int)
    parser.add_argument("--fair", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    policy = QueuePolicy(max_active_per_key=args.per_key, fair=args.fair)
    if args.url:
        asyncio.run(run(args.url, sizes, args.rounds, policy, args.keys))
        return
    from tests.servers import PostgresServer

    server = PostgresServer()
    try:
        asyncio.run(run(server.new_database(), sizes, args.rounds, policy, args.keys))
    finally:
        server.close()


if __name__ == "__main__":
    main()
