"""The drain of a queue with and without per-key limits on PostgreSQL: the
storage's side of a worker (its cycle: complete the last batch, claim the
next), without handlers.

    python benchmarks/postgres_keys_drain.py [--url postgresql://…] [--jobs 20000]

Each round drains ``--jobs`` jobs with ``--claimers`` concurrent claimers
(a backend each, batches of ``--batch``), alternating: a queue without a
per-key field ("plain"), then the same jobs spread over ``--keys`` keys with
max_active_per_key=``--per-key`` ("per-key"), then with fair=True too
("fair"), and for reference with the queue's own max_active (claimed
under its lock, as keys are: "max_active"). Prints each round's jobs/s,
the median of each kind and their ratios to the first kind (--kinds).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tenure.backends.base import WorkerInfo
from tenure.backends.postgres import PostgresBackend
from tenure.config import QueuePolicy
from tenure.job import JobSpec


async def drain(url: str, queue: str, claimers: int, batch: int) -> None:
    async def claimer(i: int) -> None:
        backend = PostgresBackend.from_url(url)
        await backend.open()
        worker = f"bench-{queue}-{i}"
        await backend.register_worker(WorkerInfo(worker, "host", i, (queue,)))
        held: list[tuple[str, int, bytes]] = []
        try:
            while True:
                _, jobs = await backend.complete_and_claim(held, worker, [queue], batch)
                if not jobs:
                    return
                held = [(j.id, j.fence, b"null") for j in jobs]
        finally:
            await backend.close()

    await asyncio.gather(*(claimer(i) for i in range(claimers)))


async def round_(url: str, kind: str, n: int, args: argparse.Namespace) -> float:
    queue = f"{kind}-{time.monotonic_ns()}"
    backend = PostgresBackend.from_url(url)
    await backend.open()
    try:
        if kind == "max_active":  # the queue's own limit (claimed under its lock too)
            await backend.set_policy(queue, QueuePolicy(max_active=1_000_000))
        elif kind != "plain":
            await backend.set_policy(queue, QueuePolicy(max_active_per_key=args.per_key,
                                                        fair=kind == "fair"))  # fmt: skip
        keyed = kind in ("per-key", "fair")
        keys = [f"k{i % args.keys}" if keyed else None for i in range(n)]
        for start in range(0, n, 1000):
            await backend.enqueue([
                JobSpec.create("t", {}, queue=queue, concurrency_key=k)
                for k in keys[start : start + 1000]
            ])  # fmt: skip
        async with backend.db.tx() as conn:
            await conn.execute("ANALYZE tenure.jobs")
    finally:
        await backend.close()
    began = time.perf_counter()
    await drain(url, queue, args.claimers, args.batch)
    return n / (time.perf_counter() - began)


async def run(url: str, args: argparse.Namespace) -> None:
    rates: dict[str, list[float]] = {kind: [] for kind in args.kinds.split(",")}
    await round_(url, "plain", 2000, args)  # warm up
    for r in range(args.rounds):
        for kind, found in rates.items():
            rate = await round_(url, kind, args.jobs, args)
            found.append(rate)
            print(f"round {r + 1} {kind:>8}: {rate:,.0f} jobs/s", flush=True)
    plain = statistics.median(next(iter(rates.values())))
    for kind, found in rates.items():
        print(f"{kind:>8}: median {statistics.median(found):,.0f} jobs/s "
              f"(spread {min(found):,.0f}-{max(found):,.0f}), "
              f"{statistics.median(found) / plain:.2f}x the first")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--per-key", type=int, default=2)
    parser.add_argument("--claimers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kinds", default="plain,per-key,fair,max_active")
    args = parser.parse_args()
    if args.url:
        asyncio.run(run(args.url, args))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.servers import PostgresServer

    server = PostgresServer()
    try:
        asyncio.run(run(server.new_database(), args))
    finally:
        server.close()


if __name__ == "__main__":
    main()
