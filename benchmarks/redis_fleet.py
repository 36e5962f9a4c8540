"""A fleet of `tenure worker` processes on one Redis, measured from the server.

    .venv/bin/python benchmarks/redis_fleet.py idle [--workers 1,10,50] [--window 30]
    .venv/bin/python benchmarks/redis_fleet.py drain [--workers 1,4,16] [--jobs 20000] [--rounds 3]
    .venv/bin/python benchmarks/redis_fleet.py wait [--jobs 5000] [--rounds 3]

``idle``: N workers (thread pool, concurrency 1: the server's cost of a
worker does not depend on its pool) drain 20 jobs each, then idle for
``--settle`` seconds; over ``--window`` seconds: clients each holds
(``CLIENT LIST``), commands a second each (``INFO commandstats``, the
commands scripts run counted, this script's own left out), the server's CPU
(``/proc``), and then the pickup latency of ten jobs enqueued a second apart
(enqueue to claim, by Redis's clock).

``drain`` (issue 40, part 7): 20,000 no-op jobs queued beforehand, drained by
N default workers (``--burst``); the server's CPU per job and the drain rate
(first to last completion), rounds alternating N.

``wait``: the drain of one default worker against a primary with one
replica, without and with ``?wait_replicas=1`` (rounds alternating): the
cost of waiting for the replica.

Each starts its own redis-server (``tests/servers.py``) on a random port.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import redis  # noqa: E402
from tests.servers import RedisServer  # noqa: E402

from tenure import App, State  # noqa: E402

OURS = {"cmdstat_info", "cmdstat_config|resetstat", "cmdstat_client|list"}


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def workers(
    url: str, queue: str, n: int, *args: str, src: str = ""
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """N workers of ``queue``, running tenure from ``src`` if given (another tree's)."""
    path = os.pathsep.join(filter(None, [src, str(HERE)]))
    env = {**os.environ, "TENURE_URL": url, "PYTHONPATH": path}
    command = [sys.executable, "-m", "tenure.cli", "worker", "fleet_tasks:app",
               "--queue", queue, "--log-level", "error", *args]  # fmt: skip
    procs = [subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def wait(what: str, predicate: Callable[[], bool], timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def pickups(url: str, queue: str) -> list[float]:
    """Milliseconds from enqueue to start of ten jobs enqueued a second apart
    (storage's clock), for idle workers of ``queue``."""
    found = []
    with App(url) as producer:
        for _ in range(10):
            time.sleep(1.0)
            job = producer.enqueue("fleet.noop", {}, queue=queue)
            wait("a pickup", lambda j=job: producer.get_job(j.id).state is State.COMPLETED)
            done = producer.get_job(job.id)
            found.append((done.history[0].started_at - done.created_at) * 1000)
    return found


def idle(server: RedisServer, n: int, settle: float, window: float) -> dict[str, float]:
    admin = redis.Redis(port=server.port)
    queue = f"fleet.{uuid.uuid4().hex[:8]}"
    assert server.proc is not None
    with App(server.url) as app, workers(server.url, queue, n, "--pool", "thread",
                                         "--concurrency", "1"):  # fmt: skip
        wait("the workers", lambda: len(app.call(app.backend.workers())) >= n)
        app.enqueue_many("fleet.noop", [{}] * (20 * n), queue=queue)
        wait("the drain", lambda: app.queue(queue).counts()[State.COMPLETED] == 20 * n)
        app.close()  # the producer's own connection is no part of the fleet
        time.sleep(settle)
        clients = len(admin.client_list(_type="normal")) - 1
        admin.config_resetstat()
        cpu, began = cpu_seconds(server.proc.pid), time.monotonic()
        time.sleep(window)
        stats = admin.info("commandstats")
        elapsed = time.monotonic() - began
        cpu = (cpu_seconds(server.proc.pid) - cpu) / elapsed
        calls = sum(v["calls"] for k, v in stats.items() if k not in OURS)
        if os.environ.get("FLEET_DETAIL"):
            print({k[8:]: round(v["calls"] / elapsed, 2) for k, v in stats.items()})
        picked = pickups(server.url, queue)
    return {
        "clients per worker": clients / n,
        "commands/s per worker": calls / elapsed / n,
        "server CPU % of a core": cpu * 100,
        "pickup p50 ms": statistics.median(picked),
    }


def drain(
    url: str,
    n: int,
    jobs: int,
    server_cpu: Callable[[], float],
    queued: Callable[[str], bool] | None = None,
) -> dict[str, float]:
    """N default workers (``--burst``) drain ``jobs`` no-op jobs queued beforehand:
    the server's CPU per job (``server_cpu``, seconds) and the drain rate, from
    the first completion to the last. Nothing asks storage anything meanwhile
    (a count of a PostgreSQL queue's jobs reads them all: polled, it was a
    third of the server's work in a long drain); the completions' times are
    read once the workers have exited.

    With ``queued`` (whether a queue still has jobs queued or active, asked
    cheaply), the workers start on the queue paused and idle; the server's CPU
    is counted from the resume to the drain's end, as ``drain only``: what the
    jobs cost, without the workers' start and stop. Without jobs: the
    server's CPU per worker, what a worker's start and stop cost it."""
    queue = f"fleet.{uuid.uuid4().hex[:8]}"
    with App(url) as app:
        if queued is not None:
            app.queue(queue).pause()
        for i in range(0, jobs, 10_000):
            app.enqueue_many("fleet.noop", [{}] * min(10_000, jobs - i), queue=queue)
        cpu = server_cpu()
        only = 0.0
        with workers(url, queue, n, *(() if queued else ("--burst",))) as procs:
            if queued is not None:
                wait("the workers", lambda: len(app.workers()) >= n)
                time.sleep(2.0)  # their starts (connections, first sweeps) over
                only = server_cpu()
                app.queue(queue).resume()
                while queued(queue):
                    time.sleep(0.05)
                only = server_cpu() - only
                for p in procs:
                    p.terminate()
            while any(p.poll() is None for p in procs):
                time.sleep(0.05)
        cpu = server_cpu() - cpu
        finished, after = [], None
        while True:
            page = app.queue(queue).jobs(State.COMPLETED, limit=10_000, after=after)
            finished += [j.finished_at for j in page.jobs if j.finished_at is not None]
            if (after := page.next_cursor) is None:
                break
        assert len(finished) == jobs, f"{len(finished)} of {jobs} jobs completed"
        app.queue(queue).delete()
    if not jobs:  # what a worker's start and stop cost the server
        return {"server CPU ms per worker": cpu / n * 1000}
    rate = (jobs - 1) / max(max(finished) - min(finished), 1e-3)
    figures = {"server CPU ms per job": cpu / jobs * 1000, "drain jobs/s": rate}
    if queued is not None:
        figures["drain only: server CPU ms per job"] = only / jobs * 1000
    return figures


def report(title: str, results: dict[str, list[dict[str, float]]], ratio_of: str = "") -> None:
    """Each figure's median [range] over the rounds; with ``ratio_of``, that
    figure of each row against the first row's, round by round (a ratio of
    medians moves with the one round that stood out), and its ``drain only``
    twin's."""
    print(f"\n{title}: median [range] of {len(next(iter(results.values())))} round(s)")
    for n, rounds in results.items():
        cells = []
        for key in rounds[0]:
            values = [r[key] for r in rounds]
            cells.append(f"{key} {statistics.median(values):.3g} "
                         f"[{min(values):.3g}-{max(values):.3g}]")  # fmt: skip
        print(f"  {n}: " + "; ".join(cells))
    if not ratio_of:
        return
    (base, firsts), *rest = results.items()
    for key in (k for k in firsts[0] if k.endswith(ratio_of)):  # "drain only: " too
        for n, rounds in rest:
            ratios = [r[key] / f[key] for r, f in zip(rounds, firsts, strict=True)]
            spread = f"{statistics.median(ratios):.3g} [{min(ratios):.3g}-{max(ratios):.3g}]"
            print(f"  {n} / {base}, {key}, round by round: {spread}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("what", choices=["idle", "drain", "wait"])
    parser.add_argument("--workers", default="")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--settle", type=float, default=20.0)
    parser.add_argument("--window", type=float, default=30.0)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {}
    if args.what == "wait":
        from tests.servers_sentinel import SentinelGroup

        group = SentinelGroup()
        primary = group.procs[group.primary].pid
        try:
            for r in range(args.rounds):  # alternating, the order too
                for query in ("", "?wait_replicas=1")[:: 1 if r % 2 == 0 else -1]:
                    url = f"redis://127.0.0.1:{group.primary}/0{query}"
                    results.setdefault(query or "async", []).append(
                        drain(url, 1, args.jobs, lambda: cpu_seconds(primary))
                    )
        finally:
            group.close()
        report("one worker against a primary and a replica", results, "server CPU ms per job")
        return
    server = RedisServer()
    assert server.proc is not None
    pid = server.proc.pid
    try:
        ns = [int(n) for n in (args.workers or ("1,10,50" if args.what == "idle" else "1,4,16"))
              .split(",")]  # fmt: skip
        for _ in range(args.rounds):
            for n in ns:
                if args.what == "idle":
                    figures = idle(server, n, args.settle, args.window)
                else:
                    figures = drain(server.url, n, args.jobs, lambda: cpu_seconds(pid))
                print(f"{n} workers: {figures}", flush=True)
                results.setdefault(f"{n} workers", []).append(figures)
    finally:
        server.close()
    report(args.what, results, "server CPU ms per job" if args.what == "drain" else "")


if __name__ == "__main__":
    main()
