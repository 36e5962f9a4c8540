"""The application: a task registry and a synchronous facade over a backend.

``App`` never imports ``tenure.worker``: producers stay light, and the worker
runtime is built on top of the same App.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import inspect
import os
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, overload

from tenure.backends.base import Backend, Page
from tenure.backends.factory import from_url, resolve_url
from tenure.config import DEFAULT_MAX_PAYLOAD, MAX_PAYLOAD_RANGE, QueuePolicy, check_integer
from tenure.core.events import Event
from tenure.core.names import check_job_ids, check_name
from tenure.core.states import State, parse_state
from tenure.errors import InvalidInput
from tenure.events import Steps, follow, follow_sync
from tenure.job import Job, JobSpec
from tenure.portal import Portal

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True)
class Task(Generic[P, R]):
    """A registered handler. Call it to run it here; ``enqueue`` it to run it on a worker."""

    app: App
    fn: Callable[P, R]
    name: str
    queue: str
    timeout: float | None
    max_attempts: int | None
    priority: int

    @functools.cached_property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def enqueue(self, **kwargs: Any) -> Job:
        """Enqueue one job of this task with ``kwargs`` as its arguments."""
        return self.app.enqueue(self.name, kwargs)

    def enqueue_many(self, args_list: Iterable[dict[str, Any]], **options: Any) -> list[Job]:
        """Enqueue one job per argument dict, in one round trip."""
        return self.app.enqueue_many(self.name, args_list, **options)

    def spec(self, args: dict[str, Any] | None = None, **options: Any) -> JobSpec:
        """The JobSpec of one job of this task; options override the task's defaults."""
        [spec] = self.specs([args], **options)
        return spec

    def specs(self, args_list: Iterable[dict[str, Any] | None], **options: Any) -> list[JobSpec]:
        """The JobSpecs of jobs of this task, one per argument dict, options as for spec()."""
        defaults: dict[str, Any] = {
            "queue": self.queue,
            "timeout": self.timeout,
            "max_attempts": self.max_attempts,
            "priority": self.priority,
        }
        merged = {**defaults, **{k: v for k, v in options.items() if v is not None}}
        return JobSpec.create_many(self.name, args_list, max_payload=self.app.max_payload,
                                   **merged)  # fmt: skip


class Queue:
    """One queue of an App: counts, policy and its dead-letter queue."""

    def __init__(self, app: App, name: str) -> None:
        self.app = app
        self.name = check_name("queue", name)

    def counts(self) -> dict[State, int]:
        return self.app.call(self.app.backend.counts(self.name))

    def policy(self) -> QueuePolicy:
        return self.app.call(self.app.backend.get_policy(self.name))

    def set_policy(self, **changes: Any) -> QueuePolicy:
        """Change some fields of the stored policy, atomically (a concurrent
        change of other fields is kept); every worker reads it."""
        return self.app.call(self.app.backend.change_policy(self.name, changes))

    def jobs(
        self, state: State | str | None = None, limit: int = 50, after: str | None = None
    ) -> Page:
        return self.app.jobs(self.name, state, limit, after)

    def dead(self, limit: int = 50, after: str | None = None) -> Page:
        """A page of the dead-letter queue, newest first."""
        return self.jobs(State.DEAD, limit, after)

    def retry_dead(self, job_ids: Iterable[str] | None = None) -> int:
        """Requeue dead jobs (all when ``job_ids`` is None) with their budgets reset."""
        return self.app.call(self.app.backend.retry_dead(self.name, check_job_ids(job_ids)))

    def purge_dead(self, job_ids: Iterable[str] | None = None) -> int:
        """Delete dead jobs (all when ``job_ids`` is None)."""
        return self.app.call(self.app.backend.purge_dead(self.name, check_job_ids(job_ids)))


class App:
    """Tasks and the storage their jobs live in.

    ``url`` selects the backend: ``sqlite:///tenure.db`` (the default),
    ``postgresql://…`` or ``redis://…``; ``None`` reads ``$TENURE_URL``.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        read_only: bool = False,
    ) -> None:
        check_integer("max_payload", max_payload, *MAX_PAYLOAD_RANGE)
        self.url = resolve_url(url)
        self.max_payload = max_payload
        self.read_only = read_only  # only reads: a SQLite file is never created or migrated
        self.tasks: dict[str, Task[Any, Any]] = {}
        self._backend: Backend | None = None
        self._portal: Portal | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()
        from_url(self.url)  # validate the URL now, connect on first use

    # -- tasks -------------------------------------------------------------

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str = "default",
        timeout: float | None = None,
        max_attempts: int | None = None,
        priority: int = 0,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        queue: str = "default",
        timeout: float | None = None,
        max_attempts: int | None = None,
        priority: int = 0,
    ) -> Any:
        """Register a handler: ``@app.task`` or ``@app.task(queue=..., timeout=...)``."""

        def register(f: Callable[..., Any]) -> Task[Any, Any]:
            task_name = check_name("task", name or getattr(f, "__name__", ""))
            if task_name in self.tasks and self.tasks[task_name].fn is not f:
                raise InvalidInput(f"a task named {task_name!r} is already registered")
            # Validates the options with the messages enqueue would give.
            JobSpec.create(task_name, queue=queue, timeout=timeout, max_attempts=max_attempts,
                           priority=priority)  # fmt: skip
            t = Task(self, f, task_name, queue, timeout, max_attempts, priority)
            self.tasks[task_name] = t
            return t

        return register if fn is None else register(fn)

    def _specs(
        self, task: str, args_list: Iterable[dict[str, Any] | None], options: dict[str, Any]
    ) -> list[JobSpec]:
        known = self.tasks.get(task)
        if known is not None:
            return known.specs(args_list, **options)
        opts = {k: v for k, v in options.items() if v is not None}
        return JobSpec.create_many(task, args_list, max_payload=self.max_payload, **opts)

    # -- producers ---------------------------------------------------------

    def enqueue(
        self,
        task: str,
        args: dict[str, Any] | None = None,
        *,
        queue: str | None = None,
        delay: float | None = None,
        run_at: float | None = None,
        priority: int | None = None,
        key: str | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
    ) -> Job:
        """Enqueue one job of ``task`` (registered here or not) with ``args``."""
        options = {"queue": queue, "delay": delay, "run_at": run_at, "priority": priority,
                   "key": key, "max_attempts": max_attempts, "timeout": timeout}  # fmt: skip
        [job] = self.call(self.backend.enqueue(self._specs(task, [args], options)))
        return job

    def enqueue_many(
        self, task: str, args_list: Iterable[dict[str, Any]], **options: Any
    ) -> list[Job]:
        """Enqueue one job per argument dict, in one transaction."""
        specs = self._specs(task, args_list, options)
        return self.call(self.backend.enqueue(specs)) if specs else []

    def get_job(self, job_id: str) -> Job:
        """The job with its history; JobNotFound if absent."""
        return self.call(self.backend.get(job_id))

    def cancel(self, job_id: str) -> Job:
        return self.call(self.backend.cancel(job_id))

    def jobs(
        self,
        queue: str | None = None,
        state: State | str | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page:
        """A page of jobs of every queue (or one), newest first."""
        st = None if state is None else parse_state(state)
        return self.call(self.backend.list(queue, st, limit, after))

    def queue(self, name: str = "default") -> Queue:
        return Queue(self, name)

    def queues(self) -> list[str]:
        return self.call(self.backend.queues())

    # -- lifecycle events --------------------------------------------------

    def events(
        self, queue: str | None = None, after: str | None = None, timeout: float | None = None
    ) -> Iterator[Event]:
        """Lifecycle events of ``queue`` (None: every queue) after the one whose
        id is ``after`` (None: the oldest kept), in order; waits for new ones,
        and ends after ``timeout`` seconds without one (None: never)."""
        return follow_sync(Steps(self.backend, queue, after, timeout), self.call)

    def aevents(
        self, queue: str | None = None, after: str | None = None, timeout: float | None = None
    ) -> AsyncIterator[Event]:
        """``events``, for ``async for``: reads run on the App's portal."""
        steps = Steps(self.backend, queue, after, timeout)

        async def on_portal(coro: Coroutine[Any, Any, list[Event]]) -> list[Event]:
            assert self._portal is not None
            future = asyncio.run_coroutine_threadsafe(coro, self._portal.loop)
            return await asyncio.wrap_future(future)

        return follow(steps, on_portal)

    # -- plumbing ----------------------------------------------------------

    @property
    def backend(self) -> Backend:
        """The backend, opened on first use (and again in a forked child)."""
        if self._backend is None or self._pid != os.getpid():
            with self._lock:
                if self._backend is None or self._pid != os.getpid():
                    self._pid = os.getpid()
                    self._backend = None
                    portal = Portal()
                    backend = from_url(self.url, read_only=self.read_only)
                    try:
                        portal.run(backend.open())
                    except BaseException:
                        portal.run(backend.close())
                        portal.close()
                        raise
                    self._portal, self._backend = portal, backend
                    _close_at_exit(self)
        return self._backend

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one of the backend's coroutines from synchronous code."""
        self.backend  # noqa: B018 - opens the backend and the portal
        assert self._portal is not None
        return self._portal.run(coro)

    def close(self) -> None:
        if self._backend is not None and self._portal is not None and self._pid == os.getpid():
            self._portal.run(self._backend.close())
            self._portal.close()
        self._backend = None
        self._portal = None

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_at_exit(app: App) -> None:
    """Close an App its user forgot to close, so that connections end cleanly."""
    ref = weakref.ref(app)

    def close() -> None:
        alive = ref()
        if alive is not None:
            alive.close()

    atexit.register(close)
