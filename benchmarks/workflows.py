"""Workflows, measured on each backend (issue #38's figures):

* enqueue of a 10,000-step group and its callback: steps stored per second;
* fan-in latency with an idle worker waiting: from the last upstream step's
  completion (its ``finished_at``, storage's clock, on this host) to the
  callback's start (its handler's ``time.time()``), over many small workflows;
* a chain of 1,000 one-step links: seconds per link beyond the handlers' own
  time (the handlers do nothing).

    .venv/bin/python benchmarks/workflows.py [--backend sqlite] [--fan-ins 200]
        [--links 1000] [--group 10000] [--rounds 3]

One ``tenure worker`` (process pool, its defaults) serves the ``flows`` queue.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import tenure  # noqa: E402
from harness.stores import throwaway_url  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(backend: str, args: argparse.Namespace) -> dict[str, float]:
    with throwaway_url(backend, "workflows") as url:
        os.environ["BENCH_URL"] = url  # the tasks' module makes its App of it
        t = importlib.reload(importlib.import_module("workflow_tasks"))
        rates = []
        for _ in range(args.rounds):
            flow = tenure.chain(tenure.group(*(t.noop.step() for _ in range(args.group))),
                                t.noop.step())  # fmt: skip
            began = time.perf_counter()
            run = t.app.workflow(flow)
            rates.append((args.group + 1) / (time.perf_counter() - began))
            t.app.cancel(run.id)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
        worker = subprocess.Popen(
            [sys.executable, "-m", "tenure.cli", "worker", "workflow_tasks:app",
             "--queue", "flows"], env=env, cwd=HERE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            t.app.result(t.app.workflow(tenure.chain(t.noop.step())).id, timeout=60)  # warm
            latencies = []
            for _ in range(args.fan_ins):
                run = t.app.workflow(tenure.chain(tenure.group(t.noop.step(), t.noop.step()),
                                                  t.stamp.step()))  # fmt: skip
                started = t.app.result(run.id, timeout=60)
                ups = [j for j in t.app.get_workflow(run.id).jobs if j.task == "noop"]
                latencies.append(started - max(j.finished_at or 0.0 for j in ups))
            chain = tenure.chain(*(t.noop.step() for _ in range(args.links)))
            began = time.perf_counter()
            t.app.result(t.app.workflow(chain).id, timeout=600)
            per_link = (time.perf_counter() - began) / args.links
        finally:
            worker.terminate()
            worker.wait(60)
            t.app.close()
    return {
        "enqueue steps/s": statistics.median(rates),
        "fan-in p50 ms": 1000 * percentile(latencies, 0.5),
        "fan-in p99 ms": 1000 * percentile(latencies, 0.99),
        "chain ms/link": 1000 * per_link,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgres", "redis"])
    parser.add_argument("--fan-ins", type=int, default=200)
    parser.add_argument("--links", type=int, default=1000)
    parser.add_argument("--group", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for backend in args.backend or ["sqlite", "postgres", "redis"]:
        figures = measure(backend, args)
        shown = ", ".join(f"{k} {v:,.1f}" for k, v in figures.items())
        print(f"{backend}: {shown}", flush=True)


if __name__ == "__main__":
    main()
