"""The supervisor: the worker's main process.

It owns every storage conversation that keeps leases alive: it claims,
heartbeats all its leases in one round trip per interval, settles results and
sweeps. Handlers run in an executor and only report back; whatever they do,
they cannot delay a heartbeat.

It claims for its free slots, and, while its jobs are short, ahead of them: as
many more as its slots start within a horizon at the pace they run, plus those
the executor keeps to start itself as its slots free (the thread executor:
three per slot), at most six per slot (twelve where cycles are costly, on
PostgreSQL). On a storage server the horizon is one cycle's round trip, so that
a slot freed by a short job need not wait for one; on storage in the worker's
own process (SQLite), where the cycle is the worker's own work, it is
BATCH_HORIZON, so that one transaction carries many jobs. A job claimed ahead
waits for a slot under its lease; its deadline counts from its start. Long jobs
and at-most-once queues (a claimed job is gone if the worker dies) get no
claims ahead. While a cycle is out, the next one waits until it has as much to
do as the worker has slots (slots to claim for plus completions to write), or,
where a cycle costs storage much more than a job (PostgreSQL), as a full claim
(slots plus claims ahead): fewer, fuller round trips, less CPU per job on both
sides (Redis's cheap cycles gain more from overlapping). Without round trips,
or where cycles are costly, while more jobs claimed ahead wait for a slot than
the worker has slots (so every slot stays busy meanwhile), a cycle with none
out waits for them to begin, for up to BATCH_HORIZON after the oldest
completion it would carry.

Drain (SIGTERM or SIGINT): claim nothing new; running attempts get
``drain_timeout`` seconds to finish; the rest are stopped and handed back at
once, one copy each; then the worker exits. A second signal skips the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import signal
import socket
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

from tenure.app import App
from tenure.backends.base import Backend, LeaseRef, WorkerInfo
from tenure.backends.factory import from_url
from tenure.config import QueuePolicy, WorkerConfig
from tenure.core.retry import Decision
from tenure.core.states import State
from tenure.core.urls import redacted
from tenure.errors import BackendUnavailable, InvalidInput, LeaseLost, StorageLost, TenureError
from tenure.job import Job
from tenure.loader import path_of
from tenure.worker.completer import Completer
from tenure.worker.executor import (
    AttemptResult,
    Cancelled,
    Executor,
    Returned,
    Settled,
    ThreadExecutor,
)
from tenure.worker.faults import StorageFaults
from tenure.worker.leases import LeaseKeeper
from tenure.worker.logfields import attempt_fields
from tenure.worker.outcome import cancelled, hand_back, settle, settle_unknown_task
from tenure.worker.periodic import every
from tenure.worker.process import ProcessPool
from tenure.worker.sweeper import Sweeper
from tenure.worker.ticker import Ticker

if TYPE_CHECKING:
    from tenure.metrics import MetricsServer, WorkerMetrics

log = logging.getLogger("tenure.worker")

POLICY_REFRESH = 5.0
MAX_CYCLES_IN_FLIGHT = 3
MAX_AHEAD_PER_SLOT = 6  # claims ahead; at 1, PostgreSQL drained a quarter slower; at 3, slower too
# ... where cycles are costly (PostgreSQL): at 6, two workers drained 12.7k jobs/s, at 12
# 15.3-16.3k (cycles of 17 jobs, not 12), at 24 16.2k; Redis gained nothing from 12 or 24
MAX_AHEAD_PER_SLOT_COSTLY = 12
# Seconds of work claimed ahead without round trips; and completions held, there and where
# cycles are costly (PostgreSQL, 2 workers: cycles of 15 -> 38 jobs, 24k -> 35k jobs/s)
BATCH_HORIZON = 0.005
AVERAGING = 0.2  # weight of the newest sample in the moving averages of times
# Seconds a starting worker waits for storage that does not answer (a server
# restarting, a database started after its workers) before it gives up, exit 1.
START_PATIENCE = 30.0
EXIT_GRACE = 10.0  # seconds a stopping worker waits for its last tasks (hooks, settles)
SETTLE_RETRIES = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 5.0, 5.0)
NOT_BEGUN = Cancelled("it had not begun")  # claimed ahead, cancelled before a slot freed


def new_worker_id() -> str:
    host = "".join(c if c.isalnum() or c in "-." else "-" for c in socket.gethostname())[:40]
    return f"{host or 'host'}.{os.getpid()}.{uuid.uuid4().hex[:8]}"


class Supervisor:
    def __init__(
        self,
        app: App,
        config: WorkerConfig,
        *,
        app_path: str | None = None,
        worker_id: str | None = None,
    ) -> None:
        self.app = app
        self.config = config
        self.app_path = app_path
        self.worker_id = worker_id or new_worker_id()
        self.executor = self._executor()
        self.backend: Backend = from_url(app.url)
        self.metrics: WorkerMetrics | None = None
        if config.metrics_port is not None:
            from tenure.metrics import CountedBackend, WorkerMetrics  # only when asked for

            self.metrics = WorkerMetrics()
            self.backend = cast(Backend, CountedBackend(self.backend, self.metrics))
        self.policies: dict[str, QueuePolicy] = {}
        self.running: dict[LeaseRef, Job] = {}  # attempts begun and not yet settled
        self.processed = 0
        self._draining = asyncio.Event()
        self._hurry = asyncio.Event()
        self._wake = asyncio.Event()  # a slot freed, a completion waits, or a stop
        self.completer = Completer(self.backend.max_payload, self._wake.set)
        self._finished = asyncio.Event()  # an attempt was settled
        self._lost: set[LeaseRef] = set()
        self._cancelling: set[LeaseRef] = set()  # running attempts whose job was cancelled
        self._background: set[asyncio.Task[None]] = set()  # attempts and settles in a task
        self._starting = 0  # attempts started but not yet handed to the executor
        self._waiting: deque[tuple[Job, QueuePolicy]] = deque()  # claimed ahead: no slot yet
        self._run_time: float | None = None  # recent attempts' duration (moving average)
        self._cycle_time = 0.0  # recent cycles' duration (moving average)
        self._claiming = 0  # slots reserved by claims in flight
        self._dry = False  # the last claim found fewer jobs than it asked for
        self._cycles = 0  # cycles in flight
        self._idle_for = config.idle_poll_min  # the next idle wait (doubles while idle)
        self._registered = asyncio.Event()
        self.faults = StorageFaults(self._lose_storage)
        self._storage_lost: StorageLost | None = None  # the worker stops, and fails
        self._claim_after = 0.0  # loop time: claims back off while storage fails
        self._loop: asyncio.AbstractEventLoop  # once running

    def _executor(self) -> Executor:
        c = self.config
        if c.pool == "thread":
            effects = getattr(from_url(self.app.url), "transaction", None)
            return ThreadExecutor(
                self.app.tasks, self._link, c.concurrency, effects, hooks=self.app.hooks
            )
        app_path = self.app_path or path_of(self.app)
        if app_path is None:
            raise InvalidInput(
                "executor processes import the App by its path: pass app_path='module:attr' "
                "(the CLI does), define the App in an importable module, or use pool='thread'"
            )
        tasks = self.app.tasks
        return ProcessPool(app_path, lambda name: tasks[name].is_async, self._link,
                           concurrency=c.concurrency, async_slots=c.async_slots,
                           max_jobs_per_executor=c.max_jobs_per_executor,
                           on_capacity=self._executor_replaced)  # fmt: skip

    async def _link(self, op: str, job: Job, data: Any) -> None:
        """What a running handler asks of the supervisor: progress, or a heartbeat now."""
        if op == "progress":
            await self.backend.progress(job.id, job.fence, data)
        elif op == "heartbeat":
            if (await self.backend.heartbeat(self.worker_id, {(job.id, job.fence)})).lost:
                raise LeaseLost(f"job {job.id} is no longer held with fence {job.fence}")
        else:
            raise InvalidInput(f"unknown request {op!r} from an executor")

    # -- life cycle --------------------------------------------------------

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()  # kept: see ThreadExecutor._loop
        await self._patiently(self.backend.open, "open")
        server = None
        try:
            server = self._serve_metrics()
            await self.executor.start()
            await self._run()
        finally:
            if server is not None:
                await asyncio.to_thread(server.close)
            await self.executor.close()
            await self.backend.close()
        if self._storage_lost is not None:
            raise self._storage_lost

    def _serve_metrics(self) -> MetricsServer | None:
        c = self.config
        if self.metrics is None or c.metrics_port is None:
            return None
        from tenure.metrics import serve_worker

        return serve_worker(self.metrics, self.backend, self._loop, c.queues,
                            host=c.metrics_host, port=c.metrics_port)  # fmt: skip

    async def _patiently(self, step: Callable[[], Awaitable[None]], what: str) -> None:
        """A step of the start, retried while storage does not answer, for up to
        START_PATIENCE seconds (said once, as any storage fault)."""
        deadline = self._loop.time() + START_PATIENCE
        while True:
            try:
                await step()
            except BackendUnavailable as exc:
                pause = self.faults.failed(what, exc)
                if self._loop.time() + pause >= deadline:
                    raise
                await asyncio.sleep(pause)
            else:
                self.faults.succeeded(what)
                return

    async def _register_at_start(self) -> None:
        if "register" in self.faults.episodes:
            self.worker_id = new_worker_id()  # a failed try may have left its id half-held
        await self._register()

    async def _run(self) -> None:
        await self._patiently(self._register_at_start, "register")
        await self._patiently(self.refresh_policies, "policy refresh")
        self.keeper = LeaseKeeper(
            self.backend, self.worker_id, self._heartbeat_interval(), self._register_again,
            on_cancel_requested=self._on_cancel_requested,
        )  # fmt: skip
        self.sweeper = Sweeper(
            self.backend,
            self._sweep_interval(),
            on_dead=self._tell_dead,
            on_rescued=None if self.metrics is None else self.metrics.rescued,
        )
        try:  # recovery never waits for a sweep interval
            await self.sweeper.run_once(force=True)
        except TenureError as exc:  # the periodic sweeps carry on
            self.faults.failed("sweep", exc)
        stop_keeping, stop_sweeping = asyncio.Event(), asyncio.Event()
        background = [
            asyncio.create_task(
                every(self.keeper, stop_keeping, log, faults=self.faults, what="heartbeat")
            ),
            asyncio.create_task(self.sweeper.run(stop_sweeping, self.faults)),
            asyncio.create_task(self._refresh_policies_forever(stop_sweeping)),
            asyncio.create_task(self._tick(stop_sweeping)),
        ]
        schedules = [s for s in self.app.schedules.values() if s.queue in self.config.queues]
        if schedules:
            ticker = Ticker(self.backend, schedules, self.app.tasks)
            background.append(asyncio.create_task(ticker.run(stop_sweeping, self.faults)))
        self._install_signals()
        await asyncio.to_thread(self.app.hooks.worker_started, self.worker_id)
        log.info("worker %s started on %s, queues %s", self.worker_id, redacted(self.app.url),
                 ", ".join(self.config.queues))  # fmt: skip
        cycling = asyncio.create_task(self._cycle_loop())
        try:
            stop = asyncio.ensure_future(self._draining.wait())
            await asyncio.wait({cycling, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            await self._drain()
            await cycling
        finally:
            cycling.cancel()
            stop_sweeping.set()
            stop_keeping.set()
            await asyncio.gather(*background, return_exceptions=True)
            if self._background:  # on_dead hooks, a settle still retrying
                await asyncio.wait(set(self._background), timeout=EXIT_GRACE)
            await asyncio.to_thread(self.app.hooks.worker_stopped, self.worker_id)
            if self._storage_lost is None:
                await self._deregister()
            log.info("worker %s stopped after %d jobs", self.worker_id, self.processed)

    async def _register(self) -> None:
        info = WorkerInfo(self.worker_id, socket.gethostname(), os.getpid(), self.config.queues)
        await self.backend.register_worker(info)
        self._registered.set()

    async def _deregister(self) -> None:
        try:
            await self.backend.deregister_worker(self.worker_id)
        except TenureError as exc:  # storage down at the end: the fleet sees a death
            log.warning("could not deregister (%s): the fleet will find this worker gone", exc)

    async def _register_again(self) -> None:
        """Storage lost sight of us: come back as a new worker (the old one is dead).
        Nothing is claimed until then: a claim under a dead identity would be
        recovered from under us as a crash."""
        self._registered.clear()
        self.worker_id = new_worker_id()
        self.keeper.worker_id = self.worker_id
        await self._register()
        log.warning("registered again as worker %s", self.worker_id)

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.request_stop)
            except (ValueError, RuntimeError):  # not the main thread: the caller stops us
                return

    def _lose_storage(self, exc: StorageLost) -> None:
        """Storage is gone for good: nothing can be written; stop at once."""
        if self._storage_lost is None:
            self._storage_lost = exc
            log.error("stopping: %s", exc)
            self._draining.set()
            self._hurry.set()
            self._wake.set()

    def request_stop(self) -> None:
        """Begin a drain; a second request skips the wait for running attempts."""
        if self._draining.is_set():
            log.warning("second stop request: handing back running jobs now")
            self._hurry.set()
        else:
            log.info("draining: no new claims; %d attempts running", len(self.running))
            self._draining.set()
        self._wake.set()

    # -- policies ----------------------------------------------------------

    async def refresh_policies(self) -> None:
        for q in self.config.queues:
            self.policies[q] = await self.backend.get_policy(q)

    async def _refresh_policies_forever(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), POLICY_REFRESH)
            except TimeoutError:
                try:
                    await self.refresh_policies()
                except TenureError as exc:
                    self.faults.failed("policy refresh", exc)
                else:
                    self.faults.succeeded("policy refresh")
                    self.keeper.interval = self._heartbeat_interval()
                    self.sweeper.interval = self._sweep_interval()

    def _heartbeat_interval(self) -> float:
        return min(p.heartbeat_interval for p in self.policies.values())

    def _sweep_interval(self) -> float:
        return min(p.sweep_interval for p in self.policies.values())

    async def _policy(self, queue: str) -> QueuePolicy:
        if queue not in self.policies:
            self.policies[queue] = await self.backend.get_policy(queue)
        return self.policies[queue]

    # -- claiming ----------------------------------------------------------

    async def _cycle_loop(self) -> None:
        """Talk to storage whenever there is something to say: completions to
        write, free slots to fill. Each cycle does both in one round trip
        (``complete_and_claim``). Up to MAX_CYCLES_IN_FLIGHT cycles run at once,
        so that a slow round trip does not cap the rate at one cycle per round
        trip; each claims only slots that are free and not already being claimed
        for. That many cyclers take turns deciding the next cycle (no task per
        cycle). Once draining, cycles only complete; the loop ends when nothing
        runs."""
        turn = asyncio.Lock()
        await asyncio.gather(*(self._cycler(turn) for _ in range(MAX_CYCLES_IN_FLIGHT)))

    async def _cycler(self, turn: asyncio.Lock) -> None:
        while True:
            async with turn:  # one cycler at a time waits for the next cycle
                slots = await self._next_cycle()
            if slots is None:
                return
            try:
                await self._cycle(slots)
            except Exception:
                log.exception("cycle failed")
            finally:
                self._cycles -= 1

    async def _next_cycle(self) -> int | None:
        """The slots to claim in the next cycle, once there is one to run (its
        claim and the cycle itself are counted at once); None: the loop is over."""
        while True:
            stopping = self._draining.is_set() or not self._registered.is_set()
            done = len(self.completer) > 0
            if self._draining.is_set() and not (self.running or self._cycles or done):
                return None
            if self._storage_lost is not None:
                return None  # nothing can be written any more
            if (pause := self._claim_after - self._loop.time()) > 0:
                await self._wait(pause)  # storage failed: back off
                continue
            free = 0 if stopping else self._free()
            if free <= 0 and not done:
                await self._wait()
                continue
            if self._cycles and max(free, 0) + len(self.completer) < self._full_cycle():
                await self._wait()  # a cycle is out: let work gather for a fuller one
                continue
            if (gather := self._gather_for()) > 0:
                await self._wait(gather)  # slots are busy: let work gather for a fuller one
                continue
            if self._dry and not done:  # the last claim came back short: queues are empty
                if self.config.burst and not (self.running or self._cycles):
                    self._draining.set()  # burst: the queues are empty, stop
                    continue
                if not self._cycles:
                    await self._idle(self._idle_for)
                    self._idle_for = min(self._idle_for * 2, self.config.idle_poll_max)
                    self._dry = False
                else:
                    await self._wait()
                continue
            slots = 0 if self._dry or free <= 0 else free
            self._claiming += slots
            self._cycles += 1
            return slots

    def _free(self) -> int:
        """Slots to claim for: free now, plus ahead, minus those spoken for."""
        spoken_for = len(self._waiting) + self._starting + self._claiming
        return self.executor.capacity() + self._ahead() - spoken_for

    def _ahead(self) -> int:
        """How many jobs to claim beyond the free slots (see the module's doc)."""
        run_time = self._run_time
        # A job claimed ahead holds one of a max_active queue's places while it
        # waits for a slot here, and a free slot elsewhere could run it.
        if run_time is None or any(
            p.delivery == "at-most-once" or p.max_active is not None for p in self.policies.values()
        ):
            return 0
        slots = self.config.concurrency
        horizon = self._cycle_time if self.backend.remote else BATCH_HORIZON
        if (within := int(slots * horizon / max(run_time, 1e-6))) <= 0:
            return 0
        kept = self.executor.room() - self.executor.capacity()  # the executor's own waiting
        cap = MAX_AHEAD_PER_SLOT_COSTLY if self.backend.costly_cycles else MAX_AHEAD_PER_SLOT
        return min(cap * slots, within + kept)

    def _full_cycle(self) -> int:
        """What a cycle sent while another is out should carry (see the module's doc)."""
        slots = self.config.concurrency
        return slots + self._ahead() if self.backend.costly_cycles else slots

    def _unbegun(self) -> int:
        """Jobs claimed that wait for a slot: here, or in the executor."""
        return len(self._waiting) + max(-self.executor.capacity(), 0)

    def _gather_for(self) -> float:
        """How long the next cycle may wait for fuller work, on storage without
        round trips or with costly cycles (see the module's doc); 0: not at all."""
        cheap = self.backend.remote and not self.backend.costly_cycles
        if cheap or self._cycles or self._unbegun() <= self.config.concurrency:
            return 0.0
        if not self.completer:
            return math.inf  # nothing held back: wait for the slots
        return self.completer.since + BATCH_HORIZON - time.monotonic()

    async def _cycle(self, slots: int) -> None:
        batch = self.completer.take()
        loop = self._loop
        began = loop.time()
        worker_id = self.worker_id
        try:
            lost, jobs = await self.backend.complete_and_claim(
                batch.items, worker_id, self.config.queues, slots
            )
            self._cycle_time += (loop.time() - began - self._cycle_time) * AVERAGING
        except BaseException as exc:
            batch.failed(exc)  # each completion's settle retries on its own
            if not isinstance(exc, TenureError):
                raise
            self._claim_after = loop.time() + self.faults.failed("claim", exc)
            jobs = []
        else:
            self.faults.succeeded("claim")
            batch.written(lost)
        finally:
            self._claiming -= slots
        if worker_id != self.worker_id:
            # Registered again while the claim was out: it may have landed under
            # the identity storage saw die, and a sweep would record these
            # attempts crashed. None began: each goes back without penalty.
            for job in jobs:
                self._in_task(self._hand_back_unbegun(job))
            jobs = []
        if jobs and log.isEnabledFor(logging.DEBUG):
            for job in jobs:
                log.debug("claimed job %s (%s), attempt %d", job.id, job.task, job.attempts,
                          extra=attempt_fields(job, worker_id))  # fmt: skip
        for job in jobs:
            self._start(job)
        if slots:
            self._dry = len(jobs) < slots
        if jobs:  # the idle wait backs off from its shortest again only now
            self._idle_for = self.config.idle_poll_min
        self._wake.set()

    async def _idle(self, timeout: float) -> None:
        """Nothing to claim: wait for storage to signal jobs, a free slot or a stop.
        A wake-up from before is spent: the caller has just looked at everything
        it could mean (the claim that came back short set it, and would have
        the worker claim again at once, for ever)."""
        self._wake.clear()
        waits = {
            asyncio.ensure_future(self._wake.wait()),
            asyncio.ensure_future(self.backend.wait_for_jobs(self.config.queues, timeout)),
        }
        _, pending = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        for waiting in pending:
            waiting.cancel()
        self._wake.clear()

    async def _wait(self, timeout: float = math.inf) -> None:
        """Until a cycle ends, a slot frees, a completion waits, a stop, a tick,
        or ``timeout`` seconds."""
        timer = self._loop.call_later(timeout, self._wake.set) if timeout < math.inf else None
        await self._wake.wait()
        self._wake.clear()
        if timer is not None:
            timer.cancel()

    async def _tick(self, stop: asyncio.Event) -> None:
        """Wake the cycle loop now and then: a lost wake-up costs one idle poll."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.config.idle_poll_max)
            self._wake.set()

    def _start(self, job: Job) -> None:
        if self.metrics is not None:
            self.metrics.started(job)
        lease = (job.id, job.fence)
        self.running[lease] = job
        self.keeper.hold(lease, lambda: self._on_lease_lost(lease))
        policy = self.policies.get(job.queue)
        task = self.app.tasks.get(job.task)
        if policy is None or task is None:
            self._starting += 1
            self._in_task(self._start_slowly(job))
            return
        self._begin(job, task.policy(policy))

    def _on_lease_lost(self, lease: LeaseRef) -> None:
        if (job := self.running.get(lease)) is not None:
            log.warning("job %s (%s): lease of attempt %d lost (fence %d): stopping it", job.id,
                        job.task, job.attempts, job.fence, extra=attempt_fields(job))  # fmt: skip
        self._lost.add(lease)
        for i, (job, _) in enumerate(self._waiting):
            if (job.id, job.fence) == lease:  # never began: it just goes
                del self._waiting[i]
                self._finish(lease)
                return
        self.executor.stop(lease)

    def _on_cancel_requested(self, lease: LeaseRef) -> None:
        """The job was cancelled while this worker runs it: tell its handler, which
        has the queue's cancel_grace to stop; then it is stopped. Whatever ends
        the attempt from now on, the job ends cancelled."""
        if (job := self.running.get(lease)) is None or lease in self._lost:
            return
        self._cancelling.add(lease)
        policy = self.policies.get(job.queue) or QueuePolicy()
        log.info("job %s (%s): cancelled while running attempt %d; stopping it within %g s",
                 job.id, job.task, job.attempts, policy.cancel_grace,
                 extra=attempt_fields(job))  # fmt: skip
        for i, (waiting, _) in enumerate(self._waiting):
            if (waiting.id, waiting.fence) == lease:  # never began: it ends now
                del self._waiting[i]
                self._in_task(self._settle_then_finish(waiting, policy, NOT_BEGUN))
                return
        self.executor.abort(lease, policy.cancel_grace)

    # -- one attempt -------------------------------------------------------
    #
    # The common attempt needs no task of its own: begun on the executor, its
    # end calls back (_ended), a success joins the next cycle's completions, and
    # their write calls back (_written). What can wait (a policy to fetch, a
    # failure to record, a settle to retry) runs in a task (_in_task).

    def _begin(self, job: Job, policy: QueuePolicy) -> None:
        if self._cancelling and (job.id, job.fence) in self._cancelling:  # before it began
            self._in_task(self._settle_then_finish(job, policy, NOT_BEGUN))
        elif self.executor.capacity() <= 0 and self._draining.is_set():
            self._in_task(self._hand_back_unbegun(job))  # claimed ahead: never begins
        elif self.executor.room() <= 0:  # claimed ahead: it begins when a slot frees
            self._waiting.append((job, policy))
        else:
            timeout = job.timeout or policy.timeout
            self.executor.begin(job, timeout, functools.partial(self._ended, job, policy))

    def _begin_waiting(self) -> None:
        """Hand jobs claimed ahead to the executor while it has room: when an
        attempt ends, and when the process pool has replaced an executor."""
        while self._waiting and self.executor.room() > 0 and not self._draining.is_set():
            self._begin(*self._waiting.popleft())

    def _executor_replaced(self) -> None:
        """The process pool has a slot again: begin a job claimed ahead in it, or
        claim for it (an attempt's end does both on its own)."""
        self._begin_waiting()
        self._wake.set()

    async def _start_slowly(self, job: Job) -> None:
        lease = (job.id, job.fence)
        try:
            policy = await self._policy(job.queue)
            if lease in self._lost:
                pass  # handed back, or recovered, while we waited: never run it
            elif job.task not in self.app.tasks:
                decision = await settle_unknown_task(self.backend, job, policy)
                await self._after_failure(decision, job.id)
            else:
                self._begin(job, self.app.tasks[job.task].policy(policy))
                return
        except LeaseLost as exc:
            log.warning("job %s: %s", job.id, exc)
        except Exception:
            log.exception("job %s: could not start attempt %d", job.id, job.attempts)
        finally:
            self._starting -= 1
        self._finish(lease)

    def _ended(self, job: Job, policy: QueuePolicy, result: AttemptResult, ran: float) -> None:
        lease = (job.id, job.fence)
        if self.metrics is not None:
            self.metrics.ended(job.queue, result, ran, lost=lease in self._lost)
        if ran > 0:  # 0: it never started
            average = self._run_time
            self._run_time = ran if average is None else average + (ran - average) * AVERAGING
        self._begin_waiting()
        self.keeper.settling(lease)
        if lease in self._lost:  # recovered by the sweeper, or handed back: never settle
            self._finish(lease)
        elif lease in self._cancelling and not isinstance(result, Settled):
            self._in_task(self._settle_then_finish(job, policy, cancelled(result)))
        elif isinstance(result, Returned) and (item := self.completer.item(job, result.value)):
            self.completer.add(item, functools.partial(self._written, job, policy, result))
        else:
            self._in_task(self._settle_then_finish(job, policy, result))

    def _written(
        self, job: Job, policy: QueuePolicy, result: AttemptResult, error: BaseException | None
    ) -> None:
        if isinstance(error, BackendUnavailable):
            self._in_task(self._settle_then_finish(job, policy, result))
            return
        if error is None:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("completed job %s (%s), attempt %d", job.id, job.task, job.attempts,
                          extra=attempt_fields(job))  # fmt: skip
        elif isinstance(error, LeaseLost):
            log.warning("job %s: %s", job.id, error, extra=attempt_fields(job))
        elif isinstance(error, StorageLost):
            pass  # said once, by the cycle that failed
        else:
            log.error("job %s: could not settle attempt %d", job.id, job.attempts, exc_info=error,
                      extra=attempt_fields(job))  # fmt: skip
        self._finish((job.id, job.fence))

    async def _settle_then_finish(
        self, job: Job, policy: QueuePolicy, result: AttemptResult
    ) -> None:
        try:
            await self._settle(job, policy, result)
        except LeaseLost as exc:
            log.warning("job %s: %s", job.id, exc)
        except Exception:
            log.exception("job %s: could not settle attempt %d", job.id, job.attempts)
        finally:
            self._finish((job.id, job.fence))

    def _finish(self, lease: LeaseRef) -> None:
        self._begin_waiting()
        self.keeper.drop(lease)
        self._lost.discard(lease)
        self._cancelling.discard(lease)
        if self.running.pop(lease, None) is not None:
            self.processed += 1
        self._finished.set()
        self._wake.set()

    def _in_task(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _settle(self, job: Job, policy: QueuePolicy, result: AttemptResult) -> None:
        """Settle, riding out a storage hiccup while the lease is still heartbeated."""
        lease = (job.id, job.fence)
        for delay in SETTLE_RETRIES:
            if lease in self._lost:
                return  # recovered by the sweeper, or handed back: never settle
            try:
                decision = await settle(self.backend, job, policy, result, self.completer)
                await self._after_failure(decision, job.id)
                self.faults.succeeded("settle")
                return
            except (BackendUnavailable, StorageLost) as exc:
                self.faults.failed("settle", exc)
                if isinstance(exc, StorageLost):
                    return
                log.debug("job %s: could not settle; retrying in %.1f s", job.id, delay)
                await asyncio.sleep(delay)
        log.error("job %s: gave up settling; its lease will expire and it will run again", job.id)

    async def _after_failure(self, decision: Decision | None, job_id: str) -> None:
        if decision is not None and decision.state is State.DEAD:
            self._tell_dead(job_id)

    def _tell_dead(self, job_id: str) -> None:
        """Tell the on_dead hooks, in a task and a thread: a slow hook must delay
        neither a heartbeat nor the end of the attempt."""
        if self.app.hooks.deads:
            self._in_task(self._dead(job_id))

    async def _dead(self, job_id: str) -> None:
        try:
            job = await self.backend.get(job_id)
        except TenureError as exc:
            log.warning("on_dead hooks not called for job %s: %s", job_id, exc)
            return
        await asyncio.to_thread(self.app.hooks.dead, job)

    # -- drain -------------------------------------------------------------

    async def _drain(self) -> None:
        unbegun = [job for job, _ in self._waiting] + self.executor.withdraw()
        self._waiting.clear()
        for job in unbegun:  # claimed ahead, never begun: handed back at once
            self._in_task(self._hand_back_unbegun(job))
        if not self.running:
            return
        log.info("drain: waiting up to %.1f s for %d attempts", self.config.drain_timeout,
                 len(self.running))  # fmt: skip
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.drain_timeout
        while self.running and not self._hurry.is_set() and (left := deadline - loop.time()) > 0:
            await self._until_finished_or_hurried(left)
        leftover = dict(self.running)
        for lease in leftover:
            self._lost.add(lease)  # stopped attempts must not settle: they are handed back
            self.executor.stop(lease)
        if self._storage_lost is not None:
            return  # nothing can be handed back: others recover them from their leases
        for job in leftover.values():
            try:
                decision = await hand_back(self.backend, job, await self._policy(job.queue))
                await self._after_failure(decision, job.id)
            except LeaseLost:
                pass
            except TenureError as exc:
                log.warning("drain: could not hand back job %s (%s); its lease will expire",
                            job.id, exc)  # fmt: skip
        while leftover.keys() & self.running.keys():  # stopped attempts end soon
            self._finished.clear()
            await self._finished.wait()

    async def _hand_back_unbegun(self, job: Job) -> None:
        """Released, whatever the queue's delivery: no handler ever saw the job
        (an at-most-once job too: only an attempt that began cannot run again)."""
        try:
            await self.backend.release(job.id, job.fence)
            log.info("job %s: handed back (claimed, not begun)", job.id,
                     extra=attempt_fields(job))  # fmt: skip
        except LeaseLost:
            pass
        except Exception:
            log.exception("job %s: could not hand it back; its lease will expire", job.id)
        finally:
            self._finish((job.id, job.fence))

    async def _until_finished_or_hurried(self, timeout: float) -> None:
        self._finished.clear()
        waits = {
            asyncio.ensure_future(self._finished.wait()),
            asyncio.ensure_future(self._hurry.wait()),
        }
        _, pending = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        for waiting in pending:
            waiting.cancel()


def run_worker(app: App, config: WorkerConfig, app_path: str | None = None) -> None:
    """Run a worker in this process until it is drained."""
    asyncio.run(Supervisor(app, config, app_path=app_path).run())
