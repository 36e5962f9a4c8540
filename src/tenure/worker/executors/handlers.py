"""Running one handler and telling what its end means; shared by every executor."""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable
from typing import Any

from tenure.context import JobContext, running
from tenure.core.names import as_text
from tenure.errors import Fail, Retry
from tenure.hooks import Hooks
from tenure.worker.executors.base import HandlerEnd, Raise, Raised, Returned, Settled

TRACEBACK_LIMIT = 64 * 1024


def describe(exc: BaseException) -> str:
    text = as_text("".join(traceback.format_exception(exc)))  # a message may hold surrogates
    return text if len(text) <= TRACEBACK_LIMIT else text[:TRACEBACK_LIMIT] + "\n[truncated]"


def raised(exc: BaseException) -> Raised:
    """Classify what a handler raised."""
    text = describe(exc)
    if isinstance(exc, Retry):
        return Raised(Raise.RETRY, text, exc.in_, as_text(str(exc.reason)))
    if isinstance(exc, Fail):
        return Raised(Raise.FAIL, text)
    if isinstance(exc, asyncio.CancelledError):
        return Raised(Raise.CANCELLED, text)
    return Raised(Raise.ERROR, text)


def outcome_of(ctx: JobContext, value: Any, exc: BaseException | None) -> HandlerEnd:
    """What a handler's end means: settled by itself, returned, or raised."""
    if ctx.settled:
        return Settled(None if exc is None else describe(exc))
    return Returned(value) if exc is None else raised(exc)


def run_sync(fn: Callable[..., Any], ctx: JobContext, hooks: Hooks) -> HandlerEnd:
    """Run a sync handler, wrapped in the attempt's hooks; what its end means."""
    try:
        with running(ctx), hooks.around(ctx):
            return outcome_of(ctx, fn(**ctx.args), None)
    except BaseException as exc:
        return outcome_of(ctx, None, exc)


async def run_async(fn: Callable[..., Any], ctx: JobContext, hooks: Hooks) -> HandlerEnd:
    """Run an async handler as the current task; what its end means. What it
    raises ends here, SystemExit and KeyboardInterrupt too: out of a task they
    would stop the loop every async attempt of the executor runs on. So does a
    CancelledError nobody asked for: the task would look stopped, and the
    attempt would never end. A cancel the executor asked for (a stop, a
    deadline) propagates: the end is known already."""
    ctx._running_in(asyncio.current_task())
    try:
        with running(ctx), hooks.around(ctx):
            return outcome_of(ctx, await fn(**ctx.args), None)
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling() and not ctx.cancelled:
            raise
        return outcome_of(ctx, None, exc)
    except BaseException as exc:
        return outcome_of(ctx, None, exc)
