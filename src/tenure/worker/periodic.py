"""Run a component's ``run_once()`` every ``interval`` seconds until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol


class Periodic(Protocol):
    interval: float

    async def run_once(self) -> Any: ...


async def every(component: Periodic, stop: asyncio.Event, log: logging.Logger) -> None:
    """Call ``run_once`` now and then every ``interval`` (read afresh each time, so a
    policy change takes effect); errors are logged, never fatal."""
    while not stop.is_set():
        try:
            await component.run_once()
        except Exception:
            log.exception(
                "%s failed; trying again in %.2f s", type(component).__name__, component.interval
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), component.interval)
