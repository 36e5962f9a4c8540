"""``tenure bench``: tenure's throughput and latency on the configured backend.

Real ``tenure worker`` processes (``tenure.bench:app``) serve private queues
(``bench.<id>.*``) of the configured storage; the producer is this process.
Figures: enqueue one by one and in bulk, drain of already queued no-op jobs
with one and two worker processes, idle pickup latency, and end-to-end latency
at a fixed rate below saturation. Latency is from just before the enqueue call
to the handler's start (the handler returns its ``time.time()``), so producer
and workers should share a clock (one host).

The comparison with other libraries lives in ``benchmarks/`` of the source
tree; this measures tenure alone, so that users can compare on their hardware.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from tenure.app import App
from tenure.backends.checks import LIST_LIMIT
from tenure.core.states import State
from tenure.errors import TenureError

TASK = "tenure.bench.noop"
APP_PATH = "tenure.bench:app"
POLL = 0.02

app = App()  # the workers' App: it reads $TENURE_URL, which the bench sets for them


@app.task(name=TASK)
def noop() -> float:
    """The benchmark's job: nothing, but say when it ran."""
    return time.time()


Progress = Callable[[str, int, int], None]  # step, done, total


@dataclass(frozen=True)
class BenchConfig:
    """What ``tenure bench`` measures, and how much."""

    url: str
    jobs: int = 10_000
    one: int = 1_000
    batch: int = 1_000
    concurrency: int = 4
    pool: Literal["thread", "process"] = "thread"
    idle: int = 10
    idle_gap: float = 1.0
    rate: float = 100.0
    steady: int = 500
    cap: float = 300.0


@dataclass(frozen=True)
class Figure:
    """One line of the table; ``value`` is None when it could not be measured."""

    name: str
    value: float | None
    unit: str
    note: str = ""


class BenchFailed(TenureError):
    """A worker died, or jobs did not finish within the cap."""


class Bench:
    """One ``tenure bench`` run: workers, queues, and the figures it measures."""

    def __init__(self, config: BenchConfig, progress: Progress | None = None) -> None:
        self.config = config
        self.app = App(config.url)
        self.progress: Progress = progress or (lambda step, done, total: None)
        self.prefix = f"bench.{uuid.uuid4().hex[:8]}"
        self.workers: list[subprocess.Popen[bytes]] = []

    def run(self) -> list[Figure]:
        try:
            figures = self._throughput()
            figures += self._latency()
            self._stop_workers()
            figures.append(self._left())
        finally:
            self._stop_workers()
            self.app.close()
        return figures

    def _left(self) -> Figure:
        """What storage holds of the run: every job sent, completed (none lost)."""
        c = self.config
        sent = 2 * c.jobs + 1 + c.idle + c.steady  # the drains, a warm-up, the latencies
        queues = [f"{self.prefix}.{q}" for q in ("drain1", "drain2", "latency")]
        counts = [self.app.queue(q).counts() for q in queues]
        completed = sum(n[State.COMPLETED] for n in counts)
        note = f"queues {self.prefix}.*"
        if completed != sent:
            held = sum(sum(n.values()) for n in counts)
            note += f"; MISSING: {sent:,} sent, {held:,} stored, {completed:,} completed"
        return Figure("jobs completed, left in storage", completed, "", note)

    # -- throughput --------------------------------------------------------

    def _throughput(self) -> list[Figure]:
        c = self.config
        one, bulk, drains = [], [], []
        for workers in (1, 2):
            queue = f"{self.prefix}.drain{workers}"
            one.append(self._enqueue_one(queue, c.one))
            bulk.append(self._enqueue_bulk(queue, c.jobs - c.one))
            drains.append(self._drain(queue, workers))
        jobs = f"{c.jobs:,} no-op jobs, --pool {c.pool} --concurrency {c.concurrency}"
        return [
            Figure("enqueue, one by one", max(one), "jobs/s", f"{c.one:,} jobs, best of 2"),
            Figure("enqueue, bulk", max(bulk), "jobs/s", f"batches of {c.batch:,}, best of 2"),
            Figure("drain, 1 worker process", drains[0], "jobs/s", jobs),
            Figure("drain, 2 worker processes", drains[1], "jobs/s", jobs),
        ]

    def _enqueue_one(self, queue: str, n: int) -> float:
        step = f"enqueue {n:,} one by one"
        started = time.perf_counter()
        for i in range(n):
            self.app.enqueue(TASK, queue=queue)
            if i % 100 == 0:
                self.progress(step, i, n)
        elapsed = time.perf_counter() - started
        self.progress(step, n, n)
        return n / elapsed

    def _enqueue_bulk(self, queue: str, n: int) -> float:
        step, batch = f"enqueue {n:,} in bulk", self.config.batch
        started = time.perf_counter()
        for lo in range(0, n, batch):
            self.app.enqueue_many(TASK, [{}] * min(batch, n - lo), queue=queue)
            self.progress(step, lo, n)
        elapsed = time.perf_counter() - started
        self.progress(step, n, n)
        return n / elapsed

    def _drain(self, queue: str, workers: int) -> float:
        """The rate from the first handler's start to the last (start-up
        excluded), as the handlers told it: each returns when it ran."""
        n, step = self.config.jobs, f"drain {self.config.jobs:,} with {workers} worker(s)"
        for _ in range(workers):
            self._start_worker(queue)
        for done in self._completed(queue, n):
            self.progress(step, done, n)
        self._stop_workers()
        ran = self._results(queue)
        if len(ran) < 2 or max(ran) <= min(ran):
            raise BenchFailed(f"{step}: too few jobs completed to time the drain")
        return (len(ran) - 1) / (max(ran) - min(ran))

    def _results(self, queue: str) -> list[float]:
        """The results (start times) of the queue's completed jobs."""
        out: list[float] = []
        after = None
        while True:
            page = self.app.queue(queue).jobs(State.COMPLETED, LIST_LIMIT, after)
            out += [float(job.result) for job in page.jobs]
            if (after := page.next_cursor) is None:
                return out

    def _completed(self, queue: str, n: int) -> Iterator[int]:
        """Yield the queue's completed count until it reaches ``n``."""
        deadline = time.monotonic() + self.config.cap
        while True:
            done = self.app.queue(queue).counts()[State.COMPLETED]
            yield done
            if done >= n:
                return
            self._check_workers()
            if time.monotonic() > deadline:
                raise BenchFailed(f"{done:,} of {n:,} jobs completed in {self.config.cap:g} s")
            time.sleep(POLL)

    # -- latency -----------------------------------------------------------

    def _latency(self) -> list[Figure]:
        c = self.config
        queue = f"{self.prefix}.latency"
        self._start_worker(queue)
        self._wait_job(queue, 60.0)  # warm up: the worker is up
        idle = []
        for k in range(c.idle):
            self.progress(f"idle pickup, {c.idle_gap:g} s apart", k, c.idle)
            time.sleep(c.idle_gap)
            idle.append(self._wait_job(queue, 30.0))
        self.progress(f"idle pickup, {c.idle_gap:g} s apart", c.idle, c.idle)
        e2e = self._steady(queue)
        steady = f"{c.steady:,} jobs at {c.rate:g} jobs/s, 1 worker"
        return [
            Figure("idle pickup, p50", statistics.median(idle) * 1000, "ms", f"{c.idle} samples"),
            Figure("idle pickup, max", max(idle) * 1000, "ms"),
            Figure("end-to-end latency, p50", _pct(e2e, 50) * 1000, "ms", steady),
            Figure("end-to-end latency, p99", _pct(e2e, 99) * 1000, "ms"),
        ]

    def _wait_job(self, queue: str, timeout: float) -> float:
        """Enqueue one job and wait for it; its latency to the handler's start."""
        sent = time.time()
        job = self.app.enqueue(TASK, queue=queue)
        deadline = time.monotonic() + timeout
        while (got := self.app.get_job(job.id)).state is not State.COMPLETED:
            self._check_workers()
            if time.monotonic() > deadline:
                raise BenchFailed(f"job {job.id} did not run within {timeout:g} s")
            time.sleep(0.001)
        return float(got.result) - sent

    def _steady(self, queue: str) -> list[float]:
        c = self.config
        step = f"{c.steady:,} jobs at {c.rate:g}/s"
        sent: list[tuple[str, float]] = []
        t0 = time.time()
        for k in range(c.steady):
            time.sleep(max(0.0, t0 + k / c.rate - time.time()))
            now = time.time()
            sent.append((self.app.enqueue(TASK, queue=queue).id, now))
            if k % 20 == 0:
                self.progress(step, k, c.steady)
        for _ in self._completed(queue, c.steady + c.idle + 1):
            pass
        self.progress(step, c.steady, c.steady)
        return [float(self.app.get_job(job_id).result) - t for job_id, t in sent]

    # -- workers -----------------------------------------------------------

    def _start_worker(self, queue: str) -> None:
        c = self.config
        command = [sys.executable, "-m", "tenure.cli", "worker", APP_PATH, "--queue", queue,
                   "--concurrency", str(c.concurrency), "--pool", c.pool,
                   "--log-level", "warning"]  # fmt: skip
        env = {**os.environ, "TENURE_URL": c.url}
        self.workers.append(subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL))  # fmt: skip

    def _check_workers(self) -> None:
        for w in self.workers:
            if w.poll() is not None:
                raise BenchFailed(f"worker {w.pid} exited with status {w.returncode}")

    def _stop_workers(self) -> None:
        for w in self.workers:
            with contextlib.suppress(ProcessLookupError):
                w.send_signal(signal.SIGTERM)
        for w in self.workers:
            try:
                w.wait(30)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
        self.workers.clear()


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]
