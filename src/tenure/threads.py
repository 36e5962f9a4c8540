"""Daemon threads that outlive ``concurrent.futures``' interpreter-exit shutdown.

``ThreadPoolExecutor`` stops its threads before ``atexit`` callbacks run, so an
App closed at exit could not reach its SQLite thread; and its threads are
joined at exit, so an abandoned handler would hold the process up. These are
daemon threads served from a queue: neither happens. They start on first use,
so that an object holding some (a SQLite backend built, not opened) can be in a
process that forks: the worker's zygote.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class DaemonThreads:
    """A fixed pool of daemon threads running submitted callables in order."""

    def __init__(self, size: int, name: str) -> None:
        self._work: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._size = size
        self._name = name
        self._started = False
        self._starting = threading.Lock()

    def submit(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on a free thread; it reports its own outcome."""
        if not self._started:
            self._start()
        self._work.put(fn)

    def _start(self) -> None:
        with self._starting:
            if not self._started:
                for i in range(self._size):
                    threading.Thread(target=self._serve, name=f"{self._name}-{i}",
                                     daemon=True).start()  # fmt: skip
                self._started = True

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a thread, awaited from the running event loop."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()

        def call() -> None:
            try:
                result = fn(*args)
            except BaseException as exc:
                loop.call_soon_threadsafe(resolve, done, None, exc)
            else:
                loop.call_soon_threadsafe(resolve, done, result, None)

        self.submit(call)
        return await done

    def _serve(self) -> None:
        while (fn := self._work.get()) is not None:
            fn()

    def shutdown(self) -> None:
        with self._starting:
            if self._started:
                for _ in range(self._size):
                    self._work.put(None)
            self._started = True  # none starts after a shutdown


def resolve(done: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    """Give ``done`` its result, or its exception when ``exc`` is set."""
    if done.done():  # its awaiter was cancelled
        return
    if exc is None:
        done.set_result(result)
    else:
        done.set_exception(exc)
