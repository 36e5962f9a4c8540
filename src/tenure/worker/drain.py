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
from typing import TYPE_CHECKING

from tenure.errors import LeaseLost, StorageLost, TenureError
from tenure.worker.outcome import hand_back

if TYPE_CHECKING:
    from tenure.worker.attempts import Attempts
    from tenure.worker.parts import Parts

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


async def drain(attempts: Attempts, parts: Parts) -> None:
    """Hand back what has not begun, give running attempts ``timeout``
    seconds (``drain_timeout``), then stop and hand back the rest; return when
    all have ended."""
    executor, backend, policies, stop = parts.executor, parts.backend, parts.policies, parts.stop
    timeout = parts.config.drain_timeout
    for job in attempts.withdraw_unbegun():  # claimed ahead, never begun: handed back at once
        attempts.in_task(attempts.hand_back_unbegun(job))
    held = attempts.by_lease
    if not held:
        return
    log.info("drain: waiting up to %.1f s for %d attempts", timeout, len(held))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while held and not stop.hurry.is_set() and (left := deadline - loop.time()) > 0:
        await _until_finished_or_hurried(attempts.finished, stop.hurry, left)
    leftover = list(held.values())
    for attempt in leftover:
        attempt.lost = True  # stopped attempts must not settle: they are handed back
        executor.stop(attempt.lease)
    if stop.storage_lost is not None:
        return  # nothing can be handed back: others recover them from their leases
    for job in (attempt.job for attempt in leftover):
        try:
            decision = await hand_back(backend, job, await policies.get(job.queue))
            attempts.after_failure(decision, job.id)
        except LeaseLost:
            pass
        except TenureError as exc:
            log.warning("drain: could not hand back job %s (%s); its lease will expire",
                        job.id, exc)  # fmt: skip
    while any(attempt.lease in held for attempt in leftover):  # stopped attempts end soon
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
