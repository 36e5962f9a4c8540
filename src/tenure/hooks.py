"""Hooks: users' code run by the worker around attempts and at its events.

Registered on ``app.hooks`` with decorators::

    @app.hooks.around_attempt
    @contextlib.contextmanager
    def timed(job):                     # tenure.current_job()'s context
        began = time.monotonic()
        yield                           # the handler runs here
        metrics.observe(job.task, time.monotonic() - began)

    @app.hooks.on_dead
    def page(job): ...                  # the tenure.Job as stored, dead_reason set

    @app.hooks.on_worker_start
    def hello(worker_id): ...           # and on_worker_stop

An ``around_attempt`` hook is a function of the attempt's context that returns
a context manager: it is entered before the handler, in the thread (or on the
event loop, for async handlers) and the process that runs it, and exited after,
seeing what the handler raised. It wraps the call; it cannot change the
attempt's result (what it returns from ``__exit__`` is ignored). The other
hooks run in the worker's supervisor; ``on_dead`` where the job was
dead-lettered, which may be another worker's sweep.

A hook that raises is logged and skipped: the attempt's bookkeeping goes on as
if it were not there.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from tenure.traces import attempt_span, traced

if TYPE_CHECKING:
    from tenure.context import JobContext
    from tenure.job import Job

log = logging.getLogger("tenure.hooks")

Around = Callable[["JobContext"], AbstractContextManager[Any]]
OnDead = Callable[["Job"], object]
OnWorker = Callable[[str], object]
F = TypeVar("F", bound=Callable[..., Any])


class Hooks:
    """The hooks of one App (``app.hooks``)."""

    def __init__(self) -> None:
        self.arounds: list[Around] = []
        self.deads: list[OnDead] = []
        self.starts: list[OnWorker] = []
        self.stops: list[OnWorker] = []

    def around_attempt(self, hook: Around) -> Around:
        """Register a context manager factory that wraps every attempt."""
        self.arounds.append(_callable("around_attempt", hook))
        return hook

    def on_dead(self, hook: OnDead) -> OnDead:
        """Register a function called with each job this worker dead-letters."""
        self.deads.append(_callable("on_dead", hook))
        return hook

    def on_worker_start(self, hook: OnWorker) -> OnWorker:
        """Register a function called with the worker's id once it is registered."""
        self.starts.append(_callable("on_worker_start", hook))
        return hook

    def on_worker_stop(self, hook: OnWorker) -> OnWorker:
        """Register a function called with the worker's id when it has drained."""
        self.stops.append(_callable("on_worker_stop", hook))
        return hook

    def around(self, job: JobContext) -> AbstractContextManager[None]:
        """Enter every ``around_attempt`` hook, run the body, exit them in reverse;
        all in the attempt's trace span (traces.py), when traced. Without
        either, nothing: this wraps every attempt."""
        if not self.arounds and not traced(job):
            return contextlib.nullcontext()
        return self._traced_around(job)

    @contextlib.contextmanager
    def _traced_around(self, job: JobContext) -> Iterator[None]:
        with attempt_span(job), self._around(job):
            yield

    @contextlib.contextmanager
    def _around(self, job: JobContext) -> Iterator[None]:
        entered: list[AbstractContextManager[Any]] = []
        for hook in self.arounds:
            try:
                manager = hook(job)
                manager.__enter__()
            except Exception:
                log.exception("around_attempt hook %s failed before job %s", _name(hook), job.id,
                              extra={"job_id": job.id, "task": job.task})  # fmt: skip
            else:
                entered.append(manager)
        raised: BaseException | None = None
        try:
            yield
        except BaseException as exc:
            raised = exc
            raise
        finally:
            for manager in reversed(entered):
                try:
                    manager.__exit__(type(raised) if raised else None, raised,
                                     raised.__traceback__ if raised else None)  # fmt: skip
                except Exception:
                    log.exception("around_attempt hook failed after job %s", job.id,
                                  extra={"job_id": job.id, "task": job.task})  # fmt: skip

    def dead(self, job: Job) -> None:
        for hook in self.deads:
            _call(hook, job, what=f"job {job.id}")

    def worker_started(self, worker_id: str) -> None:
        for hook in self.starts:
            _call(hook, worker_id, what=f"worker {worker_id}")

    def worker_stopped(self, worker_id: str) -> None:
        for hook in self.stops:
            _call(hook, worker_id, what=f"worker {worker_id}")


def _callable(kind: str, hook: F) -> F:
    if not callable(hook):
        from tenure.errors import InvalidInput

        raise InvalidInput(f"a {kind} hook must be callable, got {hook!r}")
    return hook


def _call(hook: Callable[[Any], object], arg: object, *, what: str) -> None:
    try:
        hook(arg)
    except Exception:
        log.exception("hook %s failed for %s", _name(hook), what)


def _name(hook: Callable[..., Any]) -> str:
    return getattr(hook, "__qualname__", None) or repr(hook)
