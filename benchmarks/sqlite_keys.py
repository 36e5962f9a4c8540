"""Concurrency keys on SQLite (issue 39): what a drain costs with and without
per-key fields, and what a keyed claim costs at 10k, 100k and 1M queued jobs
across 10k keys.

    python benchmarks/sqlite_keys.py cost --base DIR [--rounds 5] [--jobs 20000]
        # a drain of a queue without per-key fields, this tree against the
        # tree in DIR (its src/), in alternating rounds, each in its own process
    python benchmarks/sqlite_keys.py keyed [--rounds 5] [--jobs 20000]
        # drains of jobs across 1,000 keys: unlimited, max_active_per_key=2, fair
    python benchmarks/sqlite_keys.py fairness --jobs 100000
        # key A has 100,000 jobs queued, then key B enqueues 10: A's starts
        # before B's 10 all started, fair and not
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
SINGLE = 2000  # jobs enqueued one at a time
KEYS = 10_000


async def _drain(
    path: str, jobs: int, keys: int, policy: dict[str, Any]
) -> tuple[float, float, float]:
    """Jobs per second of one drain of ``jobs`` (across ``keys`` keys, 0: none):
    per second of the wall clock, and per CPU second of the process (steadier
    on a machine shared with other work); and jobs enqueued one at a time per
    CPU second, before it."""
    from tenure.backends.base import WorkerInfo
    from tenure.backends.sqlite import SQLiteBackend
    from tenure.config import QueuePolicy
    from tenure.job import JobSpec

    backend = SQLiteBackend(path)
    await backend.open()
    if policy:
        await backend.set_policy("q", QueuePolicy(**policy))
    cpu = time.process_time()
    for i in range(SINGLE):
        await backend.enqueue([JobSpec.create("t", {"i": i}, queue="q")])
    enqueued = SINGLE / (time.process_time() - cpu)
    await backend.delete_queue("q")
    if policy:
        await backend.set_policy("q", QueuePolicy(**policy))
    for start in range(0, jobs, 1000):
        extra = [
            {"concurrency_key": f"k{i % keys}"} if keys else {} for i in range(start, start + 1000)
        ]
        await backend.enqueue([JobSpec.create("t", {"i": start + n}, queue="q", **x)
                               for n, x in enumerate(extra)])  # fmt: skip
    await backend.register_worker(WorkerInfo("w", "host", 0, ("q",)))
    began, cpu = time.perf_counter(), time.process_time()
    items: list[tuple[str, int, bytes]] = []
    done = 0
    while True:
        _, claimed = await backend.complete_and_claim(items, "w", ["q"], BATCH)
        items = [(j.id, j.fence, b"null") for j in claimed]
        if not claimed:
            break
        done += len(claimed)
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    await backend.close()
    assert done == jobs, (done, jobs)
    return jobs / elapsed, jobs / cpu, enqueued


def drain_in_process(src: Path, jobs: int, keys: int, policy: str) -> tuple[float, ...]:
    """One drain in a process of its own, with ``src`` first on its path."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    args = [sys.executable, __file__, "drain", "--jobs", str(jobs), "--keys", str(keys)]
    out = subprocess.run([*args, "--policy", policy], env=env, check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    return tuple(float(x) for x in out.split()[-3:])


def spread(rates: list[tuple[float, ...]]) -> str:
    walls, cpus = [r[0] for r in rates], [r[1] for r in rates]
    wall = f"{statistics.median(walls):,.0f}/s ({min(walls):,.0f}-{max(walls):,.0f})"
    return f"{wall}, {statistics.median(cpus):,.0f}/CPU s ({min(cpus):,.0f}-{max(cpus):,.0f})"


def ratios(rates: list[tuple[float, ...]], base: list[tuple[float, ...]]) -> str:
    wall, cpu, enqueue = (
        statistics.median(r[i] for r in rates) / statistics.median(b[i] for b in base)
        for i in range(3)
    )
    return f"{wall:.2f}x wall, {cpu:.2f}x CPU; enqueue one at a time {enqueue:.2f}x CPU"


def cost(args: argparse.Namespace) -> None:
    trees = {"base": Path(args.base) / "src", "this": ROOT / "src"}
    rates: dict[str, list[tuple[float, ...]]] = {t: [] for t in trees}
    for _ in range(args.rounds):
        for tree, src in trees.items():
            rates[tree].append(drain_in_process(src, args.jobs, 0, ""))
    for tree in trees:
        print(f"{tree}: {spread(rates[tree])}")
    print(f"this / base: {ratios(rates['this'], rates['base'])}")


def keyed(args: argparse.Namespace) -> None:
    policies = {"unlimited": "", "max_active_per_key=2": "max_active_per_key=2",
                "fair": "fair=1",
                "fair, max_active_per_key=2": "fair=1,max_active_per_key=2"}  # fmt: skip
    rates: dict[str, list[tuple[float, ...]]] = {p: [] for p in policies}
    for _ in range(args.rounds):
        for name, policy in policies.items():
            rates[name].append(drain_in_process(ROOT / "src", args.jobs, 1000, policy))
    for name in policies:
        print(f"{name}: {spread(rates[name])}; {ratios(rates[name], rates['unlimited'])}")


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

    policies = {"no per-key field": QueuePolicy(),
                "max_active_per_key=1": QueuePolicy(max_active_per_key=1),
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


async def _fairness(fair: bool, backlog: int) -> tuple[int, float]:
    """Key A has ``backlog`` jobs queued, then key B enqueues 10: how many of
    A's jobs start before B's 10 all did, and B's wait (s), in cycles of 10."""
    from tenure.backends.base import WorkerInfo
    from tenure.backends.sqlite import SQLiteBackend
    from tenure.config import QueuePolicy
    from tenure.job import JobSpec

    with tempfile.TemporaryDirectory() as tmp:
        backend = SQLiteBackend(f"{tmp}/fair.db")
        await backend.open()
        await backend.set_policy("q", QueuePolicy(fair=fair))
        for start in range(0, backlog, 1000):
            await backend.enqueue([JobSpec.create("t", {"i": i}, queue="q", concurrency_key="A")
                                   for i in range(start, min(start + 1000, backlog))])  # fmt: skip
        await backend.enqueue(
            [JobSpec.create("t", {"i": i}, queue="q", concurrency_key="B") for i in range(10)]
        )
        await backend.register_worker(WorkerInfo("w", "host", 0, ("q",)))
        began = time.perf_counter()
        items: list[tuple[str, int, bytes]] = []
        a_started = b_started = 0
        while b_started < 10:
            _, claimed = await backend.complete_and_claim(items, "w", ["q"], BATCH)
            items = [(j.id, j.fence, b"null") for j in claimed]
            b_started += sum(1 for j in claimed if j.concurrency_key == "B")
            a_started += sum(1 for j in claimed if j.concurrency_key == "A")
        waited = time.perf_counter() - began
        await backend.close()
    return a_started, waited


def fairness(args: argparse.Namespace) -> None:
    for fair in (True, False):
        a_started, waited = asyncio.run(_fairness(fair, args.jobs))
        print(f"fair={fair}: {a_started:,} of A's jobs started before B's 10 all did;"
              f" B waited {waited * 1e3:.1f} ms")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("cost", "keyed", "drain", "fairness"):
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
        policy: dict[str, Any] = {
            k: int(v) for k, v in (f.split("=") for f in args.policy.split(",") if f)
        }
        if "fair" in policy:
            policy["fair"] = bool(policy["fair"])
        with tempfile.TemporaryDirectory() as tmp:
            print(*asyncio.run(_drain(f"{tmp}/drain.db", args.jobs, args.keys, policy)))
    elif args.command == "cost":
        cost(args)
    elif args.command == "keyed":
        keyed(args)
    elif args.command == "fairness":
        fairness(args)
    else:
        asyncio.run(_scale(args.sizes, args.clustered, args.rounds))


if __name__ == "__main__":
    main()
