"""Concurrency keys on SQLite (issue 39): what a drain costs with and without
per-key fields, and what a keyed claim costs at 10k, 100k and 1M queued jobs
across 10k keys.

    python benchmarks/sqlite_keys.py cost --base DIR [--rounds 5] [--jobs 20000]
        # a drain of a queue without per-key fields, this tree against the
        # tree in DIR (its src/), in alternating rounds, each in its own process
    python benchmarks/sqlite_keys.py keyed [--rounds 5] [--jobs 20000]
        # drains of jobs across 1,000 keys: unlimited, max_active_per_key=2, fair
    python benchmarks/sqlite_keys.py scale [--sizes 10000 100000 1000000]
        # median claim (10 jobs, completed in the next cycle) per size and policy

A drain is the worker's cycle alone (complete_and_claim, 10 at a time) in
one process, on a file in a temporary directory: the storage's cost, not a
worker's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BATCH = 10
KEYS = 10_000


async def _drain(path: str, jobs: int, keys: int, policy: dict[str, Any]) -> float:
    """Jobs per second of one drain of ``jobs`` (across ``keys`` keys, 0: none)."""
    from tenure.backends.base import WorkerInfo
    from tenure.backends.sqlite import SQLiteBackend
    from tenure.config import QueuePolicy
    from tenure.job import JobSpec

    backend = SQLiteBackend(path)
    await backend.open()
    if policy:
        await backend.set_policy("q", QueuePolicy(**policy))
    for start in range(0, jobs, 1000):
        extra = [
            {"concurrency_key": f"k{i % keys}"} if keys else {} for i in range(start, start + 1000)
        ]
        await backend.enqueue([JobSpec.create("t", {"i": start + n}, queue="q", **x)
                               for n, x in enumerate(extra)])  # fmt: skip
    await backend.register_worker(WorkerInfo("w", "host", 0, ("q",)))
    began = time.perf_counter()
    items: list[tuple[str, int, bytes]] = []
    done = 0
    while True:
        _, claimed = await backend.complete_and_claim(items, "w", ["q"], BATCH)
        items = [(j.id, j.fence, b"null") for j in claimed]
        if not claimed:
            break
        done += len(claimed)
    elapsed = time.perf_counter() - began
    await backend.close()
    assert done == jobs, (done, jobs)
    return jobs / elapsed


def drain_in_process(src: Path, jobs: int, keys: int, policy: str) -> float:
    """One drain in a process of its own, with ``src`` first on its path."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    args = [sys.executable, __file__, "drain", "--jobs", str(jobs), "--keys", str(keys)]
    out = subprocess.run([*args, "--policy", policy], env=env, check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    return float(out.split()[-1])


def spread(rates: list[float]) -> str:
    return f"{statistics.median(rates):,.0f}/s ({min(rates):,.0f}-{max(rates):,.0f})"


def cost(args: argparse.Namespace) -> None:
    trees = {"base": Path(args.base) / "src", "this": ROOT / "src"}
    rates: dict[str, list[float]] = {t: [] for t in trees}
    for _ in range(args.rounds):
        for tree, src in trees.items():
            rates[tree].append(drain_in_process(src, args.jobs, 0, ""))
    for tree in trees:
        print(f"{tree}: {spread(rates[tree])}")
    ratio = statistics.median(rates["this"]) / statistics.median(rates["base"])
    print(f"this / base: {ratio:.3f}")


def keyed(args: argparse.Namespace) -> None:
    policies = {"unlimited": "", "max_active_per_key=2": "max_active_per_key=2",
                "fair": "fair=1",
                "fair, max_active_per_key=2": "fair=1,max_active_per_key=2"}  # fmt: skip
    rates: dict[str, list[float]] = {p: [] for p in policies}
    for _ in range(args.rounds):
        for name, policy in policies.items():
            rates[name].append(drain_in_process(ROOT / "src", args.jobs, 1000, policy))
    base = statistics.median(rates["unlimited"])
    for name in policies:
        print(f"{name}: {spread(rates[name])}, {statistics.median(rates[name]) / base:.2f}x")


FILL = """
WITH RECURSIVE g(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM g WHERE i < ?2)
INSERT INTO jobs (id, queue, task, args, state, priority, run_at, created_at, concurrency_key)
SELECT 'j' || i, 'scale', 't', '{}', 'queued', 0, ?3 + i * 1e-6, ?3,
       'k' || CASE WHEN ?4 THEN i % ?5 ELSE i * ?5 / ?2 END
FROM g
"""


async def _scale(sizes: list[int], clustered: bool, rounds: int) -> None:
    import sqlite3

    from tenure.backends.base import WorkerInfo
    from tenure.backends.sqlite import SQLiteBackend
    from tenure.config import QueuePolicy

    policies = {"max_active_per_key=1": QueuePolicy(max_active_per_key=1),
                "fair": QueuePolicy(fair=True),
                "fair, max_active_per_key=1": QueuePolicy(fair=True, max_active_per_key=1),
                "rate_limit_per_key=1000": QueuePolicy(rate_limit_per_key=1000)}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/scale.db"
        backend = SQLiteBackend(path)
        await backend.open()
        await backend.register_worker(WorkerInfo("w", "host", 0, ("scale",)))
        for size in sizes:
            db = sqlite3.connect(path, isolation_level=None)
            db.execute("DELETE FROM jobs")
            began = time.perf_counter()
            db.execute(FILL, (1, size, time.time() - 1000, not clustered, KEYS))
            db.execute("ANALYZE")
            db.close()
            filled = time.perf_counter() - began
            line = [f"{size:>9,} jobs ({filled:.0f} s to fill)"]
            for name, policy in policies.items():
                await backend.set_policy("scale", policy)
                took = await _claims(backend, rounds)
                line.append(f"{name}: {took * 1e3:.2f} ms")
            print("; ".join(line), flush=True)
        await backend.close()


async def _claims(backend: Any, rounds: int) -> float:
    """The median cycle: claim 10, completing the 10 claimed before."""
    items: list[tuple[str, int, bytes]] = []
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        _, claimed = await backend.complete_and_claim(items, "w", ["scale"], BATCH)
        times.append(time.perf_counter() - began)
        items = [(j.id, j.fence, b"null") for j in claimed]
    await backend.complete_and_claim(items, "w", ["scale"], 0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("cost", "keyed", "drain"):
        p = sub.add_parser(name)
        p.add_argument("--rounds", type=int, default=5)
        p.add_argument("--jobs", type=int, default=20_000)
        p.add_argument("--keys", type=int, default=0)
        p.add_argument("--policy", default="")
        p.add_argument("--base")
    p = sub.add_parser("scale")
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--clustered", action="store_true", help="each key's jobs enqueued together")
    args = parser.parse_args()
    if args.command == "drain":
        policy = {k: int(v) for k, v in (f.split("=") for f in args.policy.split(",") if f)}
        with tempfile.TemporaryDirectory() as tmp:
            print(asyncio.run(_drain(f"{tmp}/drain.db", args.jobs, args.keys, policy)))
    elif args.command == "cost":
        cost(args)
    elif args.command == "keyed":
        keyed(args)
    else:
        asyncio.run(_scale(args.sizes, args.clustered, args.rounds))


if __name__ == "__main__":
    main()
