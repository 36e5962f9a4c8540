"""The supervisor: the worker's main process.

It owns every storage conversation that keeps leases alive: it claims,
heartbeats all its leases in one round trip per interval, settles results and
sweeps. Handlers run in an executor and only report back; whatever they do,
they cannot delay a heartbeat.

It composes the worker's parts, each in its own module: the claim/complete
cycle (``cycles``, paced by ``pacing``), the table of attempts in flight
(``attempts``, one ``attempt`` record each), the drain (``drain``), the
lease keeper (``leases``: every renewal, a handler's own too), the worker's
``identity``, the sweeper, the ticker of periodic schedules, the queues'
policies, the executor (``executors``) and, when asked for, metrics; what
the attempts and the cycles share is handed to them as ``parts``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from tenure.app import App
from tenure.backends.base import Backend, WorkerInfo
from tenure.backends.factory import from_url
from tenure.config import WorkerConfig
from tenure.core import waiting
from tenure.core.urls import redacted
from tenure.core.workflows import Flow, compile_flow
from tenure.errors import BackendUnavailable, InvalidInput, ServerFull, TenureError
from tenure.flows import values_of
from tenure.job import Job
from tenure.loader import path_of
from tenure.worker.attempts import Attempts
from tenure.worker.completer import Completer
from tenure.worker.cycles import Cycles
from tenure.worker.drain import Stop, drain
from tenure.worker.every import every
from tenure.worker.executors.base import Executor
from tenure.worker.executors.process import ProcessPool
from tenure.worker.executors.thread import ThreadExecutor
from tenure.worker.executors.zygote_main import ForkedZygote
from tenure.worker.faults import StorageFaults
from tenure.worker.identity import Identity
from tenure.worker.leases import LeaseKeeper
from tenure.worker.pacing import Pace
from tenure.worker.parts import Parts
from tenure.worker.policies import Policies
from tenure.worker.sweeper import Sweeper
from tenure.worker.ticker import Ticker

if TYPE_CHECKING:
    from tenure.metrics import MetricsServer, WorkerMetrics

log = logging.getLogger("tenure.worker")

# Seconds a starting worker waits for storage that does not answer (a server
# restarting, a database started after its workers) before it gives up, exit 1.
START_PATIENCE = 30.0
EXIT_GRACE = 10.0  # seconds a stopping worker waits for its last tasks (hooks, settles)


class Supervisor:
    """One worker: runs the App's handlers for ``config.queues`` until drained."""

    def __init__(
        self,
        app: App,
        config: WorkerConfig,
        *,
        app_path: str | None = None,
        worker_id: str | None = None,
        zygote: ForkedZygote | None = None,
    ) -> None:
        self.app = app
        self.config = config
        self.app_path = app_path
        self.identity = Identity(worker_id)
        self.executor = self._executor(zygote)
        self.backend: Backend = from_url(app.url)
        self.metrics: WorkerMetrics | None = None
        if config.metrics_port is not None:
            from tenure.metrics import CountedBackend, WorkerMetrics  # only when asked for

            self.metrics = WorkerMetrics()
            self.backend = cast(Backend, CountedBackend(self.backend, self.metrics))
        self.wake = asyncio.Event()  # the cycle loop looks again
        self.stop = Stop(self.wake.set)
        self.policies = Policies(self.backend, config.queues)
        self.faults = StorageFaults(self.stop.lose_storage)
        self.pace = Pace()
        self.completer = Completer(self.backend.max_payload, self.wake.set)
        self.parts = Parts(
            app, config, self.backend, self.executor, self.identity, self.completer,
            self.policies, self.faults, self.pace, self.stop, self.wake, self.metrics,
        )  # fmt: skip
        self.attempts = Attempts(self.parts)
        self.keeper = LeaseKeeper(
            self.backend, self.identity, self.attempts, on_liveness_lost=self._register_again
        )
        self.cycles = Cycles(self.parts, self.attempts)
        self.sweeper = Sweeper(
            self.backend,
            0.0,
            on_dead=self.attempts.tell_dead,
            on_rescued=None if self.metrics is None else self.metrics.rescued,
        )

    @property
    def worker_id(self) -> str:
        """The id storage knows this worker by (a new one each registration)."""
        return self.identity.id

    @property
    def processed(self) -> int:
        """Attempts this worker claimed and finished."""
        return self.attempts.processed

    def _executor(self, zygote: ForkedZygote | None) -> Executor:
        c = self.config
        if c.pool == "thread":
            effects = from_url(self.app.url).transaction  # its own connection, in handler threads
            hooks = self.app.hooks
            return ThreadExecutor(self.app.tasks, self, c.concurrency, effects, hooks=hooks)
        app_path = self.app_path or path_of(self.app)
        if app_path is None:
            raise InvalidInput(
                "the process pool imports the App by its path: pass app_path='module:attr' "
                "(the CLI does), define the App in an importable module, or use pool='thread'"
            )
        tasks = self.app.tasks
        return ProcessPool(app_path, lambda name: tasks[name].is_async, self,
                           concurrency=c.concurrency, async_slots=c.async_slots,
                           max_jobs_per_executor=c.max_jobs_per_executor,
                           on_capacity=self._executor_replaced, zygote=zygote)  # fmt: skip

    # -- what running handlers ask (the executors' Link) --------------------

    async def progress(self, job: Job, data: Any) -> None:
        await self.keeper.progress((job.id, job.fence), data)

    async def heartbeat(self, job: Job) -> None:
        await self.keeper.heartbeat((job.id, job.fence))

    async def upstream(self, job: Job) -> list[Any]:
        return await values_of(self.backend, job.upstream)

    async def spawn(self, job: Job, seq: int, flow: Flow) -> list[str]:
        if job.workflow is None:
            raise InvalidInput(
                f"job {job.id} ({job.task}) is no workflow's step: only a step can spawn; "
                "store a new workflow with app.workflow(...)"
            )
        spec = compile_flow(flow, workflow_id=job.workflow)
        return [j.id for j in await self.keeper.spawn((job.id, job.fence), seq, spec)]

    def _executor_replaced(self) -> None:
        """The process pool has a slot again: begin a job claimed ahead in it, or
        claim for it (an attempt's end does both on its own)."""
        self.attempts.begin_ahead()
        self.wake.set()

    # -- life cycle --------------------------------------------------------

    async def run(self) -> None:
        # The executors start (forks, on another core) while storage opens,
        # registers and sweeps: the first claim waits for the slower of the two.
        starting = asyncio.ensure_future(self.executor.start())
        opened, server = False, None
        self._install_signals()  # a worker waiting for a full server stops when told
        try:
            await self._patiently(self.backend.open, "open")
            opened = True
            server = self._serve_metrics()
            await self._run(starting)
        except StoppedStarting as stopped:
            log.info("worker %s stopped while starting (%s)", self.worker_id, stopped)
        finally:
            starting.cancel()  # if storage failed first: the executor's close() ends it
            await asyncio.gather(starting, return_exceptions=True)
            if server is not None:
                await asyncio.to_thread(server.close)
            await self.executor.close()
            if opened:
                await self.backend.close()
        if self.stop.storage_lost is not None:
            raise self.stop.storage_lost

    def _serve_metrics(self) -> MetricsServer | None:
        c = self.config
        if self.metrics is None or c.metrics_port is None:
            return None
        from tenure.metrics import serve_worker

        return serve_worker(self.metrics, self.backend, asyncio.get_running_loop(), c.queues,
                            host=c.metrics_host, port=c.metrics_port)  # fmt: skip

    async def _patiently(self, step: Callable[[], Awaitable[None]], what: str) -> None:
        """A step of the start, retried while storage does not answer, for up to
        START_PATIENCE seconds, and for as long as a full server refuses a
        connection: the worker starts when one frees (said once, as any
        storage fault; the backend gave back what it held)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_PATIENCE
        while True:
            if self.stop.draining.is_set():  # asked to stop while it waited
                waiting.clear()
                raise StoppedStarting(what)
            try:
                await step()
            except BackendUnavailable as exc:
                pause = self.faults.failed(what, exc)
                if isinstance(exc, ServerFull):
                    deadline = loop.time() + START_PATIENCE
                    waiting.mark(f"{what}: {exc}")  # for tenure health
                elif loop.time() + pause >= deadline:
                    waiting.clear()
                    raise
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await self.stop.draining.wait()
            else:
                self.faults.succeeded(what)
                waiting.clear()
                return

    async def _register_at_start(self) -> None:
        if "register" in self.faults.episodes:
            self.identity.renew()  # a failed try may have left its id half-held
        await self._register()

    async def _run(self, starting: Awaitable[None]) -> None:
        await self._patiently(self._register_at_start, "register")
        try:
            await self._patiently(self.policies.refresh, "policy refresh")
        except StoppedStarting:
            await self._deregister()
            raise
        self._policies_changed()
        try:  # recovery never waits for a sweep interval
            await self.sweeper.run_once(force=True)
        except TenureError as exc:  # the periodic sweeps carry on
            self.faults.failed("sweep", exc)
        try:
            await starting
        except BaseException:  # no executor: this worker never claims, the fleet need not wait
            await self._deregister()
            raise
        stop_keeping, stop_sweeping = asyncio.Event(), asyncio.Event()
        background = [
            asyncio.create_task(
                every(self.keeper, stop_keeping, log, faults=self.faults, what="heartbeat")
            ),
            asyncio.create_task(self.sweeper.run(stop_sweeping, self.faults)),
            asyncio.create_task(
                self.policies.refresh_forever(stop_sweeping, self.faults, self._policies_changed)
            ),
            asyncio.create_task(self.cycles.tick(stop_sweeping)),
        ]
        schedules = [s for s in self.app.schedules.values() if s.queue in self.config.queues]
        if schedules:
            ticker = Ticker(self.backend, schedules, self.app.tasks)
            background.append(asyncio.create_task(ticker.run(stop_sweeping, self.faults)))
        await asyncio.to_thread(self.app.hooks.worker_started, self.worker_id)
        storage, relative = where(self.app.url)
        log.info("worker %s started on %s, queues %s", self.worker_id, storage,
                 ", ".join(self.config.queues))  # fmt: skip
        if relative:
            log.warning("%s", relative)
        cycling = asyncio.create_task(self.cycles.run())
        try:
            stop = asyncio.ensure_future(self.stop.draining.wait())
            await asyncio.wait({cycling, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            await drain(self.attempts, self.parts)
            await cycling
        finally:
            cycling.cancel()
            stop_sweeping.set()
            stop_keeping.set()
            await asyncio.gather(*background, return_exceptions=True)
            await self.attempts.wait_tasks(EXIT_GRACE)  # on_dead hooks, a settle still retrying
            await asyncio.to_thread(self.app.hooks.worker_stopped, self.worker_id)
            if self.stop.storage_lost is None:
                await self._deregister()
            log.info("worker %s stopped after %d jobs", self.worker_id, self.processed)

    def _policies_changed(self) -> None:
        self.keeper.interval = self.policies.heartbeat_interval()
        self.sweeper.interval = self.policies.sweep_interval()

    async def _register(self) -> None:
        info = WorkerInfo(self.worker_id, socket.gethostname(), os.getpid(), self.config.queues)
        await self.backend.register_worker(info)
        self.identity.registered.set()
        self.wake.set()  # the cycle loop waits for nothing else to claim again

    async def _deregister(self) -> None:
        try:
            await self.backend.deregister_worker(self.worker_id)
        except TenureError as exc:  # storage down at the end: the fleet sees a death
            log.warning("could not deregister (%s): the fleet will find this worker gone", exc)

    async def _register_again(self) -> None:
        """Storage lost sight of us: come back as a new worker (the old one is dead).
        Nothing is claimed until then: a claim under a dead identity would be
        recovered from under us as a crash."""
        self.identity.renew()
        await self._register()
        log.warning("registered again as worker %s", self.worker_id)

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.request_stop)
            except (ValueError, RuntimeError):  # not the main thread: the caller stops us
                return

    def request_stop(self) -> None:
        """Begin a drain; a second request skips the wait for running attempts."""
        self.stop.request(len(self.attempts.by_lease))


class StoppedStarting(Exception):
    """A stop request came while the worker waited for storage to start."""


def where(url: str) -> tuple[str, str | None]:
    """``url`` as the start-up line shows it (a SQLite file with its absolute
    path), and a warning if that path is relative: it resolves against the
    directory the worker started in, so a worker started in another one would
    open another database, empty, and never see the jobs."""
    shown = redacted(url)
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite":
        return shown, None
    from tenure.backends.sqlite.url import path_of_url  # only for a sqlite:// URL

    path = path_of_url(url)
    if path == ":memory:" or os.path.isabs(path):
        return shown, None
    absolute = os.path.abspath(path)
    query = f"?{redacted(url).partition('?')[2]}" if parts.query else ""
    return f"{shown} ({absolute})", (
        f"{shown} is a relative path, resolved against the directory this worker started "
        f"in: {absolute}; a worker or producer started elsewhere uses another database. "
        f"For one database wherever they start: sqlite:///{absolute}{query}"
    )


def run_worker(
    app: App,
    config: WorkerConfig,
    app_path: str | None = None,
    zygote: ForkedZygote | None = None,
) -> None:
    """Run a worker in this process until it is drained (its process pool's
    executors forked by ``zygote``, if given: see ``fork_zygote``)."""
    asyncio.run(Supervisor(app, config, app_path=app_path, zygote=zygote).run())
