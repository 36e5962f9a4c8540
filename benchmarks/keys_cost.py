"""What concurrency keys cost the worker's cycle (issue 39): the same cycles
(complete the last claim, claim the next ``--batch``) on one queue per
variant, taken in turns on one connection until all are drained; the median
time of a cycle on each, and its rate against ``unlimited``.

    python benchmarks/keys_cost.py [--backend redis] [--variants ...]
        [--jobs 20000] [--keys 1000] [--batch 10] [--url URL]

Variants: ``plain`` (no key, no per-key policy: today's path), ``unlimited``
(each job one of ``--keys`` keys, no per-key policy), ``per_key`` (the same,
``max_active_per_key=2``), ``fair`` (the same, ``fair=True``). Turns and
medians, as events_cost.py: a burst of others' work on a shared machine hits
every variant alike. To compare a change of the plain path, run
``--variants plain`` with each version of the code, alternating.
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


async def measure(url: str, args: Any) -> dict[str, list[float]]:
    backend = from_url(url)
    await backend.open()
    try:
        await backend.register_worker(WorkerInfo(WORKER, "host", 0, ()))
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
    args = parser.parse_args()
    args.variants = args.variants.split(",")
    with contextlib.nullcontext(args.url) if args.url else throwaway_url(args.backend, "k") as url:
        took = asyncio.run(measure(url, args))
    medians = {v: statistics.median(t) * 1e6 for v, t in took.items()}
    base = medians.get("unlimited")
    for variant, median in medians.items():
        ratio = f", {base / median:.2f}x the rate of unlimited" if base else ""
        print(f"{args.backend} {variant:9} claims of {args.batch}: median cycle "
              f"{median:,.0f} µs ({len(took[variant])} cycles){ratio}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
