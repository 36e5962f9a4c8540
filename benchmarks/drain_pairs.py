"""Two trees' PostgreSQL drains at the same time, on one server: the "pairs"
method of docs/benchmarks.md (issue 42). On a machine shared with other work
drains run one after the other vary by up to 2x; two drains that run at once
see the same load, so each round gives a ratio that holds.

    python benchmarks/drain_pairs.py --tree base=/tmp/base/src --tree new=src
        [--rounds 3] [--jobs 60000] [--window 3] [--concurrency 4]
        [--delivery at-least-once] [--events on] [--statements]
        [--via new=pgbouncer]

Each round: each tree enqueues ``--jobs`` no-op jobs into a database of its
own (by ``enqueue_many``, 1,000 a call; timed: the bulk enqueue), then one
``tenure worker --pool thread`` of each starts at once; once both have
completed some jobs, a window of ``--window`` seconds counts each one's
completions, its worker's CPU and its server backends' CPU (``/proc`` ticks of
the backends connected to its database). A tree is a directory holding the
``tenure`` package (an export of another commit: ``git archive REV src``).
Ratios are second tree / first; medians [range] over the rounds.
``--via NAME=pgbouncer`` runs that tree's drain through PgBouncer in
transaction mode (``liveness_url`` to the server; its server connections are
the backends counted), ``--via NAME=unprepared`` directly but as behind one
(no prepared statements: ``liveness_url`` to the same server), for the cost of
each apart. ``--statements`` loads pg_stat_statements and prints each tree's top
statements (executor time and WAL per job) after the last round.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.servers import PgBouncer, PostgresServer

TICK = os.sysconf("SC_CLK_TCK")
APP = """
import os
import tenure

app = tenure.App(os.environ["PAIRS_URL"])


@app.task(name="noop", queue="bench")
def noop(i: int) -> None:
    pass
"""
ENQUEUE = """
import os, sys, time
from pairs_app import app
policy = {}
if os.environ["PAIRS_DELIVERY"] != "at-least-once":
    policy["delivery"] = os.environ["PAIRS_DELIVERY"]
if os.environ["PAIRS_EVENTS"] == "off":
    policy["events"] = False
if policy:
    app.queue("bench").set_policy(**policy)
n = int(sys.argv[1])
t = time.perf_counter()
for first in range(0, n, 1000):
    app.enqueue_many("noop", [{"i": i} for i in range(first, min(first + 1000, n))], queue="bench")
print(n / (time.perf_counter() - t))
app.close()
"""


def ticks(pid: int) -> int:
    """utime + stime of a process (and its threads), 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


class Tree:
    def __init__(self, name: str, src: Path, work: Path, via: str = "direct") -> None:
        self.name, self.src, self.work, self.via = name, src, work, via
        self.url = self.direct = ""  # the workers' URL; the database's own
        self.worker: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": f"{self.src}:{self.work}", "PAIRS_URL": self.url}

    def enqueue(self, args: Any) -> float:
        env = {**self.env(), "PAIRS_DELIVERY": args.delivery, "PAIRS_EVENTS": args.events}
        done = subprocess.run([sys.executable, "-c", ENQUEUE, str(args.jobs)], env=env,
                              capture_output=True, text=True, check=True)  # fmt: skip
        return float(done.stdout.split()[-1])

    def start(self, args: Any) -> None:
        command = [sys.executable, "-m", "tenure.cli", "worker", "pairs_app:app", "--queue",
                   "bench", "--pool", "thread", "--concurrency", str(args.concurrency),
                   "--log-level", "warning"]  # fmt: skip
        self.worker = subprocess.Popen(command, env=self.env())

    def stop(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            self.worker.send_signal(signal.SIGINT)
            try:
                self.worker.wait(20)
            except subprocess.TimeoutExpired:
                self.worker.kill()
                self.worker.wait()


def sample(conn: psycopg.Connection[Any], tree: Tree) -> tuple[float, int, int, int]:
    """(time, completed jobs, worker ticks, server ticks) of one tree."""
    database = tree.direct.rsplit("/", 1)[1]
    pids = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
        (database,),
    ).fetchall()
    with psycopg.connect(tree.direct, autocommit=True) as own:
        done = own.execute(
            "SELECT count(*) FROM tenure.jobs WHERE queue = 'bench' AND state = 'completed'"
        ).fetchone()
    assert tree.worker is not None and done is not None
    server = sum(ticks(p) for (p,) in pids)
    return time.monotonic(), int(done[0]), ticks(tree.worker.pid), server


def url_via(bouncer: PgBouncer | None, direct: str, via: str) -> str:
    """The URL of database ``direct``, reached as ``via`` says (see --via)."""
    if via == "pgbouncer":
        assert bouncer is not None
        return bouncer.url(direct)
    return direct + (f"?liveness_url={direct}" if via == "unprepared" else "")


def one_round(
    server: PostgresServer, bouncer: PgBouncer | None, trees: list[Tree], args: Any
) -> dict[str, Any]:
    rates = {}
    for tree in trees:
        tree.direct = server.new_database()
        tree.url = url_via(bouncer, tree.direct, tree.via)
        if args.statements:
            server.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
                        tree.direct.rsplit("/", 1)[1])  # fmt: skip
        rates[tree.name] = tree.enqueue(args)
    with psycopg.connect(server.url(), autocommit=True) as conn:
        try:
            for tree in trees:
                tree.start(args)
            deadline = time.monotonic() + 60
            while min(sample(conn, t)[1] for t in trees) < args.jobs // 20:
                if time.monotonic() > deadline:
                    raise SystemExit("the workers did not start draining within 60 s")
                time.sleep(0.1)
            first = {t.name: sample(conn, t) for t in trees}
            time.sleep(args.window)
            last = {t.name: sample(conn, t) for t in trees}
        finally:
            for tree in trees:
                tree.stop()
    out: dict[str, Any] = {}
    for tree in trees:
        (t0, d0, w0, s0), (t1, d1, w1, s1) = first[tree.name], last[tree.name]
        jobs = d1 - d0
        if d1 >= args.jobs:
            print(f"  {tree.name}: drained before the window ended; raise --jobs", flush=True)
        out[tree.name] = {
            "rate": jobs / (t1 - t0),
            "worker_ms": (w1 - w0) / TICK * 1000 / max(jobs, 1),
            "server_ms": (s1 - s0) / TICK * 1000 / max(jobs, 1),
            "enqueue": rates[tree.name],
        }
    return out


def statements(server: PostgresServer, trees: list[Tree]) -> None:
    for tree in trees:
        with psycopg.connect(tree.direct, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT calls, total_exec_time, wal_bytes, rows, shared_blks_hit, "
                "left(regexp_replace(query, '\\s+', ' ', 'g'), 70) FROM pg_stat_statements "
                "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
                " ORDER BY total_exec_time DESC LIMIT 6"
            ).fetchall()
        print(f"{tree.name}: calls, exec ms, WAL bytes, rows, buffers hit, statement")
        for calls, ms, wal, n, hit, query in rows:
            print(f"  {calls:7d} {ms:9.1f} {int(wal):11d} {n:8d} {hit:9d}  {query}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=DIR, twice")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=60000)
    parser.add_argument("--window", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--delivery", default="at-least-once")
    parser.add_argument("--events", default="on", choices=["on", "off"])
    parser.add_argument("--statements", action="store_true")
    parser.add_argument("--via", action="append", default=[],
                        help="NAME=pgbouncer or NAME=unprepared (default: direct)")  # fmt: skip
    args = parser.parse_args()
    via = dict(v.split("=", 1) for v in args.via)
    if len(args.tree) != 2:
        parser.error("two --tree NAME=DIR")
    work = Path(tempfile.mkdtemp(prefix="tenure-pairs-"))
    (work / "pairs_app.py").write_text(APP)
    trees = [Tree(n, Path(d).resolve(), work, via.get(n, "direct"))
             for n, d in (t.split("=", 1) for t in args.tree)]  # fmt: skip
    server = PostgresServer()
    bouncer = PgBouncer(server) if "pgbouncer" in via.values() else None
    if args.statements:
        server.stop()
        conf = server.data / "postgresql.conf"
        conf.write_text(conf.read_text() + "\nshared_preload_libraries = 'pg_stat_statements'\n"
                        "pg_stat_statements.track_planning = off\n")  # fmt: skip
        server.start()
    results = []
    try:
        for k in range(args.rounds):
            order = trees if k % 2 == 0 else trees[::-1]
            load = os.getloadavg()[0]
            got = one_round(server, bouncer, order, args)
            results.append(got)
            print(f"round {k + 1} (load {load:.1f}): " + "; ".join(
                f"{n} {r['rate']:,.0f} jobs/s, worker {r['worker_ms']:.4f} ms/job, server "
                f"{r['server_ms']:.4f} ms/job, enqueue {r['enqueue']:,.0f}/s"
                for n, r in got.items()), flush=True)  # fmt: skip
        if args.statements:
            statements(server, trees)
    finally:
        for tree in trees:
            tree.stop()
        if bouncer is not None:
            bouncer.close()
        server.close()
    a, b = trees[0].name, trees[1].name
    print(f"{b} / {a}, medians [range] of {len(results)} rounds:")
    for figure in ("rate", "worker_ms", "server_ms", "enqueue"):
        ratios = [r[b][figure] / r[a][figure] for r in results if r[a][figure]]
        print(f"  {figure:10s} {statistics.median(ratios):.3f} "
              f"[{min(ratios):.3f}-{max(ratios):.3f}]")  # fmt: skip


if __name__ == "__main__":
    main()
