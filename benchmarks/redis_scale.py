"""Claim and rescue cost on Redis at 10,000 and at 1,000,000 queued jobs.

    python benchmarks/redis_scale.py [--url redis://…] [--sizes 10000,1000000]

Without --url it starts a throwaway redis-server on a random port. At each size
it measures, over --rounds rounds, the median latency of:

- claim: a batch of 10 from a queue holding that many queued jobs (then the ten
  are completed and ten new jobs enqueued, outside the timing, so the size holds);
- rescue: a sweep that recovers 10 expired leases (claimed with a 50 ms lease
  and left to expire), and an idle sweep that finds nothing.

and prints the ratio large / small (the target: within 2x). The queued jobs are
spread over three priorities, so the ready set is a real sorted set.
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
from tenure.backends.redis import RedisBackend
from tenure.config import QueuePolicy
from tenure.job import JobSpec

QUEUE = "scale"
SHORT = QueuePolicy(lease_ttl=0.05, heartbeat_interval=0.02, max_attempts=1000, max_stalls=1000)


def specs(n: int, start: int = 0) -> list[JobSpec]:
    return [JobSpec.create("t", {"i": start + i}, queue=QUEUE, priority=(start + i) % 3)
            for i in range(n)]  # fmt: skip


async def fill(backend: RedisBackend, have: int, want: int) -> float:
    started = time.perf_counter()
    while have < want:
        n = min(10_000, want - have)
        await backend.enqueue(specs(n, have))
        have += n
    return time.perf_counter() - started


async def measure(backend: RedisBackend, rounds: int) -> dict[str, float]:
    claims, rescues, idle = [], [], []
    for r in range(rounds):
        started = time.perf_counter()
        jobs = await backend.claim("bench", [QUEUE], 10)
        claims.append(time.perf_counter() - started)
        await backend.complete_many([(j.id, j.fence, b"null") for j in jobs])
        await backend.enqueue(specs(10, 10_000_000 + r * 10))

        await backend.set_policy(QUEUE, SHORT)
        stalled = await backend.claim("bench", [QUEUE], 10)
        await backend.set_policy(QUEUE, QueuePolicy())
        await asyncio.sleep(0.06)  # the 50 ms leases run out (Redis's clock)
        started = time.perf_counter()
        report = await backend.rescue()
        rescues.append(time.perf_counter() - started)
        assert len(report.rescued) == len(stalled) == 10, report

        started = time.perf_counter()
        report = await backend.rescue()
        idle.append(time.perf_counter() - started)
        assert report.rescued == ()
    return {"claim": statistics.median(claims), "rescue": statistics.median(rescues),
            "idle sweep": statistics.median(idle)}  # fmt: skip


async def run(url: str, sizes: list[int], rounds: int) -> None:
    backend = RedisBackend.from_url(url)
    await backend.open()
    await backend.runner.command("FLUSHDB")
    await backend.register_worker(WorkerInfo("bench", "host", 0, (QUEUE,)))
    results: dict[int, dict[str, float]] = {}
    have = 0
    try:
        for size in sizes:
            took = await fill(backend, have, size)
            if size > have:
                print(f"enqueued {size - have:,} jobs in {took:.1f} s "
                      f"({(size - have) / took:,.0f} jobs/s, batches of 10,000)")  # fmt: skip
            have = size
            await measure(backend, 20)  # warm up
            results[size] = figures = await measure(backend, rounds)
            print(
                f"{size:>9,} queued: "
                + ", ".join(f"{name} p50 {value * 1000:.3f} ms" for name, value in figures.items())
            )
    finally:
        await backend.close()
    small, large = results[sizes[0]], results[sizes[-1]]
    print(
        f"ratio {sizes[-1]:,} / {sizes[0]:,}: "
        + ", ".join(f"{name} {large[name] / small[name]:.2f}x" for name in small)
        + " (target: within 2x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--sizes", default="10000,1000000")
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.url:
        asyncio.run(run(args.url, sizes, args.rounds))
        return
    from tests.servers import RedisServer

    server = RedisServer()
    try:
        asyncio.run(run(server.url, sizes, args.rounds))
    finally:
        server.close()


if __name__ == "__main__":
    main()
