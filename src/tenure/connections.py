"""An App's connections: a backend per event loop, and the portal for sync code.

Each event loop gets a backend of its own, opened there at its first use
(``tenure.loops``), so async callers never hop threads; synchronous callers
share the portal, an event loop in a thread of its own (``tenure.portal``).
A forked child forgets its parent's: their loops and threads are not its own.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tenure.backends.base import Backend
from tenure.loops import LoopBackend
from tenure.portal import Portal

__all__ = ["Connections"]

T = TypeVar("T")


class Connections:
    """The backends ``make()`` gives, one per event loop, and the portal."""

    def __init__(self, make: Callable[[], Backend]) -> None:
        self._make = make
        self._loops: dict[asyncio.AbstractEventLoop, LoopBackend] = {}  # a backend per loop
        self._portal: Portal | None = None  # the sync facade's loop
        self._pid = os.getpid()
        self._lock = threading.Lock()

    async def backend(self) -> Backend:
        """The backend of the running event loop, opened there on first use (and
        again in a forked child, or after a failed opening); closed with its
        loop. Concurrent first uses wait for one opening."""
        if self._pid != os.getpid():
            self._forget()
        loop = asyncio.get_running_loop()
        held = self._loops.get(loop)
        if held is None or held.ended:
            for gone in [lp for lp in self._loops if lp.is_closed()]:
                del self._loops[gone]  # its connections closed with its loop
            held = self._loops[loop] = LoopBackend(loop, self._make)
        return await held.backend()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the portal, from synchronous code."""
        with self._lock:
            if self._pid != os.getpid():
                self._forget()
            if self._portal is None:
                self._portal = Portal()
                _close_at_exit(self)
            portal = self._portal
        try:
            return portal.run(coro)
        except BaseException:
            held = self._loops.get(portal.loop)
            if held is None or held.ended:  # it failed to open: keep no thread
                with self._lock:
                    if self._portal is portal:
                        self._portal = None
                        portal.close()
            raise

    def _forget(self) -> None:
        """In a forked child: the parent's connections and threads are not ours to use."""
        self._pid = os.getpid()
        for held in self._loops.values():
            held.abandon()
        self._loops, self._portal = {}, None

    def close(self) -> None:
        """Close the portal's backend, and those of event loops that are not
        running (a running loop's closes with ``aclose``; one whose loop is
        closed is gone with it)."""
        if self._pid != os.getpid():
            self._forget()
            return
        with self._lock:
            portal, self._portal = self._portal, None
        for loop, held in list(self._loops.items()):
            if portal is not None and loop is portal.loop:
                portal.run(held.close())
            elif not (loop.is_closed() or loop.is_running()):
                loop.run_until_complete(held.close())
            elif loop.is_running():
                continue
            del self._loops[loop]
        if portal is not None:
            portal.close()

    async def aclose(self) -> None:
        """Close the backend of the running event loop."""
        held = self._loops.pop(asyncio.get_running_loop(), None)
        if held is not None:
            await held.close()


def _close_at_exit(connections: Connections) -> None:
    """Close connections their App's user forgot to close, so that they end cleanly."""
    ref = weakref.ref(connections)

    def close() -> None:
        alive = ref()
        if alive is not None:
            alive.close()

    atexit.register(close)
