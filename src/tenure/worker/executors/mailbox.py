"""Reports from handler threads to the supervisor's loop, in bunches."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Mailbox(Generic[T, R]):
    """What handler threads report (an attempt's end, or, with None, its start),
    delivered on the loop in bunches: one wake-up of the loop carries every
    report made until it runs."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[T, R | None], None],
    ) -> None:
        self._ends: collections.deque[tuple[T, R | None]] = collections.deque()
        self._loop = loop
        self._deliver_one = deliver
        self._called = False

    def put(self, attempt: T, result: R | None) -> None:
        """From any thread."""
        self._ends.append((attempt, result))
        if not self._called:
            self._called = True
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        self._called = False  # before reading: a report put from now on calls again
        ends = self._ends
        while ends:
            self._deliver_one(*ends.popleft())
