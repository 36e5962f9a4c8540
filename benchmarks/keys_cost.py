"""What concurrency keys cost the worker's cycle (issue 39): the same cycles
(complete the last claim, claim the next ``--batch``) on one queue per
variant, taken in turns on one connection until all are drained; the median
time of a cycle on each, and its rate against ``unlimited``.

    python benchmarks/keys_cost.py [--backend redis] [--variants ...]
        [--jobs 20000] [--keys 1000] [--batch 10] [--url URL]
    python benchmarks/keys_cost.py --scale 10000,1000000 --keys 10000 [--fair]

Variants: ``plain`` (no key, no per-key policy: today's path), ``unlimited``
(each job one of ``--keys`` keys, no per-key policy), ``per_key`` (the same,
``max_active_per_key=2``), ``fair`` (the same, ``fair=True``). Turns and
medians, as events_cost.py: a burst of others' work on a shared machine hits
every variant alike. To compare a change of the plain path, run
``--variants plain`` with each version of the code, alternating.

``--scale``: one queue per size, each that many queued jobs over ``--keys``
keys with ``max_active_per_key=1`` (and ``fair`` with ``--fair``); claims of
``--batch`` in turns across them (each claim's jobs completed and as many
enqueued outside the timing, so the size holds): the median claim per size
and its ratio to the smallest (flat: the claim reads the keys' heads).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
POLICIES: dict[str, dict[str, Any]] = {
    "plain": {}, "unlimited": {}, "per_key": {"max_active_per_key": 2}, "fair": {"fair": True},
}  # fmt: skip


async def fill(backend: Backend, variant: str, args: Any) -> None:
    if POLICIES[variant]:
        await backend.change_policy(variant, POLICIES[variant])
    for first in range(0, args.jobs, 1000):
        batch = range(first, min(first + 1000, args.jobs))
        if variant == "plain":
            await backend.enqueue([JobSpec.create("t", {"n": i}, queue=variant) for i in batch])
            continue
        specs = [JobSpec.create("t", {"n": i}, queue=variant, concurrency_key=f"k{i % args.keys}")
                 for i in batch]  # fmt: skip
        await backend.enqueue(specs)


async def turns(backend: Backend, args: Any) -> dict[str, list[float]]:
    """Each variant's cycle times, in turns, until all are drained."""
    for variant in args.variants:
        await fill(backend, variant, args)
    items: dict[str, list[tuple[str, int, bytes]]] = {v: [] for v in args.variants}
    took: dict[str, list[float]] = {v: [] for v in args.variants}
    live = list(args.variants)
    while live:
        for variant in list(live):
            t = time.perf_counter()
            _, claimed = await backend.complete_and_claim(
                items[variant], WORKER, [variant], args.batch
            )
            took[variant].append(time.perf_counter() - t)
            items[variant] = [(j.id, j.fence, b"null") for j in claimed]
            if not claimed and not items[variant]:
                live.remove(variant)
    return took


def keyed_specs(queue: str, keys: range, per_key: int, start: int = 0) -> list[JobSpec]:
    """per_key jobs of each key in keys, by key: one enqueue run per key."""
    return [JobSpec.create("t", {"n": start + i}, queue=queue, priority=k % 3,
                           concurrency_key=f"k{k}")
            for k in keys for i in range(per_key)]  # fmt: skip


async def scale(backend: Backend, args: Any) -> dict[str, list[float]]:
    """The claim's time at each size, in turns."""
    took: dict[str, list[float]] = {}
    for size in args.scale:
        queue = f"scale{size}"
        await backend.change_policy(queue, {"max_active_per_key": 1, "fair": args.fair})
        per_key, step = max(size // args.keys, 1), max(10_000 // max(size // args.keys, 1), 1)
        started = time.perf_counter()
        for first in range(0, min(args.keys, size), step):
            keys = range(first, min(first + step, args.keys, size))
            await backend.enqueue(keyed_specs(queue, keys, per_key))
        print(f"{queue}: {size:,} jobs over {min(args.keys, size):,} keys enqueued in "
              f"{time.perf_counter() - started:.0f} s", flush=True)  # fmt: skip
        took[queue] = []
    for r in range(args.rounds + 20):
        for queue, times in took.items():
            t = time.perf_counter()
            jobs = await backend.claim(WORKER, [queue], args.batch)
            if r >= 20:  # the first 20: warm up
                times.append(time.perf_counter() - t)
            await backend.complete_and_claim([(j.id, j.fence, b"null") for j in jobs], WORKER,
                                             [], 0)  # fmt: skip
            await backend.enqueue([
                s for j in jobs
                for s in keyed_specs(queue, range(int(j.concurrency_key[1:]), 1 + int(
                    j.concurrency_key[1:])), 1, 10_000_000 + r)
            ])  # fmt: skip
    return took


async def measure(url: str, args: Any) -> dict[str, list[float]]:
    backend = from_url(url)
    await backend.open()
    try:
        await backend.register_worker(WorkerInfo(WORKER, "host", 0, ()))
        if args.scale:
            return await scale(backend, args)
        await turns(backend, args)  # warm up: scripts loaded, caches hot
        return await turns(backend, args)
    finally:
        await backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backend", default="redis")
    parser.add_argument("--variants", default="plain,unlimited,per_key,fair")
    parser.add_argument("--jobs", type=int, default=20000, help="per variant")
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--url", help="this store, not a throwaway")
    parser.add_argument("--scale", help="sizes (jobs queued), e.g. 10000,1000000")
    parser.add_argument("--fair", action="store_true", help="--scale: fair=True too")
    parser.add_argument("--rounds", type=int, default=200, help="--scale: claims per size")
    args = parser.parse_args()
    args.variants = args.variants.split(",")
    args.scale = [int(n) for n in args.scale.split(",")] if args.scale else []
    with contextlib.nullcontext(args.url) if args.url else throwaway_url(args.backend, "k") as url:
        took = asyncio.run(measure(url, args))
    medians = {v: statistics.median(t) * 1e6 for v, t in took.items()}
    if args.scale:
        first = next(iter(medians.values()))
        for queue, median in medians.items():
            print(f"{args.backend} {queue}: claim of {args.batch} p50 {median:,.0f} µs, "
                  f"{median / first:.2f}x the smallest", flush=True)  # fmt: skip
        return
    base = medians.get("unlimited")
    for variant, median in medians.items():
        ratio = f", {base / median:.2f}x the rate of unlimited" if base else ""
        print(f"{args.backend} {variant:9} claims of {args.batch}: median cycle "
              f"{median:,.0f} µs ({len(took[variant])} cycles){ratio}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
