"""Stopping a worker: the drain (SIGTERM or SIGINT), or storage lost for good.

Drain: claim nothing new; jobs claimed and not begun go back at once; running
attempts get ``drain_timeout`` seconds to finish; the rest are stopped and
handed back at once, one copy each; then the worker exits. A second request
skips the wait. Storage lost for good (``StorageLost``) stops the worker at
once: nothing can be written, so nothing is handed back (other workers
recover those jobs from their leases).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from tenure.backends.base import Backend
from tenure.errors import LeaseLost, StorageLost, TenureError
from tenure.worker.attempts import Attempts
from tenure.worker.executors.base import Executor
from tenure.worker.outcome import hand_back
from tenure.worker.policies import Policies

log = logging.getLogger("tenure.worker")


class Stop:
    """Whether, and how hard, the worker is asked to stop."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self.wake = wake
        self.draining = asyncio.Event()  # claim nothing new
        self.hurry = asyncio.Event()  # and do not wait for running attempts
        self.storage_lost: StorageLost | None = None  # the worker stops, and fails

    def request(self, running: int) -> None:
        """Begin a drain; a second request skips the wait for running attempts."""
        if self.draining.is_set():
            log.warning("second stop request: handing back running jobs now")
            self.hurry.set()
        else:
            log.info("draining: no new claims; %d attempts running", running)
            self.draining.set()
        self.wake()

    def lose_storage(self, exc: StorageLost) -> None:
        """Storage is gone for good: nothing can be written; stop at once."""
        if self.storage_lost is None:
            self.storage_lost = exc
            log.error("stopping: %s", exc)
            self.draining.set()
            self.hurry.set()
            self.wake()


async def drain(
    attempts: Attempts,
    *,
    executor: Executor,
    backend: Backend,
    policies: Policies,
    stop: Stop,
    timeout: float,
) -> None:
    """Hand back what has not begun, give running attempts ``timeout``
    seconds, then stop and hand back the rest; return when all have ended."""
    for job in attempts.withdraw_unbegun():  # claimed ahead, never begun: handed back at once
        attempts.in_task(attempts.hand_back_unbegun(job))
    running = attempts.running
    if not running:
        return
    log.info("drain: waiting up to %.1f s for %d attempts", timeout, len(running))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while running and not stop.hurry.is_set() and (left := deadline - loop.time()) > 0:
        await _until_finished_or_hurried(attempts.finished, stop.hurry, left)
    leftover = dict(running)
    for lease in leftover:
        attempts.lost.add(lease)  # stopped attempts must not settle: they are handed back
        executor.stop(lease)
    if stop.storage_lost is not None:
        return  # nothing can be handed back: others recover them from their leases
    for job in leftover.values():
        try:
            decision = await hand_back(backend, job, await policies.get(job.queue))
            attempts.after_failure(decision, job.id)
        except LeaseLost:
            pass
        except TenureError as exc:
            log.warning("drain: could not hand back job %s (%s); its lease will expire",
                        job.id, exc)  # fmt: skip
    while leftover.keys() & running.keys():  # stopped attempts end soon
        attempts.finished.clear()
        await attempts.finished.wait()


async def _until_finished_or_hurried(
    finished: asyncio.Event, hurry: asyncio.Event, timeout: float
) -> None:
    finished.clear()
    waits = {asyncio.ensure_future(finished.wait()), asyncio.ensure_future(hurry.wait())}
    _, pending = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    for waiting in pending:
        waiting.cancel()
