"""The job of the defaults table on its own, with no job queue: what every
library's worker pays per job whatever it is (the side-channel record and one
Redis ``INCR``), so that the CPU left for the library itself can be told.

    .venv/bin/python benchmarks/job_floor.py [--jobs 20000] [--rounds 3]

In one process, ``--jobs`` times: ``records.record(i)`` then
``counter.incr()`` (redis-py, as the sync handlers of tenure, Dramatiq and
Huey), and again with ``counter.aincr()`` on an event loop (redis-py's
asyncio client, as PgQueuer's and the other asyncio libraries' handlers), on
a Redis server of its own. Prints the CPU per job of this process ("client")
and of the Redis server, the median of the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import counter, records  # noqa: E402
from harness.proc import cpu_seconds  # noqa: E402
from harness.stores import Servers  # noqa: E402


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def sync_jobs(n: int) -> None:
    for i in range(n):
        records.record(i)
        counter.incr()


async def async_jobs(n: int) -> None:
    for i in range(n):
        records.record(i)
        await counter.aincr()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="job-floor-"))
    servers = Servers(work)
    try:
        store = servers.fresh("redis", 15)
        os.environ["BENCH_RECORDS"] = str(work)
        os.environ["BENCH_COUNTER"] = store.url
        runs = {
            "sync": lambda: sync_jobs(args.jobs),
            "asyncio": lambda: asyncio.run(async_jobs(args.jobs)),
        }
        seen: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
        runs["sync"]()  # warm up: imports, connections
        runs["asyncio"]()
        for _ in range(args.rounds):
            for name, run in runs.items():
                server, client = cpu_seconds(store.server_pids), own_cpu()
                run()
                seen[name].append((own_cpu() - client, cpu_seconds(store.server_pids) - server))
        for name, pairs in seen.items():
            client = statistics.median(c for c, _ in pairs) / args.jobs * 1000
            server = statistics.median(s for _, s in pairs) / args.jobs * 1000
            print(f"{name:8} client {client:.3f} ms/job, Redis server {server:.3f} ms/job, "
                  f"together {client + server:.3f}")  # fmt: skip
    finally:
        servers.close()


if __name__ == "__main__":
    main()
