"""Following lifecycle events: ``App.events`` and ``App.aevents``.

One async core (:func:`follow`) over the backend's ``read_events``; the sync
iterator runs each of its steps through the App's portal.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any

from tenure.core.events import Event
from tenure.core.names import check_name, shown
from tenure.errors import InvalidInput

if TYPE_CHECKING:
    from tenure.backends.base import Backend

BATCH = 500  # events read per round trip
# Seconds one read waits at most: between reads a sync follower can be
# interrupted, and a blocked read does not hold a connection for long.
MAX_WAIT = 5.0


def check_follow(queue: object, after: object, timeout: object) -> None:
    if queue is not None:
        check_name("queue", queue)
    if after is not None and not isinstance(after, str):
        raise InvalidInput(f"after must be an event id (a string), got {shown(after)}")
    if timeout is None:
        return
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not (0 <= timeout < math.inf)
    ):
        raise InvalidInput(
            f"timeout must be a number of seconds >= 0 or None, got {shown(timeout)}"
        )


class Steps:
    """Where a reader stands: the last id seen, and when it stops waiting."""

    def __init__(self, backend: Backend, queue: str | None, after: str | None,
                 timeout: float | None) -> None:  # fmt: skip
        check_follow(queue, after, timeout)
        self.backend, self.queue, self.after = backend, queue, after
        self.timeout = timeout
        self.deadline = math.inf if timeout is None else time.monotonic() + timeout
        self.done = False

    def read(self) -> Coroutine[Any, Any, list[Event]] | None:
        """The next read, or None once ``timeout`` passed without an event."""
        if self.done:
            return None
        left = max(0.0, self.deadline - time.monotonic())
        return self.backend.read_events(self.queue, self.after, BATCH, min(left, MAX_WAIT))

    def got(self, events: list[Event]) -> None:
        if events:
            self.after = events[-1].id
            if self.timeout is not None:
                self.deadline = time.monotonic() + self.timeout
        elif time.monotonic() >= self.deadline:
            self.done = True


async def follow(
    steps: Steps, run: Callable[[Coroutine[Any, Any, list[Event]]], Awaitable[list[Event]]]
) -> AsyncIterator[Event]:
    while (read := steps.read()) is not None:
        events = await run(read)
        steps.got(events)
        for event in events:
            yield event


def follow_sync(
    steps: Steps, call: Callable[[Coroutine[Any, Any, list[Event]]], list[Event]]
) -> Iterator[Event]:
    while (read := steps.read()) is not None:
        events = call(read)
        steps.got(events)
        yield from events
