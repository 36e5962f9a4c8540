"""Waiting for a job's result: ``App.result`` and ``App.aresult``.

A waiter reads the job; while it is unfinished, it waits on its queue's
lifecycle events (``Backend.read_events`` blocks without polling storage for
them: LISTEN on PostgreSQL, XREAD BLOCK on Redis, the WAL's counter on
SQLite), from a position taken before its last read of the job: a transition
made after that read is among the events it reads, so none is missed. An event
that ends its job has it read the job again, for the result or the error.
Waiters of one queue share one reader of its events (a :class:`Watch`).

A queue whose policy records no events (``events=False``) has none to wait
on: there the waiter reads the job again after a pause that doubles from
FIRST_PAUSE to LAST_PAUSE seconds, the slower path. With events, it also reads
the job again after SAFETY seconds without an event of its job: a policy
turned off meanwhile, or events trimmed before it read them, cost that much at
most.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import weakref
from typing import TYPE_CHECKING, Any

from tenure.core.events import EventKind
from tenure.core.states import TERMINAL, State
from tenure.errors import JobCancelled, JobFailed, TenureError
from tenure.events import check_follow
from tenure.job import Job

if TYPE_CHECKING:
    from tenure.backends.base import Backend

log = logging.getLogger("tenure.results")

FIRST_PAUSE = 0.05
LAST_PAUSE = 1.0
SAFETY = 5.0
BATCH = 500  # events read per round trip
READ_WAIT = 1.0  # seconds one read of a watch waits: a stopped reader ends within it
STOP_WAIT = 2 * READ_WAIT  # seconds a backend's closing waits for its readers to end
# The events after which a job is finished: the waiter reads it again.
ENDINGS = frozenset({EventKind.COMPLETED, EventKind.DEAD, EventKind.CANCELLED})


def check_timeout(timeout: float | None) -> float:
    """``timeout`` in seconds (None: for ever, ``math.inf``); InvalidInput otherwise."""
    check_follow(None, None, timeout)  # events' followers take the same timeouts
    return math.inf if timeout is None else float(timeout)


def outcome(job: Job) -> Any:
    """A finished job's result; JobFailed if it is dead, JobCancelled if cancelled."""
    if job.state is State.DEAD:
        raise JobFailed(job)
    if job.state is State.CANCELLED:
        raise JobCancelled(job)
    return job.result


async def wait_result(backend: Backend, job_id: str, timeout: float | None = None) -> Any:
    """The result of the job ``job_id`` once it is finished (see ``outcome``);
    TimeoutError after ``timeout`` seconds (None: never); JobNotFound."""
    deadline = time.monotonic() + check_timeout(timeout)
    job = await backend.get(job_id)
    if job.state in TERMINAL:
        return outcome(job)
    ended = asyncio.Event()
    watch = await Watch.join(backend, job, ended)
    try:
        pause = FIRST_PAUSE
        while True:
            job = await backend.get(job_id)  # after the watch's position: nothing is missed
            if job.state in TERMINAL:
                return outcome(job)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"job {job_id} is still {job.state.value} after {timeout} s")
            if (await backend.get_policy(job.queue)).events:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(left, SAFETY)):
                        await ended.wait()
                ended.clear()
            else:
                await asyncio.sleep(min(left, pause))
                pause = min(pause * 2, LAST_PAUSE)
    finally:
        watch.leave(job_id, ended)


class Watch:
    """One reader of a queue's events on one backend, for every job of the
    queue waited for there: a thousand waiters cost one reader (one blocked
    connection on Redis), not a thousand. It reads from a position taken
    before any of its waiters read their job again, and stops when the last
    one leaves."""

    def __init__(self, backend: Backend, queue: str, after: str) -> None:
        self.backend, self.queue, self.after = backend, queue, after
        self.waiters: dict[str, set[asyncio.Event]] = {}
        self.stopped = False
        self.task = asyncio.ensure_future(self._run())
        readers = _READERS.setdefault(backend, set())
        readers.add(self.task)
        self.task.add_done_callback(readers.discard)

    @classmethod
    async def join(cls, backend: Backend, job: Job, ended: asyncio.Event) -> Watch:
        """The watch of ``job``'s queue, which sets ``ended`` at an event that ends
        the job; started here if there is none."""
        watches = _WATCHES.setdefault(backend, {})
        watch = watches.get(job.queue)
        if watch is None or watch.task.done():
            after = await backend.events_now(job.queue)
            watch = watches.get(job.queue)  # another waiter may have started one meanwhile
            if watch is None or watch.task.done():
                watch = watches[job.queue] = cls(backend, job.queue, after)
        watch.waiters.setdefault(job.id, set()).add(ended)
        return watch

    def leave(self, job_id: str, ended: asyncio.Event) -> None:
        """The waiter of ``job_id`` with ``ended`` is gone; the last one out
        stops the reader (``stop_watches`` waits for it to end)."""
        waiting = self.waiters.get(job_id, set())
        waiting.discard(ended)
        if not waiting:
            self.waiters.pop(job_id, None)
        if not self.waiters:  # nobody waits: stop reading now, not at the next event
            self._forget()
            self.stop()

    def stop(self) -> None:
        # Also a flag: a cancel that meets a read's own timeout can be lost
        # (asyncio.wait_for on Python 3.11), and the reader must end all the same.
        self.stopped = True
        self.task.cancel()

    def _forget(self) -> None:
        watches = _WATCHES.get(self.backend, {})
        if watches.get(self.queue) is self:
            del watches[self.queue]

    async def _run(self) -> None:
        while not self.stopped:
            try:
                events = await self.backend.read_events(self.queue, self.after, BATCH, READ_WAIT)
            except TenureError as exc:  # storage down: the waiters' own reads say so
                log.debug("watch of queue %s: %s", self.queue, exc)
                await asyncio.sleep(FIRST_PAUSE)
                continue
            if events:
                self.after = events[-1].id
            for event in events:
                if event.kind in ENDINGS:
                    for ended in self.waiters.get(event.job_id, ()):
                        ended.set()


# The watches of each backend (an App opens one per event loop), by queue.
_WATCHES: weakref.WeakKeyDictionary[Backend, dict[str, Watch]] = weakref.WeakKeyDictionary()
# The readers of each backend's watches, until they end (stopping ones too).
_READERS: weakref.WeakKeyDictionary[Backend, set[asyncio.Task[None]]] = weakref.WeakKeyDictionary()


async def stop_watches(backend: Backend) -> None:
    """Stop the readers of ``backend``'s watches and wait for them to end, so
    that their connections close cleanly before the backend does."""
    for watch in _WATCHES.pop(backend, {}).values():
        watch.stop()
    readers = _READERS.pop(backend, set())
    if readers:
        await asyncio.wait(readers, timeout=STOP_WAIT)
