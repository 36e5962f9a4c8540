"""Worker CPU per job of the process pool, as the harness counts it, for
tenure source trees side by side: a no-op job (one record written, as every
library's) drained by ``tenure worker --burst`` at its defaults (process
pool, concurrency 4), rounds alternating between the trees; with ``--task
incr``, each job also one Redis ``INCR``, the job of the defaults table.

    .venv/bin/python benchmarks/pool_cpu.py --backend redis [--jobs 20000]
        [--rounds 3] [--concurrency 4] [--task incr] [--pool thread] [--tree NAME=SRC_DIR]...

Without ``--tree``, the installed tenure alone. CPU per job is the user+sys
time of the worker's process tree (supervisor and executors) from its first
record to its last, divided by the jobs recorded between (the harness's
``cpu_worker``); the drain rate is the harness's too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import records  # noqa: E402
from harness.proc import cpu_seconds  # noqa: E402
from harness.stores import Servers  # noqa: E402


def drain_once(
    servers: Servers,
    backend: str,
    src: str | None,
    *,
    jobs: int,
    concurrency: int,
    task: str,
    work: Path,
    pool: str = "process",
) -> dict[str, float]:
    store = servers.fresh(backend)
    recs = Path(tempfile.mkdtemp(prefix="records-", dir=work))
    path = [str(HERE)] + ([src] if src else [])
    env = {**os.environ, "BENCH_URL": store.url, "BENCH_QUEUE": "bench", "BENCH_TASK": task,
           "BENCH_RECORDS": str(recs), "PYTHONPATH": os.pathsep.join(path)}  # fmt: skip
    if task == "incr":  # the defaults workload's job: one Redis INCR (database 15)
        env["BENCH_COUNTER"] = servers.fresh("redis", 15).url
    producer = (
        "from peers.tenure_peer import Client\n"
        f"c = Client()\nfor s in range(0, {jobs}, 1000):\n"
        f"    c.enqueue_bulk(list(range(s, min(s + 1000, {jobs}))))\nc.close()\n"
    )
    subprocess.run([sys.executable, "-c", producer], env=env, check=True, cwd=HERE)
    argv = [sys.executable, "-m", "tenure.cli", "worker", "peers.tenure_peer:app", "--queue",
            "bench", "--burst", "--log-level", "warning", "--concurrency", str(concurrency),
            "--pool", pool]  # fmt: skip
    worker = subprocess.Popen(argv, env=env, cwd=HERE, stdin=subprocess.DEVNULL)
    first: tuple[int, float] | None = None
    try:
        while True:
            count = records.count(recs)
            if count and first is None:
                first = (count, cpu_seconds([worker.pid]))
            if count >= jobs or worker.poll() is not None:
                break
            time.sleep(0.005)
        end = (records.count(recs), cpu_seconds([worker.pid]))
        worker.wait(60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        servers.release(store)
    assert first is not None and end[0] >= jobs, f"drained {end[0]} of {jobs}"
    times = sorted(r.t for r in records.read(recs))
    return {
        "cpu_ms": (end[1] - first[1]) / (end[0] - first[0]) * 1000,
        "drain": (len(times) - 1) / (times[-1] - times[0]),
    }


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.4g} [{min(values):.4g}-{max(values):.4g}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["redis", "postgres", "sqlite"], default="redis")
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--task", choices=["noop", "incr"], default="noop",
                        help="incr: each job one Redis INCR, as in the defaults table")  # fmt: skip
    parser.add_argument("--pool", choices=["process", "thread"], default="process")
    parser.add_argument("--tree", action="append", default=[], help="NAME=SRC_DIR")
    args = parser.parse_args()
    trees: list[tuple[str, str | None]] = [
        (name, src) for name, _, src in (t.partition("=") for t in args.tree)
    ] or [("installed", None)]
    work = Path(tempfile.mkdtemp(prefix="pool-cpu-"))
    servers = Servers(work)
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    try:
        for round_ in range(args.rounds):
            for name, src in trees if round_ % 2 == 0 else trees[::-1]:
                r = drain_once(servers, args.backend, src, jobs=args.jobs,
                               concurrency=args.concurrency, task=args.task, work=work,
                               pool=args.pool)  # fmt: skip
                results[name].append(r)
                load = os.getloadavg()[0]
                print(f"round {round_} {name}: {r['cpu_ms']:.4f} ms/job, "
                      f"{r['drain']:.0f} jobs/s, load {load:.2f}", flush=True)  # fmt: skip
    finally:
        servers.close()
    out: dict[str, Any] = {}
    for name, rs in results.items():
        out[name] = (spread([r["cpu_ms"] for r in rs]), spread([r["drain"] for r in rs]))
        print(f"{args.backend} {name}: cpu ms/job {out[name][0]}; jobs/s {out[name][1]}")


if __name__ == "__main__":
    main()
