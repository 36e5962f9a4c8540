"""What lifecycle events cost the worker's cycle: the same cycles (complete
the last claim, claim the next ``--batch``) on two queues, one with events on
and one off, taken in turns on one connection; the median time of a cycle on
each. ``--clients`` processes do so at once, each on its own two queues (what
two workers' transactions do to each other: locks, NOTIFY at commit).

    python benchmarks/events_cost.py [--backends sqlite,postgres,redis]
        [--batch 10,1] [--jobs 5000] [--delivery at-least-once] [--clients 1]
        [--url URL]

Cycles in turns and medians, not rates: on a shared machine a burst of
others' work moves a rate (and even CPU time, in a VM) by 2-4x; turns give
each queue the same moments, and a median drops the cycles a burst hit.
Starts throwaway servers (tests/servers.py), which run with ``fsync=off``;
``--url`` takes a server of yours instead (one backend: a PostgreSQL database
with fsync on shows what waits on a commit's flush).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.stores import throwaway_url
from tenure.backends import Backend, from_url
from tenure.backends.base import WorkerInfo
from tenure.job import JobSpec

WORKER = "bench"


async def turns(backend: Backend, args: Any, client: int = 0) -> dict[bool, list[float]]:
    """Each queue's cycle times, in turns, until both are drained."""
    queues = {True: f"on{client}", False: f"off{client}"}
    items: dict[bool, list[tuple[str, int, bytes]]] = {True: [], False: []}
    took: dict[bool, list[float]] = {True: [], False: []}
    for events, queue in queues.items():
        await backend.change_policy(queue, {"events": events, "delivery": args.delivery})
        for first in range(0, args.jobs, 1000):
            batch = range(first, min(first + 1000, args.jobs))
            await backend.enqueue([JobSpec.create("t", {"n": i}, queue=queue) for i in batch])
    live = [True, False]
    while live:
        for events in list(live):
            t = time.perf_counter()
            _, claimed = await backend.complete_and_claim(
                items[events], WORKER, [queues[events]], args.batch_size
            )
            took[events].append(time.perf_counter() - t)
            items[events] = [(j.id, j.fence, b"null") for j in claimed]
            if not claimed:
                live.remove(events)
    return took


async def client(url: str, args: Any, k: int) -> dict[bool, list[float]]:
    backend = from_url(url)
    await backend.open()
    try:
        await backend.register_worker(WorkerInfo(f"{WORKER}{k}", "host", 0, ()))
        await turns(backend, args, k)  # warm up: statements prepared, caches hot
        return await turns(backend, args, k)
    finally:
        await backend.close()


def in_process(url: str, args: Any, k: int) -> dict[bool, list[float]]:
    return asyncio.run(client(url, args, k))


def run(kind: str, args: Any) -> None:
    """``--clients`` processes, each cycling on its own two queues."""
    with contextlib.nullcontext(args.url) if args.url else throwaway_url(kind, "events") as url:
        context = multiprocessing.get_context("spawn")
        with context.Pool(args.clients) as pool:
            done = pool.starmap(in_process, [(url, args, k) for k in range(args.clients)])
    took = {e: [t for d in done for t in d[e]] for e in (True, False)}
    on, off = (statistics.median(took[e]) * 1e6 for e in (True, False))
    print(f"{kind:8} {args.delivery}, claims of {args.batch_size:2}, {args.clients} client(s): "
          f"median cycle {on:,.0f} µs with events, {off:,.0f} µs without: {off / on:.2f}x "
          f"the rate ({len(took[True])} cycles each)", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sqlite,postgres,redis")
    parser.add_argument("--batch", default="10,1")
    parser.add_argument("--jobs", type=int, default=5000, help="per queue")
    parser.add_argument("--delivery", default="at-least-once")
    parser.add_argument("--clients", type=int, default=1, help="processes, each its own queues")
    parser.add_argument("--url", help="this store (of --backends' one kind), not a throwaway")
    args = parser.parse_args()
    for kind in args.backends.split(","):
        for b in args.batch.split(","):
            args.batch_size = int(b)
            run(kind, args)


if __name__ == "__main__":
    main()
