"""Run a component's ``run_once()`` every ``interval`` seconds until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from tenure.errors import TenureError

if TYPE_CHECKING:
    from tenure.worker.faults import StorageFaults


class Periodic(Protocol):
    """A maintenance component that ``every`` runs: one ``run_once`` per interval."""

    interval: float

    async def run_once(self) -> Any: ...


async def every(
    component: Periodic,
    stop: asyncio.Event,
    log: logging.Logger,
    wait_after: Callable[[Any], float] | None = None,
    *,
    faults: StorageFaults | None = None,
    what: str = "",
) -> None:
    """Call ``run_once`` now and then every ``interval`` (read afresh each time, so a
    policy change takes effect), or after what ``wait_after`` makes of its result;
    errors are logged, never fatal. With ``faults``, tenure's own errors (storage
    faults) are told to it, as calls of kind ``what``, which says them once."""
    what = what or type(component).__name__
    while not stop.is_set():
        wait = component.interval
        try:
            result = await component.run_once()
        except TenureError as exc:
            if faults is None:
                log.exception("%s failed; trying again in %.2f s", what, wait)
            else:
                faults.failed(what, exc)
        except Exception:
            log.exception("%s failed; trying again in %.2f s", what, wait)
        else:
            if faults is not None:
                faults.succeeded(what)
            if wait_after is not None:
                wait = wait_after(result)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), wait)
