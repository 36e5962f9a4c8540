"""Wake-ups on PostgreSQL: idle workers LISTEN; writers NOTIFY.

The liveness session (``session.py``) listens on the channel
``tenure.<schema>``; enqueues, requeues, resumes and releases of workflow
steps NOTIFY the queue's name (never a payload bigger than a name), which
PostgreSQL delivers when their transaction commits (``Database.notify``, or
``pg_notify`` within a statement); a sweep that promotes due scheduled jobs
notifies their queues. An enqueue that schedules a job for later notifies
SCHEDULED, which wakes no waiter: it tells a sweeper that found the fleet
idle that a job is coming (``rescue.py``). A gap in listening (the session
lost, or new) wakes every waiter, and the next wait returns at once, so
nothing sent meanwhile is missed. While nothing listens, a wait lasts at
most DEAF_WAIT.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence

DEAF_WAIT = 1.0  # seconds a wait lasts at most while no session listens
# seconds: an idle worker's safety poll (Capabilities.idle_poll); NOTIFY wakes it.
IDLE_POLL = 10.0
# seconds: an idle worker serving a queue with a fleet-wide limit looks again
# this often: a job held back by it gets no NOTIFY when room comes back.
HELD_BACK_POLL = 1.0
# The payload of a job scheduled for later: no queue is named so (core/names.py).
SCHEDULED = ""


class Wakeups:
    """Tell waiting workers which queue got a job. ``listen`` makes the session
    listen if it can, and says whether it does (``Liveness.listen``)."""

    def __init__(self) -> None:
        self.listen: Callable[[], Awaitable[bool]] | None = None  # set by the backend
        self.deaf: Callable[[], bool] | None = None  # set by the backend: nothing listens now
        self._heard = 0  # notifications and gaps so far
        self._pending: set[str] = set()
        self._waiters: list[tuple[frozenset[str], asyncio.Event]] = []
        self._gap = True  # nothing heard yet: the first wait returns at once

    async def wait(self, queues: Sequence[str], timeout: float) -> None:
        assert self.listen is not None
        listening = await self.listen()
        if listening and self._gap:
            # A job committed between the caller's last claim and the LISTEN
            # sent no NOTIFY this session heard: the caller claims again.
            self._gap = False
            return
        if not listening:
            timeout = min(timeout, DEAF_WAIT)
        wanted = frozenset(queues)
        if self._pending & wanted:  # a job came while nobody was waiting
            self._pending -= wanted
            return
        event = asyncio.Event()
        waiter = (wanted, event)
        self._waiters.append(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await event.wait()
        finally:
            self._waiters.remove(waiter)
        self._pending -= wanted

    def heard(self) -> int | None:
        """How many notifications and gaps were heard so far (``deaf`` reads
        what the idle session's socket holds first), or None while nothing
        listens: a count that moved says that a job may have come."""
        assert self.deaf is not None
        return None if self.deaf() else self._heard

    def signal(self, queue: str) -> None:
        self._heard += 1
        self._pending.add(queue)
        for wanted, event in self._waiters:
            if queue in wanted:
                event.set()

    def gap(self) -> None:
        """Listening began or ended: what was sent meanwhile went unheard."""
        self._heard += 1
        self._gap = True
        for _, event in self._waiters:
            event.set()
