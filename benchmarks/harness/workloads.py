"""The workloads, each run the same way for every library.

* enqueue: ``one`` jobs one call at a time, then the rest of ``jobs`` with the
  library's bulk API in batches of ``batch`` (one by one where it has none).
* drain: those ``jobs`` no-op jobs, already queued, run by W worker processes;
  the rate is timed from the first handler start to the last (interpreter
  start-up is not counted), CPU is read from /proc between the same points.
* latency: one worker process; what it costs while idle (its CPU, and the
  calls its server serves, per second over ``idle_window`` seconds), idle
  pickup (enqueue one job into an idle worker, ``idle`` times) and end-to-end
  latency at a fixed ``rate``.
* kill9: two workers with the library's defaults, an 8 s handler, SIGKILL of
  the worker running it 2 s in; time until it starts again, capped.
* defaults: ``jobs`` jobs, each one Redis ``INCR`` (:mod:`harness.counter`),
  already queued, run by one worker started with the library's defaults (no
  concurrency or pool flags), timed as the drain; the counter must end at
  ``jobs``. The harness runs it in alternating rounds (``bench``).

Every run reads the side channel to check that every job ran (none lost).
"""

from __future__ import annotations

import os
import random
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import counter, records
from harness.driver import HERE, Driver
from harness.proc import Workers, cpu_seconds
from harness.stores import Servers, Store

# Where tenure is imported from: a copy of src/ made at the start of the run
# (see bench.freeze_tenure), so that edits to the tree during a run cannot mix
# versions; empty: the editable install.
SOURCE: list[str] = []


@dataclass(frozen=True)
class Scale:
    jobs: int = 20_000
    one: int = 2_000
    batch: int = 1_000
    concurrency: int = 4
    drain_cap: float = 240.0
    idle: int = 20
    idle_gap: float = 1.0
    idle_window: float = 5.0
    rate: float = 100.0
    steady: int = 2_000
    kill_handler: float = 8.0
    kill_after: float = 2.0
    kill_cap: float = 90.0
    # A library that recovers within kill_again_below is killed again, up to
    # kill_runs times in all, each time at a random point of a second later:
    # recovery waits for the next sweep (or poll), so one kill measures only
    # where it fell in that schedule.
    kill_runs: int = 5
    kill_again_below: float = 5.0
    rounds: int = 3  # of the defaults workload, every library once per round

    @classmethod
    def quick(cls) -> Scale:
        return cls(
            jobs=1_000,
            one=200,
            batch=500,
            drain_cap=45.0,
            idle=4,
            idle_gap=0.6,
            idle_window=2.0,
            steady=150,
            kill_handler=4.0,
            kill_after=1.0,
            kill_cap=15.0,
            kill_runs=2,
            rounds=1,
        )


@dataclass(frozen=True)
class Subject:
    """One library on one backend, in one configuration."""

    library: str
    backend: str
    module: str
    variant: str = ""
    env: dict[str, str] = field(default_factory=dict)
    workloads: tuple[str, ...] = ("enqueue", "drain", "latency", "kill9", "defaults")

    @property
    def id(self) -> str:
        return "/".join(x for x in (self.library, self.backend, self.variant) if x)


class Run:
    """One measurement: a clean store, a side channel, a driver, workers."""

    def __init__(
        self,
        subject: Subject,
        servers: Servers,
        work: Path,
        *,
        slot: int = 0,
        concurrency: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.subject = subject
        self.servers = servers
        self.store: Store = servers.fresh(subject.backend, slot)
        self.dir = work / f"{subject.id.replace('/', '-')}-{uuid.uuid4().hex[:6]}"
        self.records = self.dir / "records"
        self.records.mkdir(parents=True)
        self.env = {
            **os.environ,
            **subject.env,
            "PYTHONPATH": os.pathsep.join([str(HERE), *SOURCE]),
            "BENCH_URL": self.store.url,
            "BENCH_QUEUE": "bench",
            "BENCH_RECORDS": str(self.records),
            "TENURE_URL": self.store.url,
            **(env or {}),
        }
        if concurrency is not None:
            self.env["BENCH_CONCURRENCY"] = str(concurrency)
        self.concurrency = concurrency
        self.driver = Driver(subject.module, self.env, self.dir / "driver.log")
        self.workers = Workers(self.dir)

    def start_workers(self, n: int) -> None:
        argv = self.driver.call("command", concurrency=self.concurrency)
        for _ in range(n):
            self.workers.start(argv, self.env, HERE)

    def server_cpu(self) -> float:
        return cpu_seconds(self.store.server_pids)

    def wait_index(self, index: int, timeout: float, nth: int = 1) -> records.Record | None:
        """The ``nth`` start of job ``index`` once it happened, else None at ``timeout``."""
        deadline = time.monotonic() + timeout
        seen = -1
        while time.monotonic() < deadline:
            n = records.count(self.records)
            if n != seen:
                seen = n
                found = records.starts(self.records).get(index, [])
                if len(found) >= nth:
                    return found[nth - 1]
            time.sleep(0.002)
        return None

    def close(self) -> None:
        self.workers.close()
        self.driver.close()
        self.servers.release(self.store)


def enqueue_and_drain(
    subject: Subject, servers: Servers, work: Path, scale: Scale, workers: int
) -> dict[str, Any]:
    run = Run(subject, servers, work, concurrency=scale.concurrency)
    try:
        out: dict[str, Any] = {"workers": workers}
        t_one = run.driver.call("enqueue", start=0, stop=scale.one)
        out["enqueue_one"] = scale.one / t_one
        if run.driver.call("bulk_api"):
            t_bulk = run.driver.call("bulk", start=scale.one, stop=scale.jobs, batch=scale.batch)
            out["enqueue_bulk"] = (scale.jobs - scale.one) / t_bulk
        else:
            run.driver.call("enqueue", start=scale.one, stop=scale.jobs)
        out.update(_drain(run, scale, workers))
        if out.get("lost") == 0:
            out["verify"] = run.driver.call("verify", expected=scale.jobs)
        return out
    finally:
        run.close()


def drain_at_defaults(
    subject: Subject, servers: Servers, work: Path, scale: Scale
) -> dict[str, Any]:
    """One round of the defaults workload for one library; the counter is in
    Redis database 15, flushed first (the stores under test use 0 to 14)."""
    tally = servers.fresh("redis", 15)
    env = {"BENCH_TASK": "incr", "BENCH_COUNTER": tally.url}
    run = Run(subject, servers, work, concurrency=None, env=env)
    try:
        out: dict[str, Any] = {"defaults": run.driver.call("defaults"), "load": os.getloadavg()[0]}
        if run.driver.call("bulk_api"):
            run.driver.call("bulk", start=0, stop=scale.jobs, batch=scale.batch)
        else:
            run.driver.call("enqueue", start=0, stop=scale.jobs)
        out.update(_drain(run, scale, 1))
        starts = out["ran"] + out["duplicates"]  # a job run twice counts twice
        out["counter"] = _wait_counter(tally.url, starts, 10.0)
        # At the cap the worker runs on while the counter is read: no exact check.
        if out["counter"] != starts and not out["timeout"] and "error" not in out:
            out["error"] = f"{starts:,} handler starts, {out['counter']:,} INCRs (see {run.dir})"
        if out.get("lost") == 0:
            out["verify"] = run.driver.call("verify", expected=scale.jobs)
        return out
    finally:
        run.close()


def _wait_counter(url: str, expected: int, timeout: float) -> int:
    """The counter once it reached ``expected`` (the last ``INCR`` follows the
    last start record), or as it is at ``timeout``."""
    deadline = time.monotonic() + timeout
    while (value := counter.read(url)) < expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return value


def _drain(run: Run, scale: Scale, workers: int) -> dict[str, Any]:
    n = scale.jobs
    launched = time.time()
    run.start_workers(workers)
    started = time.monotonic()
    first: tuple[int, float, float] | None = None  # records, worker cpu, server cpu
    last_sample = 0.0
    done = 0
    while time.monotonic() - started < scale.drain_cap:
        count = records.count(run.records)
        if count and first is None:
            first = (count, run.workers.cpu(), run.server_cpu())
        if time.monotonic() - last_sample > 0.25:
            run.workers.sample()
            last_sample = time.monotonic()
        if count >= n:
            done = len(records.starts(run.records))
            if done >= n:
                break
        if run.workers.died():
            break
        time.sleep(0.01)
    end = (records.count(run.records), run.workers.cpu(), run.server_cpu())
    starts = records.starts(run.records)
    times = sorted(rs[0].t for rs in starts.values())
    out: dict[str, Any] = {
        "processes": run.workers.max_processes,
        "ran": len(starts),
        "lost": n - len(starts),
        "duplicates": sum(len(rs) - 1 for rs in starts.values()),
        "timeout": len(starts) < n,
    }
    if run.workers.died() and len(starts) < n:
        out["error"] = f"a worker exited (see {run.dir})"
    if len(times) > 1:
        out["drain"] = (len(times) - 1) / (times[-1] - times[0])
        out["first_start"] = times[0] - launched  # start-up: launch to the first handler
    if first is not None and end[0] > first[0]:
        jobs = end[0] - first[0]
        out["cpu_worker"] = (end[1] - first[1]) / jobs * 1000
        if run.store.server_pids:
            out["cpu_server"] = (end[2] - first[2]) / jobs * 1000
    return out


def latency(subject: Subject, servers: Servers, work: Path, scale: Scale) -> dict[str, Any]:
    run = Run(subject, servers, work, concurrency=scale.concurrency)
    try:
        run.start_workers(1)
        index = 0
        for _ in range(3):  # warm up: the worker is up and its connections made
            run.driver.call("one", i=index)
            if run.wait_index(index, 60.0) is None:
                return {"error": f"the worker never ran a job (see {run.dir})"}
            index += 1
        idle = _idle_cost(run, scale.idle_window)
        pickups = []
        for _ in range(scale.idle):
            time.sleep(scale.idle_gap)
            sent = run.driver.call("one", i=index)
            got = run.wait_index(index, 30.0)
            if got is None:
                return {"error": f"idle pickup: job {index} never ran (see {run.dir})"}
            pickups.append(got.t - sent)
            index += 1
        sent_at = run.driver.call("paced", start=index, n=scale.steady, rate=scale.rate)
        deadline = time.monotonic() + 60
        while len(records.starts(run.records)) < index + scale.steady:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        starts = records.starts(run.records)
        lat = [starts[index + k][0].t - t for k, t in enumerate(sent_at) if index + k in starts]
        return {
            **idle,
            "idle_p50": statistics.median(pickups),
            "idle_max": max(pickups),
            "e2e_p50": _pct(lat, 50),
            "e2e_p99": _pct(lat, 99),
            "rate": scale.rate,
            "lost": index + scale.steady - len(starts),
        }
    finally:
        run.close()


def _idle_cost(run: Run, window: float) -> dict[str, float]:
    """An idle worker's CPU (share of one core) and its server's calls per second."""
    time.sleep(1.0)  # past the backoff of the warm-up's last claim
    cpu, calls, began = run.workers.cpu(), run.servers.calls(run.store), time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - began
    out = {"idle_cpu": (run.workers.cpu() - cpu) / elapsed}
    after = run.servers.calls(run.store)
    if calls is not None and after is not None:
        out["idle_calls"] = (after - calls) / elapsed
    return out


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def kill9(
    subject: Subject, servers: Servers, work: Path, scale: Scale, slot: int
) -> dict[str, Any]:
    """The kill below, again at random points while the library recovers fast:
    the median and the worst time to run again."""
    out = _kill9_once(subject, servers, work, scale, slot, later=0.0)
    restarts = [out["restart"]] if out.get("recovered") else []
    while restarts and max(restarts) < scale.kill_again_below and len(restarts) < scale.kill_runs:
        again = _kill9_once(subject, servers, work, scale, slot, later=random.random())
        if not again.get("recovered") or not again.get("completed"):
            return again  # a loss on any kill is the result
        restarts.append(again["restart"])
    if restarts:
        out.update(restart=statistics.median(restarts), restart_max=max(restarts),
                   restarts=restarts)  # fmt: skip
    return out


def _kill9_once(
    subject: Subject, servers: Servers, work: Path, scale: Scale, slot: int, *, later: float
) -> dict[str, Any]:
    """Two workers with the library's defaults; SIGKILL the one running the job
    ``kill_after`` (plus ``later``) seconds into it."""
    run = Run(subject, servers, work, slot=slot, concurrency=None)
    try:
        run.start_workers(2)
        run.driver.call("one", i=1)  # warm up: a worker is up
        if run.wait_index(1, 60.0) is None:
            return {"error": f"no worker ran a job (see {run.dir})"}
        time.sleep(2.0)  # the other one too
        run.driver.call("sleep", i=0, seconds=scale.kill_handler)
        first = run.wait_index(0, 60.0)
        if first is None:
            return {"error": f"the job never started (see {run.dir})"}
        holder = run.workers.holder(first.pid)
        if holder is None:
            return {"error": "could not tell which worker runs the job"}
        time.sleep(max(0.0, first.t + scale.kill_after + later - time.time()))
        killed_at = time.time()
        run.workers.kill(holder)
        again = run.wait_index(0, scale.kill_cap, nth=2)
        if again is None:
            return {"recovered": False, "cap": scale.kill_cap}
        out: dict[str, Any] = {"recovered": True, "restart": again.t - killed_at}
        ended = _wait_end(run, 0, scale.kill_handler + 30)
        out["completed"] = ended
        return out
    finally:
        run.close()


def _wait_end(run: Run, index: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r.index == index and r.event == records.ENDED for r in records.read(run.records)):
            return True
        time.sleep(0.05)
    return False
