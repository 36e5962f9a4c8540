"""Retention at scale: do a million finished jobs slow claims, and what does
pruning them cost the server?

    python benchmarks/retention.py [--backends postgres,sqlite,redis] [--finished 1000000]

Starts throwaway servers (tests/servers.py). Per backend, on fresh storage:

1. the worker's cycle (complete the last batch, claim 10; one connection, one
   cycle at a time) over --jobs queued jobs, 3 times: the rate with no
   finished jobs stored;
2. --finished finished jobs are written straight into storage, as the
   backend stores them, two days old (SQL: one INSERT ... SELECT, then a
   checkpoint; Redis: a Lua loop, 5,000 jobs a call): the same cycles with
   them there; on Redis, used_memory per finished job;
3. Backend.prune(1000) until none is due, while a cycle runs every 10 ms:
   each prune's time (p50, max) and the cycles' latency meanwhile; on Redis the
   longest prune.lua call by SLOWLOG (the server's own time), then the memory
   that 100,000 more finished jobs, written and pruned, leave behind;
4. SQL: the cycles with and without the index the prune reads (jobs_finished),
   alternated twice: what the index costs each completion.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.stores import throwaway_url
from tenure.backends import Backend, from_url
from tenure.backends.base import WorkerInfo
from tenure.backends.postgres import PostgresBackend
from tenure.backends.redis import RedisBackend
from tenure.backends.redis.scripts import SCRIPTS
from tenure.backends.sqlite import SQLiteBackend
from tenure.job import JobSpec

QUEUE, WORKER, BATCH = "bench", "bench", 1000
AGE = 2 * 86_400.0  # finished two days ago: past keep_completed's default

PG_FILL = """
INSERT INTO tenure.jobs (id, queue, task, args, state, priority, run_at, created_at,
                         attempts, fence, worker, started_at, result, finished_at)
SELECT 'f' || g, %(queue)s, 't', '{"n": 1}', 'completed', 0, t, t, 1, 1, 'w', t, 'null', t
FROM generate_series(1, %(n)s) AS g,
     LATERAL (SELECT extract(epoch FROM now()) - %(age)s + g * 0.00001 AS t) AS c
"""
SQLITE_FILL = """
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?2)
INSERT INTO jobs (id, queue, task, args, state, priority, run_at, created_at, attempts,
                  fence, worker, started_at, result, finished_at)
SELECT 'f' || n, ?1, 't', '{"n": 1}', 'completed', 0, t, t, 1, 1, NULL, t, 'null', t
FROM (SELECT n, ?3 + n * 0.00001 AS t FROM g)
"""
# What complete.lua leaves of a job: its hash, one history entry, its entries
# in state:completed, all and retained:completed, and the fleet's id index.
REDIS_FILL = """
local p, fleet, first, n, t0 = KEYS[1], KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]),
  tonumber(ARGV[3])
for i = first, first + n - 1 do
  local id = string.format('f%026d', i)
  local t = string.format('%.17g', t0 + i * 0.00001)
  local seq = string.format('%d', math.floor((t0 + i * 0.00001) * 1000000))
  redis.call('HSET', p .. 'job:' .. id, 'id', id, 'task', 't', 'queue', ARGV[4],
    'args', '{"n":1}', 'priority', '0', 'run_at', t, 'created_at', t, 'seq', seq,
    'fence', '1', 'attempts', '1', 'stalls', '0', 'state', 'completed', 'result', 'null',
    'finished_at', t)
  redis.call('RPUSH', p .. 'history:' .. id, '{"attempt":1,"fence":1,"worker":"w",' ..
    '"started_at":"' .. t .. '","ended_at":"' .. t .. '","outcome":"completed"}')
  redis.call('ZADD', p .. 'state:completed', seq, id)
  redis.call('ZADD', p .. 'all', seq, id)
  redis.call('ZADD', p .. 'retained:completed', t, id)
  redis.call('HSET', fleet, id, ARGV[4])
end
return n
"""


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


async def cycles(backend: Backend, jobs: int, pause: float = 0.0) -> tuple[float, list[float]]:
    """The worker's cycle until ``jobs`` jobs are claimed: jobs/s and each cycle's time."""
    items: list[tuple[str, int, bytes]] = []
    done, took = 0, []
    started = time.perf_counter()
    while done < jobs:
        t = time.perf_counter()
        _, claimed = await backend.complete_and_claim(items, WORKER, [QUEUE], 10)
        took.append(time.perf_counter() - t)
        if not claimed:
            raise SystemExit("out of queued jobs: raise --queued")
        items = [(j.id, j.fence, b"null") for j in claimed]
        done += len(claimed)
        if pause:
            await asyncio.sleep(pause)
    await backend.complete_many(items)
    return done / (time.perf_counter() - started), took


async def rate(backend: Backend, jobs: int) -> tuple[float, float]:
    """Over 3 runs: the median rate, and the median cycle's time (steadier on a
    shared machine: a burst of others' work moves a rate more than a median)."""
    runs = [await cycles(backend, jobs) for _ in range(3)]
    return statistics.median(r for r, _ in runs), statistics.median(t for _, ts in runs for t in ts)


async def fill(backend: Backend, n: int) -> None:
    """``n`` completed jobs, ``AGE`` seconds old, written straight into storage."""
    if isinstance(backend, PostgresBackend):
        async with backend.db.tx() as conn:
            await conn.execute(PG_FILL, {"queue": QUEUE, "n": n, "age": AGE})
        # What autovacuum does next, and the checkpoint a million rows bring:
        # the cycles that follow are measured apart from the fill's aftermath.
        async with backend.db.conn() as conn:
            await conn.execute("VACUUM ANALYZE tenure.jobs")
            await conn.execute("CHECKPOINT")
    elif isinstance(backend, SQLiteBackend):
        with sqlite3.connect(backend.path) as db:
            db.execute(SQLITE_FILL, (QUEUE, n, time.time() - AGE))
        checkpoint(backend)
    elif isinstance(backend, RedisBackend):
        t0 = float((await backend.runner.command("TIME"))[0]) - AGE
        keys = [backend.keys.queue(QUEUE), backend.keys.jobs]
        for first in range(0, n, 5000):
            count = min(5000, n - first)
            await backend.runner.command("EVAL", REDIS_FILL, 2, *keys, first, count, t0, QUEUE)


async def sql(backend: Backend, statement: str) -> None:
    if isinstance(backend, PostgresBackend):
        async with backend.db.tx() as conn:
            await conn.execute("SET LOCAL search_path TO tenure")
            await conn.execute(statement)
    elif isinstance(backend, SQLiteBackend):
        with sqlite3.connect(backend.path) as db:
            db.execute(statement)
        checkpoint(backend)


def checkpoint(backend: SQLiteBackend) -> None:
    """Fold a large write's WAL into the file: gradual writes never leave one
    of a million rows, and every page read looks it up (a third of the cycle's
    rate, measured, until a checkpoint)."""
    with sqlite3.connect(backend.path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


async def used_memory(backend: RedisBackend) -> int:
    return int((await backend.runner.command("INFO", "memory"))["used_memory"])


async def prune_all(backend: Backend) -> dict[str, Any]:
    """Prune until nothing is due, while a cycle runs every 10 ms."""
    redis = backend if isinstance(backend, RedisBackend) else None
    if redis is not None:
        for name, value in (("slowlog-log-slower-than", 0), ("slowlog-max-len", 100_000)):
            await redis.runner.command("CONFIG", "SET", name, value)
        await redis.runner.command("SLOWLOG", "RESET")
    stop = asyncio.Event()
    latencies: list[float] = []

    async def claims() -> None:
        while not stop.is_set():
            latencies.extend((await cycles(backend, 10, pause=0.01))[1])

    claiming = asyncio.create_task(claims())
    took, pruned = [], 0
    started = time.perf_counter()
    while True:
        t = time.perf_counter()
        n = await backend.prune(BATCH)
        took.append(time.perf_counter() - t)
        pruned += n
        if n < BATCH:
            break
    total = time.perf_counter() - started
    stop.set()
    await claiming
    found: dict[str, Any] = {
        "pruned": pruned, "calls": len(took), "total": total,
        "p50": statistics.median(took), "max": max(took),
        "cycle_p50": statistics.median(latencies),
        "cycle_p99": statistics.quantiles(latencies, n=100, method="inclusive")[98],
        "cycle_max": max(latencies),
    }  # fmt: skip
    if redis is not None:
        sha = SCRIPTS["prune"].sha.encode()
        log = await redis.runner.command("SLOWLOG", "GET", -1)
        found["script_max_us"] = max(e[2] for e in log if e[3][:2] == [b"EVALSHA", sha])
        for name, value in (("slowlog-log-slower-than", 10_000), ("slowlog-max-len", 128)):
            await redis.runner.command("CONFIG", "SET", name, value)
        await redis.runner.command("SLOWLOG", "RESET")  # its entries are memory too
    return found


@contextlib.asynccontextmanager
async def storage(kind: str) -> AsyncIterator[Backend]:
    with throwaway_url(kind, "retention") as url:
        backend = from_url(url)
        await backend.open()
        try:
            yield backend
        finally:
            await backend.close()


async def run(kind: str, finished: int, jobs: int, queued: int) -> None:
    async with storage(kind) as backend:
        await backend.register_worker(WorkerInfo(WORKER, "host", 0, (QUEUE,)))
        for first in range(0, queued, 10_000):
            await backend.enqueue([JobSpec.create("t", {"n": i}, queue=QUEUE)
                                   for i in range(first, min(first + 10_000, queued))])  # fmt: skip
        await cycles(backend, 2000)  # warm up: plans prepared, caches hot
        before = await rate(backend, jobs)
        memory = await used_memory(backend) if isinstance(backend, RedisBackend) else 0
        t = time.perf_counter()
        await fill(backend, finished)
        filled = time.perf_counter() - t
        line = f"{kind}: {finished:,} finished jobs written in {filled:.1f} s"
        if isinstance(backend, RedisBackend):
            line += (
                f", {(await used_memory(backend) - memory) / finished:.0f} B of used_memory each"
            )
        print(line, flush=True)
        after = await rate(backend, jobs)
        print(f"{kind}: cycle (complete + claim 10) {before[0]:,.0f} jobs/s, p50 {ms(before[1])}"
              f" with none finished; {after[0]:,.0f} jobs/s, p50 {ms(after[1])} with {finished:,}"
              f" ({after[0] / before[0]:.2f}x, p50 {after[1] / before[1]:.2f}x)",
              flush=True)  # fmt: skip
        p = await prune_all(backend)
        line = (f"{kind}: pruned {p['pruned']:,} in {p['calls']} calls of {BATCH}, "
                f"{p['total']:.1f} s; a call p50 {ms(p['p50'])}, max {ms(p['max'])}")  # fmt: skip
        if "script_max_us" in p:
            line += f" (prune.lua max {p['script_max_us'] / 1000:.2f} ms)"
        line += (f"; cycles meanwhile p50 {ms(p['cycle_p50'])}, p99 {ms(p['cycle_p99'])},"
                 f" max {ms(p['cycle_max'])}")  # fmt: skip
        print(line, flush=True)
        if isinstance(backend, RedisBackend):
            # Nothing else running: the memory a fill and its prune leave behind.
            before = await used_memory(backend)
            await fill(backend, 100_000)
            while await backend.prune(BATCH):
                pass
            left = await used_memory(backend) - before
            print(f"{kind}: 100,000 more written then pruned, nothing else running: used_memory "
                  f"{left / 1e3:+,.0f} kB against before", flush=True)  # fmt: skip
            return
        rates: dict[str, list[float]] = {"with": [], "without": []}
        for _ in range(2):
            rates["with"].append((await rate(backend, jobs))[0])
            await sql(backend, "DROP INDEX jobs_finished")
            rates["without"].append((await rate(backend, jobs))[0])
            await sql(backend, "CREATE INDEX jobs_finished ON jobs (queue, state, finished_at) "
                               "WHERE state IN ('completed', 'cancelled', 'dead')")  # fmt: skip
        w, wo = statistics.mean(rates["with"]), statistics.mean(rates["without"])
        print(f"{kind}: cycle with jobs_finished {w:,.0f} jobs/s, without {wo:,.0f} "
              f"({w / wo:.2f}x; runs {rates})", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="postgres,sqlite,redis")
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per cycle measurement")
    parser.add_argument("--queued", type=int, default=250_000)
    args = parser.parse_args()
    for kind in args.backends.split(","):
        asyncio.run(run(kind, args.finished, args.jobs, args.queued))


if __name__ == "__main__":
    main()
