"""Where tenure's time goes: py-spy on a tenure worker draining queued no-op
jobs, or on the producer's bulk enqueue, on a throwaway server.

    benchmarks/.venv/bin/python benchmarks/profile_tenure.py --backend redis
        [--what drain|bulk|pickup] [--pool thread|process] [--jobs 20000] [--idle] [--gil]
        [--out profile.txt]

Prints, per thread, how busy it was and the functions with the most busy
samples (own and with callees), and writes the collapsed stacks (flamegraph
input) beside. ``--what pickup`` times an idle pickup's steps on the storage
side instead (enqueue, wake-up, claim, complete). Needs py-spy in the venv
(``benchmarks/.venv/bin/pip install py-spy``) and root or ptrace rights.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import records  # noqa: E402
from harness.driver import Driver  # noqa: E402
from harness.proc import Workers  # noqa: E402
from harness.stores import Servers  # noqa: E402

PY_SPY = str(Path(sys.executable).parent / "py-spy")


def py_spy(pid: int, collapsed: Path, *extra: str) -> subprocess.Popen[bytes]:
    """py-spy recording ``pid`` at 250 Hz into ``collapsed`` until SIGINT."""
    command = [PY_SPY, "record", "--pid", str(pid), "--format", "raw", "-o", str(collapsed)]
    return subprocess.Popen([*command, "--rate", "250", *extra])


IDLE_LEAVES = (
    "EpollSelector.select",
    "Condition.wait",
    "Event.wait",
    "Thread.join",
    "DaemonThreads._serve (tenure/threads.py:50)",
)


def _frame(raw: str, lines: bool) -> str:
    name, _, where = raw.partition(" (")
    if not where:
        return raw
    path, _, line = where.rstrip(")").rpartition(":")
    return f"{name} ({path}:{line})" if lines else f"{name} ({path.rsplit('/', 1)[-1]})"


def summarize(collapsed: Path, top: int) -> str:
    """Per thread: how busy it was, and where its busy samples went."""
    threads: dict[str, tuple[collections.Counter[str], collections.Counter[str]]] = {}
    sizes: collections.Counter[str] = collections.Counter()
    for line in collapsed.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        thread = next((f for f in frames if f.startswith("thread (")), "all")
        names = [f for f in frames if not f.startswith(("process ", "thread ("))]
        leaf = _frame(names[-1], lines=True) if names else "?"
        sizes[thread] += int(n)
        if any(leaf.startswith(i) for i in IDLE_LEAVES):
            continue
        own, total = threads.setdefault(thread, (collections.Counter(), collections.Counter()))
        own[_frame(names[-1], lines=False)] += int(n)
        for f in {_frame(x, lines=False) for x in names}:
            total[f] += int(n)
    out = []
    for thread, (own, total) in sorted(threads.items(), key=lambda t: -sum(t[1][0].values())):
        busy = sum(own.values())
        out += [f"{thread}: {busy} busy samples of {sizes[thread]}", "  own time:"]
        out += [f"    {n / busy:6.1%}  {f}" for f, n in own.most_common(top)]
        out += ["  with callees:"]
        out += [f"    {n / busy:6.1%}  {f}" for f, n in total.most_common(top * 2)]
        out.append("")
    return "\n".join(out)


async def _pickup(url: str, rounds: int) -> str:
    """Where an idle pickup's milliseconds go, storage side: enqueue, wake-up, claim,
    complete, timed one after the other on two backend objects (producer, worker)."""
    import asyncio
    import statistics

    from tenure.backends.base import WorkerInfo
    from tenure.backends.factory import from_url
    from tenure.job import JobSpec

    producer, worker = from_url(url), from_url(url)
    await producer.open()
    await worker.open()
    await worker.register_worker(WorkerInfo("profile", "host", os.getpid(), ("pickup",)))
    steps: dict[str, list[float]] = {"enqueue": [], "wake-up": [], "claim": [], "complete": []}
    try:
        for k in range(rounds + 3):
            waiting = asyncio.create_task(worker.wait_for_jobs(["pickup"], 5.0))
            await asyncio.sleep(0.3)  # idle
            t0 = time.perf_counter()
            await producer.enqueue([JobSpec.create("t", {}, queue="pickup")])
            t1 = time.perf_counter()
            await waiting
            t2 = time.perf_counter()
            [job] = await worker.claim("profile", ["pickup"], 4)
            t3 = time.perf_counter()
            await worker.complete(job.id, job.fence)
            t4 = time.perf_counter()
            if k >= 3:  # warmed up
                for name, dt in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                    steps[name].append(dt)
    finally:
        await worker.close()
        await producer.close()
    lines = [f"{rounds} idle pickups, storage side only (p50 / max, ms):"]
    for name, values in steps.items():
        lines.append(
            f"  {name:10} {statistics.median(values) * 1000:6.2f} / {max(values) * 1000:6.2f}"
        )
    lines.append("  (wake-up: from the enqueue's return to the idle worker's wait returning)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "redis"], default="redis")
    parser.add_argument("--what", choices=["drain", "bulk", "pickup"], default="drain")
    parser.add_argument("--pool", choices=["thread", "process"], default="thread")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--idle", action="store_true", help="count waiting threads too")
    parser.add_argument(
        "--gil", action="store_true", help="only samples holding the GIL: where Python's CPU goes"
    )
    parser.add_argument("--out", type=Path, default=Path("profile.txt"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tenure-profile-"))
    servers = Servers(work)
    collapsed = args.out.with_suffix(".collapsed")
    try:
        store = servers.fresh(args.backend)
        if args.what == "pickup":
            import asyncio

            text = asyncio.run(_pickup(store.url, 20))
            args.out.write_text(text + "\n")
            print(text)
            return
        (work / "records").mkdir()
        env = {
            **os.environ,
            "PYTHONPATH": str(HERE),
            "BENCH_URL": store.url,
            "BENCH_QUEUE": "bench",
            "BENCH_RECORDS": str(work / "records"),
            "BENCH_POOL": args.pool,
            "BENCH_CONCURRENCY": "4",
        }
        driver = Driver("peers.tenure_peer", env, work / "driver.log")
        if args.what == "bulk":
            spy = py_spy(driver.proc.pid, collapsed)
            time.sleep(1.0)
            for _ in range(5):
                driver.call("bulk", start=0, stop=args.jobs, batch=1000)
            spy.send_signal(signal.SIGINT)
            spy.wait()
        else:
            driver.call("bulk", start=0, stop=args.jobs, batch=1000)
            workers = Workers(work)
            workers.start(driver.call("command", concurrency=4), env, HERE)
            while records.count(work / "records") < 100:
                time.sleep(0.01)
            extra = [
                "--subprocesses",
                "--threads",
                *(["--idle"] if args.idle else []),
                *(["--gil"] if args.gil else []),
                *os.environ.get("PYSPY_EXTRA", "").split(),
            ]
            spy = py_spy(workers.pids[0], collapsed, *extra)
            while records.count(work / "records") < args.jobs * 0.9:
                time.sleep(0.05)
            spy.send_signal(signal.SIGINT)
            spy.wait()
            workers.close()
        driver.close()
    finally:
        servers.close()
    text = summarize(collapsed, args.top)
    args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
