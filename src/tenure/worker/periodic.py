"""Run a component's ``run_once()`` every ``interval`` seconds until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol


class Periodic(Protocol):
    interval: float

    async def run_once(self) -> Any: ...


async def every(
    component: Periodic,
    stop: asyncio.Event,
    log: logging.Logger,
    wait_after: Callable[[Any], float] | None = None,
) -> None:
    """Call ``run_once`` now and then every ``interval`` (read afresh each time, so a
    policy change takes effect), or after what ``wait_after`` makes of its result;
    errors are logged, never fatal."""
    while not stop.is_set():
        wait = component.interval
        try:
            result = await component.run_once()
            if wait_after is not None:
                wait = wait_after(result)
        except Exception:
            log.exception(
                "%s failed; trying again in %.2f s", type(component).__name__, component.interval
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), wait)
