"""The thin sync facade: run the async core's coroutines from synchronous code.

A :class:`Portal` owns an event loop in a daemon thread; ``run`` submits a
coroutine to it and waits. One portal serves any number of threads.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Portal:
    """An event loop in a thread of its own, for sync callers of async code."""

    def __init__(self, name: str = "tenure-portal") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._closed = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("this portal is closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("Portal.run called from the portal's own loop: use await")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # interrupted (Ctrl-C): the coroutine must not run on alone
            raise

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
