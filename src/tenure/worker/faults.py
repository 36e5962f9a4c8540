"""Storage faults as a worker lives them: episodes, not errors.

While storage is down, full or locked, every call the worker makes fails until
the fault goes. Each failure is not news: for each kind of call (claim,
heartbeat, sweep, …) the worker says once that it fails and why, backs off its
claims (capped exponential, with jitter), and says once that the calls work
again, after how long and how many failures. ``StorageLost`` is not a fault
that goes: the worker is told to stop.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from tenure.core.urls import one_line
from tenure.errors import StorageLost, TenureError

log = logging.getLogger("tenure.worker")

BACKOFF_FIRST = 0.05  # seconds before the first claim after a failed one
BACKOFF_MAX = 2.0  # how long a recovered storage may wait for the next claim


@dataclass
class Episode:
    """One run of failures of one kind of call, from its first failure."""

    began: float
    failures: int = 0


class StorageFaults:
    """The fault episodes of one worker, by kind of call."""

    def __init__(
        self,
        on_lost: Callable[[StorageLost], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.on_lost = on_lost
        self.clock = clock
        self.jitter = jitter
        self.episodes: dict[str, Episode] = {}

    def failed(self, what: str, exc: TenureError) -> float:
        """A call of kind ``what`` failed: say so if it is news. Returns how long
        to wait before the next such call (claims back off; others keep their
        own interval)."""
        if isinstance(exc, StorageLost):
            self.on_lost(exc)
            return BACKOFF_MAX
        cause = one_line(str(exc))
        episode = self.episodes.get(what)
        if episode is None:
            episode = self.episodes[what] = Episode(self.clock())
            log.warning("storage fault: %s failed: %s (retrying, quietly until it works)",
                        what, cause)  # fmt: skip
        else:
            log.debug("storage fault: %s failed again: %s", what, cause)
        episode.failures += 1
        delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2.0 ** (episode.failures - 1))
        return delay * (0.5 + self.jitter() / 2)

    def succeeded(self, what: str) -> None:
        """A call of kind ``what`` worked: the end of its episode, if it had one."""
        if self.episodes and (episode := self.episodes.pop(what, None)) is not None:
            log.warning("storage fault over: %s works again after %.1f s (%d failures)",
                        what, self.clock() - episode.began, episode.failures)  # fmt: skip

    @property
    def failing(self) -> bool:
        return bool(self.episodes)
