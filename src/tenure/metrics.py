"""Prometheus metrics: a worker's (``tenure worker --metrics-port``) and storage's.

Imported only when metrics are asked for (prometheus-client is in the ``web``
extra). Two kinds, each its own collector:

* What this worker saw (:class:`WorkerMetrics`): attempts by outcome, stalls by
  detector, recoveries' latency, run times, jobs claimed, storage calls and
  storage errors. The worker's loop bumps plain numbers, without a lock or a
  label lookup (a few hundred nanoseconds a job); a scrape, in the HTTP
  server's thread, copies them (a copy of a dict is atomic under the GIL) and
  turns them into metric families.
* What storage holds (:class:`StorageGauges`): jobs by state, queue lag,
  workflows by state, workflows ended by outcome and jobs per concurrency
  key (histograms across keys), read at each scrape by a function it is
  given. The worker's calls into its own event loop and waits up to
  ``SCRAPE_TIMEOUT`` (no cache: a scrape sees storage as it is);
  ``app_registry`` builds the same over an App, for ``tenure serve``.

Labels are bounded: a queue's name, a state, an outcome, a detector, a verb.
Never a job id.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

try:
    from prometheus_client import CollectorRegistry, make_wsgi_app
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.exposition import ThreadingWSGIServer
    from prometheus_client.registry import Collector
except ModuleNotFoundError as exc:  # pragma: no cover - the extra is installed in tests
    raise ModuleNotFoundError(
        "tenure's metrics need prometheus-client: pip install 'tenure[web]'", name=exc.name
    ) from exc

from tenure.backends.base import Backend, Rescued
from tenure.core.hosts import host_name, is_loopback
from tenure.core.limits import KeyCount
from tenure.core.states import State
from tenure.core.workflows import WorkflowState
from tenure.errors import BackendUnavailable, InvalidInput, StorageLost, TenureError
from tenure.job import Job
from tenure.worker.executors.base import AttemptResult, Crashed, Raised, Returned, Settled, TimedOut

if TYPE_CHECKING:
    from tenure.app import App

log = logging.getLogger("tenure.metrics")

SCRAPE_TIMEOUT = 5.0  # seconds a scrape waits for storage's answers
# From a lost heartbeat (under a second) to a frozen worker's lease (15 s and a sweep).
RECOVERY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
# From a step's release to its start: a claim's round trip to a queue's backlog.
FAN_IN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)
# Jobs of one concurrency key (queued, or active): a histogram across keys,
# never a series per key.
KEY_BUCKETS = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 1e3, 1e4, 1e5, 1e6)
# The busiest keys of a queue a scrape reads (Backend.key_counts' limit).
KEYS_READ = 1000
RUN_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0, 1800.0)
# What an attempt's end tells of it; "stopped": this worker stopped the handler
# (a drain, or its lease was lost); "lost": it ended after its lease was lost,
# and its result was refused.
OUTCOMES: dict[type, str] = {
    Returned: "completed",
    Settled: "completed",
    Raised: "error",
    TimedOut: "timeout",
    Crashed: "crashed",
}
# The stalls the supervisor itself notices, by the attempt's end.
DETECTED = {TimedOut: "deadline", Crashed: "executor_died"}


class Histogram:
    """Observations per label value, in buckets (``le``) and a sum."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}

    def observe(self, label: str, value: float) -> None:
        counts = self.counts.get(label)
        if counts is None:
            counts = self.counts[label] = [0] * (len(self.bounds) + 1)
            self.sums[label] = 0.0
        counts[bisect_left(self.bounds, value)] += 1  # the first bound >= value; else +Inf
        self.sums[label] += value

    def family(self, name: str, documentation: str, label: str) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, documentation, labels=[label])
        sums = dict(self.sums)
        for value, counts in dict(self.counts).items():
            cumulative, buckets = 0, []
            for bound, n in zip((*map(str, self.bounds), "+Inf"), list(counts), strict=True):
                cumulative += n
                buckets.append((bound, cumulative))
            family.add_metric([value], buckets, sums.get(value, 0.0))
        return family


class WorkerMetrics(Collector):
    """What one worker saw, counted as it happened (see the module's doc)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock  # the storage's clock, as near as this process has it
        # Plain dicts: a Counter's += takes twice as long (a subclass of dict).
        self.attempts: dict[tuple[str, str], int] = {}  # (queue, outcome)
        self.stalls: dict[tuple[str, str], int] = {}  # (queue, detector)
        self.claimed: dict[str, int] = {}  # by queue
        self.calls: dict[str, int] = {}  # storage round trips, by verb
        self.errors: dict[str, int] = {}  # storage errors, by verb
        self.recovery = Histogram(RECOVERY_BUCKETS)
        self.fan_in = Histogram(FAN_IN_BUCKETS)
        self.run = Histogram(RUN_BUCKETS)

    def started(self, job: Job) -> None:
        """A claimed job starts; a recovered one tells how long its recovery
        took; a workflow's step, at its first attempt, how long it waited from
        its release (the end of the last step it waits for), which storage
        made its ``run_at`` (later by the step's delay, if it has one)."""
        claimed = self.claimed
        claimed[job.queue] = claimed.get(job.queue, 0) + 1
        if job.recovered_from is not None:
            self.recovery.observe(job.queue, max(self.clock() - job.recovered_from, 0.0))
        elif job.upstream and job.attempts == 1:
            self.fan_in.observe(job.queue, max(self.clock() - job.run_at, 0.0))

    def ended(self, queue: str, result: AttemptResult, ran: float, *, lost: bool) -> None:
        """An attempt ended with ``result`` after ``ran`` seconds (0: never began)."""
        kind = type(result)
        outcome = OUTCOMES.get(kind, "stopped")
        if lost and outcome != "stopped":
            outcome = "lost"
        _count(self.attempts, (queue, outcome))
        if (detector := DETECTED.get(kind)) is not None and not lost:
            _count(self.stalls, (queue, detector))
        if ran > 0:
            self.run.observe(queue, ran)

    def rescued(self, rescued: Rescued) -> None:
        """This worker's sweep recovered an attempt (anyone's)."""
        _count(self.stalls, (rescued.queue, rescued.detector.value))

    def collect(self) -> Iterator[Metric]:
        yield _counter("tenure_attempts", "Attempts this worker ran, by how they ended.",
                       ["queue", "outcome"], self.attempts)  # fmt: skip
        yield _counter("tenure_stalls", "Stalls this worker detected (its own executors and "
                       "deadlines, and its sweeps: anyone's attempts), by detector.",
                       ["queue", "detector"], self.stalls)  # fmt: skip
        yield _counter("tenure_claimed_jobs", "Jobs this worker claimed.", ["queue"],
                       self.claimed)  # fmt: skip
        yield _counter("tenure_storage_calls", "Storage round trips this worker made, by verb.",
                       ["call"], self.calls)  # fmt: skip
        yield _counter("tenure_storage_errors", "Storage calls that failed (unavailable, lost), "
                       "by verb.", ["call"], self.errors)  # fmt: skip
        yield self.recovery.family(
            "tenure_recovery_seconds",
            "From the moment a lost attempt's lease was last proven (storage's clock) to the "
            "job's next start, for jobs this worker started.",
            "queue",
        )
        yield self.fan_in.family(
            "tenure_fan_in_seconds",
            "From the release of a workflow's step (the end of the last step it waits for, "
            "plus its delay; storage's clock) to its first start, for steps this worker started.",
            "queue",
        )
        yield self.run.family("tenure_run_seconds", "How long handlers ran.", "queue")


def _count(counts: dict[Any, int], key: Any) -> None:
    counts[key] = counts.get(key, 0) + 1


def _counter(
    name: str, documentation: str, labels: list[str], counts: dict[Any, int]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=labels)
    for key, n in dict(counts).items():
        family.add_metric(list(key) if isinstance(key, tuple) else [key], n)
    return family


class CountedBackend:
    """A backend whose every verb counts its round trip, and its storage error
    (``BackendUnavailable``, ``StorageLost``; not an answer such as
    ``LeaseLost``), into ``metrics``. Everything else is the backend's own."""

    def __init__(self, backend: Backend, metrics: WorkerMetrics) -> None:
        self._backend = backend
        self._metrics = metrics

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._backend, name)
        if not inspect.iscoroutinefunction(value):
            return value
        calls, errors = self._metrics.calls, self._metrics.errors

        async def counted(*args: Any, **kwargs: Any) -> Any:
            _count(calls, name)
            try:
                return await value(*args, **kwargs)
            except (BackendUnavailable, StorageLost):
                _count(errors, name)
                raise

        self.__dict__[name] = counted  # found without __getattr__ from now on
        return counted


# -- storage's gauges ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueReading:
    """One queue as storage holds it, at a scrape."""

    queue: str
    counts: dict[State, int]
    lag: float


@dataclass(frozen=True, slots=True)
class StorageReading:
    """What a scrape reads of storage: its queues, its workflows by state and
    the workflows ended ever, by outcome."""

    queues: list[QueueReading]
    workflows: dict[WorkflowState, int]
    ended: dict[WorkflowState, int]
    keys: dict[str, list[KeyCount]] = field(default_factory=dict)  # the busiest, by queue


async def read_queues(backend: Backend, queues: Sequence[str] | None = None) -> list[QueueReading]:
    """Jobs by state and lag of ``queues`` (None: every queue storage knows)."""
    names = await backend.queues() if queues is None else queues
    return [QueueReading(q, await backend.counts(q), await backend.lag(q)) for q in names]


async def read_storage(backend: Backend, queues: Sequence[str] | None = None) -> StorageReading:
    read = await read_queues(backend, queues)
    # Only where keys matter: counting them scans the queue's queued jobs
    # (240 ms a scrape for 100,000 on SQLite), which every other scrape is spared.
    keys = {r.queue: await backend.key_counts(r.queue, KEYS_READ) for r in read
            if (await backend.get_policy(r.queue)).keyed}  # fmt: skip
    workflows, ended = await backend.workflow_counts(), await backend.workflow_outcomes()
    return StorageReading(read, workflows, ended, keys)


class StorageGauges(Collector):
    """Jobs by state, queue lag and workflows by state, read from storage at
    each scrape by ``read``; a read that fails (or times out) is counted, and
    its gauges are left out of that scrape rather than shown stale."""

    def __init__(self, read: Callable[[], StorageReading]) -> None:
        self.read = read
        self.failures = 0

    def collect(self) -> Iterator[Metric]:
        try:
            reading = self.read()
        except (TenureError, TimeoutError) as exc:
            self.failures += 1
            log.warning("metrics: could not read storage (%s)", exc)
            reading = None
        yield CounterMetricFamily(
            "tenure_storage_read_failures",
            "Scrapes whose reading of storage (jobs, queue lag, workflows) failed.",
            value=self.failures,
        )
        if reading is None:
            return
        jobs = GaugeMetricFamily("tenure_jobs", "Jobs in storage, by queue and state.",
                                 labels=["queue", "state"])  # fmt: skip
        lag = GaugeMetricFamily("tenure_queue_lag_seconds",
                                "How long the queue's oldest due job has been due (0: none is).",
                                labels=["queue"])  # fmt: skip
        for r in reading.queues:
            for state, n in r.counts.items():
                jobs.add_metric([r.queue, state.value], n)
            lag.add_metric([r.queue], r.lag)
        yield jobs
        yield lag
        workflows = GaugeMetricFamily(  # not tenure_workflows: the counter's family
            "tenure_workflows_stored",
            "Workflows in storage, by state (every queue's: the same from every worker).",
            labels=["state"],
        )
        for name, n in reading.workflows.items():
            workflows.add_metric([name.value], n)
        yield workflows
        yield _counter("tenure_workflows", "Workflows that ended, by outcome, since storage "
                       "began (every queue's: the same from every worker).", ["outcome"],
                       {state.value: n for state, n in reading.ended.items()})  # fmt: skip
        yield from _key_histograms(reading.keys)


def _key_histograms(keys: dict[str, list[KeyCount]]) -> Iterator[Metric]:
    """How many jobs each concurrency key has, as a histogram across the
    busiest KEYS_READ keys of each queue with a per-key field or ``fair`` set
    (jobs without a key left out)."""
    active, waiting = Histogram(KEY_BUCKETS), Histogram(KEY_BUCKETS)
    for queue, counts in keys.items():
        for c in counts:
            if c.key is not None:
                active.observe(queue, c.active)
                waiting.observe(queue, c.queued)
    each = "(one observation per key, of the queue's busiest keys)"
    yield active.family("tenure_key_active", f"Active jobs per concurrency key {each}.", "queue")
    yield waiting.family("tenure_key_waiting", f"Queued jobs per concurrency key {each}.", "queue")


def in_loop(
    loop: asyncio.AbstractEventLoop, make: Callable[[], Coroutine[Any, Any, StorageReading]]
) -> Callable[[], StorageReading]:
    """A reading, from another thread, by a coroutine run on ``loop`` (whose
    backend it uses), waited for up to SCRAPE_TIMEOUT."""

    def read() -> StorageReading:
        future = asyncio.run_coroutine_threadsafe(make(), loop)
        try:
            return future.result(SCRAPE_TIMEOUT)
        except TimeoutError:
            future.cancel()
            raise

    return read


def app_registry(app: App, queues: Sequence[str] | None = None) -> CollectorRegistry:
    """A registry of storage's gauges over ``app`` (jobs by state, queue lag of
    ``queues``, None: every queue; workflows by state), read through the App's
    sync facade: what ``tenure serve`` exposes."""
    registry = CollectorRegistry()

    async def reading() -> StorageReading:
        return await read_storage(await app.abackend(), queues)

    registry.register(StorageGauges(lambda: app.call(reading())))
    return registry


# -- the worker's endpoint ---------------------------------------------------------


class MetricsServer:
    """``/metrics`` of one worker, in a thread of its own, on a registry of its own.

    On a loopback ``host``, only requests addressed to a loopback host are
    answered, as ``tenure serve`` without a token does: a page of another
    site that rebinds its name to 127.0.0.1 gets 403. On any other address
    (which ``WorkerConfig`` allows with ``metrics_public`` only), any host is."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        app = make_wsgi_app(registry)
        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                        flags=socket.AI_PASSIVE)[0][0]  # fmt: skip
            server_class = type("Server", (ThreadingWSGIServer,), {"address_family": family})
            guarded = _loopback_only(app) if is_loopback(host) else app
            self._server: WSGIServer = make_server(host, port, guarded, server_class, _QuietHandler)
        except OSError as exc:
            raise InvalidInput(
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
            ) from None
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.port: int = self._server.server_port
        log.info("metrics on http://%s:%d/metrics", host, self.port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


def _loopback_only(app: WSGIApplication) -> WSGIApplication:
    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if is_loopback(host_name(environ.get("HTTP_HOST", ""))):
            return app(environ, start_response)
        start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"these metrics answer only requests addressed to localhost\n"]

    return guarded


def serve_worker(
    metrics: WorkerMetrics,
    backend: Backend,
    loop: asyncio.AbstractEventLoop,
    queues: Sequence[str],
    *,
    host: str,
    port: int,
) -> MetricsServer:
    """``/metrics`` of a worker: what it saw, and storage's gauges of its
    queues, read by its own ``backend`` on its own ``loop`` at each scrape."""
    registry = CollectorRegistry()  # collected by scrapes only: never on the loop
    registry.register(metrics)
    registry.register(StorageGauges(in_loop(loop, lambda: read_storage(backend, queues))))
    return MetricsServer(registry, host, port)
