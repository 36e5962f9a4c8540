"""The claim/complete cycle: the worker's storage conversation for its jobs.

Each cycle writes the completions waiting and claims for the free slots, in
one round trip (``Backend.complete_and_claim``). Up to MAX_CYCLES_IN_FLIGHT
cycles run at once, so that a slow round trip does not cap the rate at one
cycle per round trip; each claims only slots that are free and not already
being claimed for. That many cyclers take turns deciding the next cycle (no
task per cycle). How much a cycle waits to be fuller is ``pacing``'s. Once
draining, cycles only complete; the loop ends when nothing runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import TYPE_CHECKING

from tenure.errors import TenureError
from tenure.worker import pacing
from tenure.worker.logfields import attempt_fields

if TYPE_CHECKING:
    from tenure.worker.attempts import Attempts
    from tenure.worker.parts import Parts

log = logging.getLogger("tenure.worker")

MAX_CYCLES_IN_FLIGHT = 3


class Cycles:
    """Runs cycles whenever there is something to say to storage: completions
    to write, free slots to fill."""

    def __init__(self, parts: Parts, attempts: Attempts) -> None:
        self.backend = parts.backend
        self.config = parts.config
        self.attempts = attempts
        self.executor = parts.executor
        self.completer = parts.completer
        self.policies = parts.policies
        self.pace = parts.pace
        self.faults = parts.faults
        self.stop = parts.stop
        self.wake = parts.wake  # a cycle ended, a slot freed, a completion waits, a stop, a tick
        self.identity = parts.identity  # not registered while the worker registers again
        self.in_flight = 0
        self._claiming = 0  # slots reserved by claims in flight
        self._dry = False  # the last claim found fewer jobs than it asked for
        self._idle_for = self.config.idle_poll_min  # the next idle wait (doubles while idle)
        # the longest idle wait: the worker's setting, else the backend's
        self._poll_max = self.config.idle_poll_max or self.backend.capabilities.idle_poll
        self._claim_after = 0.0  # loop time: claims back off while storage fails
        self._loop: asyncio.AbstractEventLoop  # once running

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        turn = asyncio.Lock()
        await asyncio.gather(*(self._cycler(turn) for _ in range(MAX_CYCLES_IN_FLIGHT)))

    async def _cycler(self, turn: asyncio.Lock) -> None:
        while True:
            async with turn:  # one cycler at a time waits for the next cycle
                slots = await self._next()
            if slots is None:
                return
            try:
                await self._cycle(slots)
            except Exception:
                log.exception("cycle failed")
            finally:
                self.in_flight -= 1

    def claims_ahead(self) -> int:
        return pacing.claims_ahead(self.pace, self.backend.capabilities,
                                   slots=self.config.concurrency,
                                   limited=self.policies.limit_claims_ahead,
                                   kept=self._kept, fair=self.policies.fair)  # fmt: skip

    def _kept(self) -> int:
        """Attempts the executor takes beyond its slots, to start them itself."""
        return self.executor.room() - self.executor.capacity()

    def _free(self) -> int:
        """Slots to claim for: free now, plus ahead, minus those spoken for."""
        spoken_for = self.attempts.starting + self._claiming
        return self.executor.capacity() + self.claims_ahead() - spoken_for

    async def _next(self) -> int | None:
        """The slots to claim in the next cycle, once there is one to run (its
        claim and the cycle itself are counted at once); None: the loop is over."""
        draining = self.stop.draining
        while True:
            done = len(self.completer) > 0
            if draining.is_set() and not (self.attempts.by_lease or self.in_flight or done):
                return None
            if self.stop.storage_lost is not None:
                return None  # nothing can be written any more
            if (pause := self._claim_after - self._loop.time()) > 0:
                await self._wait(pause)  # storage failed: back off
                continue
            registered = self.identity.registered.is_set()
            free = 0 if draining.is_set() or not registered else self._free()
            if free <= 0 and not done:
                await self._wait()
                continue
            if self.in_flight and max(free, 0) + len(self.completer) < self._full():
                await self._wait()  # a cycle is out: let work gather for a fuller one
                continue
            if (gather := self._gather_time(done)) > 0:
                await self._wait(gather)  # slots are busy: let work gather for a fuller one
                continue
            if self._dry and not done:  # the last claim came back short: queues are empty
                await self._dried_up()
                continue
            claim = 0 if self._dry or free <= 0 else free
            self._claiming += claim
            self.in_flight += 1
            return claim

    def _full(self) -> int:
        capabilities = self.backend.capabilities
        ahead = self.claims_ahead() if capabilities.costly_cycles else 0
        return pacing.full_cycle(capabilities, slots=self.config.concurrency, ahead=ahead)

    def _gather_time(self, done: bool) -> float:
        if self.in_flight or not pacing.gathers(self.backend.capabilities):
            return 0.0
        return pacing.gather_time(slots=self.config.concurrency, unbegun=self.attempts.unbegun,
                                  held_since=self.completer.since if done else None,
                                  now=time.monotonic())  # fmt: skip

    async def _dried_up(self) -> None:
        if self.config.burst and not (self.attempts.by_lease or self.in_flight):
            self.stop.draining.set()  # burst: the queues are empty, stop
        elif not self.in_flight:
            await self._idle(self._idle_for)
            self._idle_for = min(self._idle_for * 2, self._poll_max)
            self._dry = False
        else:
            await self._wait()

    async def _cycle(self, slots: int) -> None:
        batch = self.completer.take()
        loop = self._loop
        began = loop.time()
        worker_id = self.identity.id
        try:
            lost, jobs = await self.backend.complete_and_claim(
                batch.items, worker_id, self.config.queues, slots,
                skip_tasks=self.attempts.unknown.passed_over(),
            )  # fmt: skip
            self.pace.cycled(loop.time() - began)
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
        if worker_id != self.identity.id:
            # Registered again while the claim was out: it may have landed under
            # the identity storage saw die, and a sweep would record these
            # attempts crashed. None began: each goes back without penalty.
            for job in jobs:
                self.attempts.in_task(self.attempts.hand_back_unbegun(job))
            jobs = []
        if jobs and log.isEnabledFor(logging.DEBUG):
            for job in jobs:
                log.debug("claimed job %s (%s), attempt %d", job.id, job.task, job.attempts,
                          extra=attempt_fields(job, worker_id))  # fmt: skip
        for job in jobs:
            self.attempts.start(job)
        # Not dry after completing workflow steps: a step they released may be
        # claimable only from the next cycle on (PostgreSQL's cycle is one
        # statement, of one snapshot); nor after completing jobs of a keyed
        # queue: the keys they freed may have counted as held in the same claim,
        # or in none (a cycle that claimed nothing: a burst worker stopped with
        # jobs queued).
        freed = batch.releases or (bool(batch.items) and self.policies.keyed())
        if slots or freed:
            self._dry = len(jobs) < slots and not freed
        if jobs:  # the idle wait backs off from its shortest again only now
            self._idle_for = self.config.idle_poll_min
        self.wake.set()

    async def _idle(self, timeout: float) -> None:
        """Nothing to claim: wait for storage to signal jobs, a free slot or a stop.
        A wake-up from before is spent: the caller has just looked at everything
        it could mean (the claim that came back short set it, and would have
        the worker claim again at once, for ever)."""
        self.wake.clear()
        waits = {
            asyncio.ensure_future(self.wake.wait()),
            asyncio.ensure_future(self.backend.wait_for_jobs(self.config.queues, timeout)),
        }
        _, pending = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        for waiting in pending:
            waiting.cancel()
        self.wake.clear()

    async def _wait(self, timeout: float = math.inf) -> None:
        """Until a cycle ends, a slot frees, a completion waits, a stop, a tick,
        or ``timeout`` seconds."""
        timer = self._loop.call_later(timeout, self.wake.set) if timeout < math.inf else None
        await self.wake.wait()
        self.wake.clear()
        if timer is not None:
            timer.cancel()

    async def tick(self, stop: asyncio.Event) -> None:
        """Wake the cycle loop now and then: a lost wake-up costs one idle poll."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._poll_max)
            self.wake.set()
