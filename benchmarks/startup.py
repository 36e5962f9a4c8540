"""Start-up of the default worker: from ``tenure worker`` launched to its first
job's handler started, at several concurrencies (process pool, SQLite).

    .venv/bin/python benchmarks/startup.py [--concurrency 4 16 64] [--rounds 3]

Each round makes a fresh database holding one queued job and an app module that
appends a line to a file when it is imported, launches ``python -m tenure.cli
worker`` in its directory, and waits for the handler to write the time it
started. The time counts the interpreter's start-up, the imports, opening the
database and starting the executors. "imports" is how many times the app
module's top level ran in the worker's life. "cpu" is the CPU time the worker
process had used when its first job started, and "cpu, all" that of it and of
every process under it (executors, zygote): on a loaded machine they tell what
the start costs apart from the wait for a core. Set PYTHONPATH to measure another checkout's
``src``; the line "tenure from" says which one ran.

The worker reads its modules' bytecode from a cache the benchmark makes
(``PYTHONPYCACHEPREFIX``, in a temporary directory, filled by an untimed first
launch), as an installed package's is compiled once when it is installed. With
``--no-bytecode`` it compiles tenure's source at every launch instead, as it does
under ``PYTHONDONTWRITEBYTECODE=1`` from a checkout without ``__pycache__``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODULE = """
import time, tenure

with open({imports!r}, "a") as f:
    f.write("imported\\n")

app = tenure.App({url!r})

@app.task
def first() -> None:
    started = time.time()
    with open({started!r} + ".tmp", "w") as f:
        f.write(repr(started))
    __import__("os").replace({started!r} + ".tmp", {started!r})
"""

TIMEOUT = 120.0
TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    """CPU seconds (user and system) a process used so far; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def tree_of(pid: int) -> list[int]:
    """The process and every process under it."""
    tree = [pid]
    for parent in tree:
        for task in Path(f"/proc/{parent}/task").glob("*"):
            with contextlib.suppress(OSError):
                tree += [int(p) for p in (task / "children").read_text().split()]
    return tree


def one_round(concurrency: int, env: dict[str, str]) -> tuple[float, int, float, float]:
    """Seconds from launch to the first handler's start, the imports of the app,
    and the CPU seconds of the worker, and of its whole tree, by then."""
    import tenure

    with tempfile.TemporaryDirectory(prefix="tenure-startup-") as tmp:
        directory = Path(tmp)
        url = f"sqlite:///{directory / 'startup.db'}"
        imports, started = directory / "imports", directory / "started"
        (directory / "startup_app.py").write_text(
            MODULE.format(imports=str(imports), url=url, started=str(started))
        )
        with tenure.App(url) as producer:  # the database exists before the worker starts
            producer.enqueue("first", {})
        launched = time.time()
        worker = subprocess.Popen(
            [sys.executable, "-m", "tenure.cli", "worker", "startup_app:app",
             "--concurrency", str(concurrency), "--log-level", "warning"],
            cwd=directory, stdin=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + TIMEOUT
            while not started.exists():
                if worker.poll() is not None:
                    raise SystemExit(f"the worker exited with status {worker.returncode}")
                if time.monotonic() > deadline:
                    raise SystemExit(f"no job started within {TIMEOUT} s")
                time.sleep(0.002)
            cpu, cpu_all = cpu_of(worker.pid), sum(map(cpu_of, tree_of(worker.pid)))
            seconds = float(started.read_text()) - launched
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)
        return seconds, len(imports.read_text().splitlines()), cpu, cpu_all


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--no-bytecode", action="store_true", help="compile tenure's source at every launch"
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="tenure-pycache-") as cache:
        run(args.concurrency, args.rounds, worker_env(cache, cached=not args.no_bytecode))


def worker_env(cache: str, *, cached: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    if cached:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run(concurrencies: list[int], rounds: int, env: dict[str, str]) -> None:
    import tenure

    print(f"tenure from {Path(tenure.__file__).parent}")
    cached = "PYTHONPYCACHEPREFIX" in env
    print(f"bytecode: {'cached' if cached else 'compiled at every launch'}")
    one_round(concurrencies[0], env)  # untimed: fills the cache, warms the page cache
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("concurrency | median s |  min s |  max s | imports | cpu s | cpu s, all")
    print("----------- | -------- | ------ | ------ | ------- | ----- | ----------")
    for concurrency in concurrencies:
        results = [one_round(concurrency, env) for _ in range(rounds)]
        times = [r[0] for r in results]
        counts = ", ".join(map(str, sorted({r[1] for r in results})))
        cpu, cpu_all = (statistics.median(r[i] for r in results) for i in (2, 3))
        print(f"{concurrency:>11} | {statistics.median(times):>8.3f} | {min(times):>6.3f} | "
              f"{max(times):>6.3f} | {counts:>7} | {cpu:>5.2f} | {cpu_all:>10.2f}")  # fmt: skip
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
