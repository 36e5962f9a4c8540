"""A fleet of idle `tenure worker` processes on one PostgreSQL, measured from the server.

    .venv/bin/python benchmarks/pg_fleet.py [idle] [--workers 1,16,100] [--settle 20]
        [--window 30] [--rounds 3] [--tree main=/tmp/main/src --tree new=src]
    .venv/bin/python benchmarks/pg_fleet.py drain [--workers 1,4,16] [--jobs 20000] [--rounds 3]
        [--started]

``idle``: N default workers (thread pool, default concurrency) drain 20 jobs each,
then idle for ``--settle`` seconds; over ``--window`` seconds: the
connections each holds (``pg_stat_activity``, by ``application_name``), the
server's transactions a second per worker (``pg_stat_database``:
``xact_commit + xact_rollback``, this script's own few left out), the CPU of
the server's processes (``/proc`` ticks of the postmaster and its children),
and then the pickup latency of ten jobs enqueued a second apart (enqueue to
start, by the server's clock). Issue 40, parts 1 and 2; the figures are in
docs/benchmarks.md.

``drain`` (issue 40, part 7): as ``redis_fleet.py drain``, on PostgreSQL:
20,000 no-op jobs queued beforehand, drained by N default workers
(``--burst``); the server's CPU per job (the postmaster and every backend,
those that ended included) and the drain rate (first to last completion),
rounds alternating N. With ``--started``, the workers start first, on the
queue paused, and the server's CPU from its resume to the drain's end is
reported beside it (``drain only``: without the workers' start and stop).

With ``--tree NAME=SRC`` (repeated), each round measures the workers of
each tree in turn (their order alternating from round to round), on one
server: before and after, in the same run.

It starts its own PostgreSQL (``tests/servers.py``) on a random port.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
from redis_fleet import cpu_seconds, drain, pickups, report, wait, workers
from tests.servers import PostgresServer, children

from tenure import App, State

OUR_QUERIES = 3  # the transactions of one reading of the counters below


def transactions(server: PostgresServer, database: str) -> int:
    return int(server.psql(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database "
        f"WHERE datname = '{database}'"
    ))  # fmt: skip


def server_cpu(server: PostgresServer) -> float:
    """The CPU seconds of the postmaster, of its children that ended (which it
    reaped: cutime, cstime) and of those that run (psql's own come and go)."""
    with open(f"/proc/{server.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    total = sum(int(t) for t in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    for pid in children(server.pid):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # ended: counted above
            total += cpu_seconds(pid)
    return total


def unfinished(conn: psycopg.Connection[Any]) -> Callable[[str], bool]:
    """Whether a queue has jobs queued or active, read through one connection
    (a psql each time would start a backend)."""

    def queued(queue: str) -> bool:
        row = conn.execute("SELECT EXISTS (SELECT FROM tenure.jobs WHERE queue = %s "
                           "AND state IN ('queued', 'active'))", [queue]).fetchone()  # fmt: skip
        return bool(row and row[0])

    return queued


def connections(server: PostgresServer, database: str) -> Counter[str]:
    rows = server.psql(
        "SELECT application_name, count(*) FROM pg_stat_activity "
        f"WHERE datname = '{database}' AND pid <> pg_backend_pid() GROUP BY 1"
    )
    return Counter({name: int(n) for name, _, n in (r.rpartition("|") for r in rows.splitlines())})


def idle(
    server: PostgresServer, n: int, settle: float, window: float, src: str = ""
) -> dict[str, float]:
    url = server.new_database()
    database = url.rsplit("/", 1)[1]
    queue = f"fleet.{uuid.uuid4().hex[:8]}"
    with App(url) as app, workers(url, queue, n, "--pool", "thread", src=src):
        wait("the workers", lambda: len(app.workers()) >= n)
        app.enqueue_many("fleet.noop", [{}] * (20 * n), queue=queue)
        wait("the drain", lambda: app.queue(queue).counts()[State.COMPLETED] == 20 * n)
        app.close()  # the producer's own connections are no part of the fleet
        time.sleep(settle)
        held = connections(server, database)
        cpu, tx, began = server_cpu(server), transactions(server, database), time.monotonic()
        time.sleep(window)
        tx = transactions(server, database) - tx - OUR_QUERIES
        elapsed = time.monotonic() - began
        cpu = (server_cpu(server) - cpu) / elapsed
        picked = pickups(url, queue)
    print(f"  connections by application_name: {dict(held)}")
    return {
        "connections per worker": sum(held.values()) / n,
        "transactions/s per worker": tx / elapsed / n,
        "server CPU % of a core": cpu * 100,
        "pickup p50 ms": statistics.median(picked),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("what", nargs="?", choices=["idle", "drain"], default="idle")
    parser.add_argument("--workers", default="")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--settle", type=float, default=20.0)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--tree", action="append", default=[], help="NAME=SRC, repeated")
    parser.add_argument(
        "--started",
        action="store_true",
        help="drain: count the drain alone too, the workers started first",
    )
    args = parser.parse_args()
    trees = [tuple(t.split("=", 1)) for t in args.tree] or [("", "")]
    default = "1,4,16" if args.what == "drain" else "1,16,100"
    results: dict[str, list[dict[str, float]]] = {}
    server = PostgresServer()
    try:
        for r in range(args.rounds):
            for n in [int(n) for n in (args.workers or default).split(",")]:
                if args.what == "drain":
                    url = server.new_database()
                    with psycopg.connect(url, autocommit=True) as conn:
                        figures = drain(
                            url,
                            n,
                            args.jobs,
                            lambda: server_cpu(server),
                            unfinished(conn) if args.started else None,
                        )
                    print(f"{n} workers: {figures}", flush=True)
                    results.setdefault(f"{n} workers", []).append(figures)
                    continue
                for name, src in trees[r % 2 :] + trees[: r % 2]:
                    figures = idle(server, n, args.settle, args.window, src)
                    label = f"{name} {n} workers".strip()
                    print(f"{label}: {figures}", flush=True)
                    results.setdefault(label, []).append(figures)
    finally:
        server.close()
    report(args.what, results, "server CPU ms per job" if args.what == "drain" else "")


if __name__ == "__main__":
    main()
