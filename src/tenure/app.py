"""The application: a task registry, and its API over a backend.

One async core, one thin sync facade: each method ``aname`` runs on the
caller's event loop, against a backend the App opens on that loop at its first
use there (no thread hop); its twin ``name`` runs the same coroutine on the
App's portal, an event loop in a thread of its own, for synchronous code
(both kept by ``tenure.connections``). ``app.queue(name)`` is the facade of
one queue (``tenure.queue``).

``App`` never imports ``tenure.worker``: producers stay light, and the worker
runtime is built on top of the same App.
"""

from __future__ import annotations

import logging
import os
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from datetime import timedelta
from functools import partial
from typing import Any, ParamSpec, TypeVar, Unpack, overload

from tenure.backends.base import Backend, CallerTransactions, Page, Tick, WorkerInfo
from tenure.backends.factory import check_shared, from_url, resolve_url
from tenure.config import (
    DEFAULT_MAX_PAYLOAD,
    DEFAULT_URL,
    MAX_PAYLOAD_RANGE,
    check_integer,
)
from tenure.connections import Connections
from tenure.core.events import Event
from tenure.core.names import check_job_id, check_name, shown
from tenure.core.schedules import Schedule
from tenure.core.states import State, parse_state
from tenure.core.urls import redacted
from tenure.core.workflows import Flow, Workflow, WorkflowSpec, compile_flow, is_workflow_id
from tenure.errors import AmbiguousJobId, InvalidInput, JobNotFound
from tenure.events import Steps, follow, follow_sync
from tenure.flows import wait_workflow
from tenure.hooks import Hooks
from tenure.job import Job, JobSpec, id_prefix
from tenure.queue import Queue
from tenure.results import check_timeout, wait_result
from tenure.task import EnqueueOptions, Task

__all__ = ["App", "Queue", "Task"]

ID_PREFIX_MIN = 8  # the shortest prefix that names a job (the first group of a new id)
AMBIGUOUS_SHOWN = 10  # ids an AmbiguousJobId lists

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

log = logging.getLogger("tenure")


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
        self.max_payload = max_payload
        self.read_only = read_only  # only reads: a SQLite file is never created or migrated
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.schedules: dict[str, Schedule] = {}  # periodic jobs, by name
        self.hooks = Hooks()  # users' code around attempts and at the worker's events
        self._bind(url)

    def _bind(self, url: str | None) -> None:
        """Set the storage of this App's jobs: ``url``, checked now, connected
        on first use. (An App whose URL is known later, as a Django project's
        before its settings are, binds on first use instead.)"""
        if url is None and not os.environ.get("TENURE_URL"):
            _say_default_once()
        self.url = resolve_url(url)
        self._connections = Connections(partial(from_url, self.url, read_only=self.read_only))
        # Validates the URL now (connects on first use); never opened, it enqueues
        # on a caller's connection (conn=), and describes the storage.
        self._described = from_url(self.url)
        check_shared(self.url)

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

    def periodic(
        self,
        *,
        cron: str | None = None,
        every: timedelta | float | None = None,
        tz: str | None = None,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        missed: str = "once",
        name: str | None = None,
    ) -> Callable[[Task[P, R]], Task[P, R]]:
        """Enqueue a job of the task below at every tick of a schedule:
        ``@app.periodic(cron="*/5 * * * *")`` or ``@app.periodic(every=timedelta(hours=1))``
        above ``@app.task(...)``. ``tz`` is the cron's IANA time zone (UTC by
        default); ``args`` and ``kwargs`` are the handler's arguments, fixed now;
        ``missed`` says what a worker starting up does about ticks no worker was
        running for: ``"once"`` (one job, for the latest) or ``"skip"``. Workers
        serving the task's queue tick; storage makes one job per tick, whose key
        is ``<name>@<tick>`` (see ``tenure.current_job().tick``). ``name``
        (default: the task's) tells two schedules of one task apart."""

        def register(task: Task[P, R]) -> Task[P, R]:
            if not isinstance(task, Task) or task.app is not self:
                raise InvalidInput(
                    "@app.periodic(...) goes above @app.task(...): it takes a task of this "
                    f"App, got {shown(task)}"
                )
            schedule_name = task.name if name is None else name
            if schedule_name in self.schedules:
                raise InvalidInput(
                    f"a schedule named {schedule_name!r} is already declared: give this one "
                    "another name=..."
                )
            if args is not None and not isinstance(args, list | tuple):
                raise InvalidInput(f"periodic args must be a list or tuple, got {shown(args)}")
            if kwargs is not None and not isinstance(kwargs, Mapping):
                raise InvalidInput(f"periodic kwargs must be a dict, got {shown(kwargs)}")
            arguments = task.arguments(tuple(args or ()), dict(kwargs or {}))
            task.spec(arguments)  # InvalidInput now for arguments that are not JSON
            schedule = Schedule.create(schedule_name, task.name, task.queue, arguments,
                                       cron=cron, every=every, tz=tz, missed=missed)  # fmt: skip
            self.schedules[schedule_name] = schedule
            return task

        return register

    def _specs(
        self, task: str, args_list: Iterable[dict[str, Any] | None], options: dict[str, Any]
    ) -> list[JobSpec]:
        names = EnqueueOptions.__optional_keys__
        if unknown := sorted(set(options) - names):
            raise InvalidInput(f"unknown option(s) {', '.join(unknown)}; known: "
                               f"{', '.join(sorted(names))}")  # fmt: skip
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
        conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> Job:
        """Enqueue one job of ``task`` (registered here or not) with ``args`` and
        ``options`` (queue, delay, run_at, priority, key, max_attempts, timeout,
        concurrency_key, debounce, unique_for: see ``Task.with_options``).
        With ``conn``, a connection of the caller's to this App's database (a
        psycopg ``Connection``, a ``sqlite3.Connection``), in its transaction:
        the job exists if and only if the caller commits."""
        [job] = self.store(self._specs(task, [args], dict(options)), conn)
        return job

    async def aenqueue(
        self,
        task: str,
        args: dict[str, Any] | None = None,
        *,
        conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> Job:
        """``enqueue`` on the running event loop; ``conn``: a psycopg
        ``AsyncConnection`` (or a ``sqlite3.Connection``)."""
        [job] = await self.astore(self._specs(task, [args], dict(options)), conn)
        return job

    def enqueue_many(
        self, task: str, args_list: Iterable[dict[str, Any]], *, conn: Any = None, **options: Any
    ) -> list[Job]:
        """Enqueue one job per argument dict, in one transaction (``conn``'s if given)."""
        specs = self._specs(task, args_list, options)
        return self.store(specs, conn) if specs else []

    async def aenqueue_many(
        self, task: str, args_list: Iterable[dict[str, Any]], *, conn: Any = None, **options: Any
    ) -> list[Job]:
        specs = self._specs(task, args_list, options)
        return await self.astore(specs, conn) if specs else []

    def store(self, specs: Sequence[JobSpec], conn: Any = None) -> list[Job]:
        """Store jobs already specified (see ``Task.specs``), in one transaction:
        ``conn``'s, on the caller's thread, when given."""
        if conn is None:
            return self.call(self.astore(specs))
        return self.callers(conn).enqueue(conn, specs)

    async def astore(self, specs: Sequence[JobSpec], conn: Any = None) -> list[Job]:
        """``store`` on the running event loop."""
        if conn is None:
            return await (await self.abackend()).enqueue(specs)
        return await self.callers(conn).aenqueue(conn, specs)

    def flush(self) -> None:
        """Store the jobs this App holds back for a transaction that will never
        commit: none for a plain App; ``tenure.contrib.django``'s holds those
        enqueued in a test's transaction. ``tenure.testing.drain`` calls it."""

    def callers(self, conn: object) -> CallerTransactions:
        """What enqueues in ``conn``'s transaction; InvalidInput unless ``conn``
        is a connection of the kind this App's storage takes."""
        callers = self._described.callers
        if callers is None:
            raise InvalidInput(
                f"conn= enqueues in a transaction of the App's own database, on PostgreSQL "
                f"or SQLite; this App's storage ({redacted(self.url)}) has none to share"
            )
        callers.check_kind(conn)
        return callers

    def workflow(self, flow: Flow, *, key: str | None = None, conn: Any = None) -> Workflow:
        """Store ``flow`` (``tenure.chain``/``group``, ``task.step``) as one workflow, all
        or nothing (in ``conn``'s transaction, as ``enqueue``); ``key``: while one of
        that key runs, it is returned instead. ``result``/``cancel`` take its id."""
        return self.store_workflow(compile_flow(flow, key=key), conn)

    async def aworkflow(self, flow: Flow, *, key: str | None = None, conn: Any = None) -> Workflow:
        spec = compile_flow(flow, key=key)
        if conn is not None:
            return await self.callers(conn).aenqueue_workflow(conn, spec)
        return await self.aworkflow_of(spec)

    def store_workflow(self, spec: WorkflowSpec, conn: Any = None) -> Workflow:
        """Store a workflow already compiled, as ``store`` stores jobs."""
        if conn is not None:
            return self.callers(conn).enqueue_workflow(conn, spec)
        return self.call(self.aworkflow_of(spec))

    async def aworkflow_of(self, spec: WorkflowSpec) -> Workflow:
        return await (await self.abackend()).enqueue_workflow(spec)

    def get_workflow(self, workflow_id: str) -> Workflow:  # its jobs in order; or JobNotFound
        return self.call(self.aget_workflow(workflow_id))

    async def aget_workflow(self, workflow_id: str) -> Workflow:
        return await (await self.abackend()).get_workflow(check_job_id(workflow_id))

    def get_job(self, job_id: str) -> Job:
        """The job with its history; JobNotFound if absent. ``job_id`` may be a
        unique prefix of the id (see ``resolve_job_id``)."""
        return self.call(self.aget_job(job_id))

    async def aget_job(self, job_id: str) -> Job:
        return await self._by_id(job_id, lambda backend, found: backend.get(found))

    def resolve_job_id(self, job_id: str) -> str:
        """The id of the one job ``job_id`` names: its whole id, or a prefix of
        it of at least ``ID_PREFIX_MIN`` characters (dashes may be left out)
        that no other job's id begins with. JobNotFound if there is none;
        AmbiguousJobId, listing some, if there are several."""
        return self.call(self.aresolve_job_id(job_id))

    async def aresolve_job_id(self, job_id: str) -> str:
        check_job_id(job_id)
        backend = await self.abackend()
        found = await backend.match_ids(id_prefix(job_id), AMBIGUOUS_SHOWN + 1)
        if job_id in found:
            return job_id
        if len(job_id) < ID_PREFIX_MIN or not found:
            nor = ", nor one whose id begins with it" if len(job_id) >= ID_PREFIX_MIN else ""
            raise JobNotFound(f"no job with id {job_id!r}{nor}")
        if len(found) > 1:
            raise AmbiguousJobId(job_id, found[:AMBIGUOUS_SHOWN], len(found) > AMBIGUOUS_SHOWN)
        return found[0]

    async def _by_id(self, job_id: str, verb: Callable[[Backend, str], Awaitable[T]]) -> T:
        """``verb`` on the job ``job_id`` names: its id at once, else (absent,
        and long enough to be a prefix) the id it is a unique prefix of."""
        backend = await self.abackend()
        try:
            return await verb(backend, job_id)
        except JobNotFound:
            if len(job_id) < ID_PREFIX_MIN:
                raise
        return await verb(backend, await self.aresolve_job_id(job_id))

    def result(self, job_id: str, timeout: float | None = None) -> Any:
        """The result of job ``job_id`` (its handler's return value, as JSON
        decodes it) once it completes, waiting for it; ``JobFailed`` if it is
        dead, ``JobCancelled`` if cancelled, ``TimeoutError`` after ``timeout``
        seconds (None: wait for ever), ``JobNotFound``. Woken by the queue's
        lifecycle events (see ``tenure.results``). Of a workflow's id, the
        workflow's result (``tenure.flows.wait_workflow``)."""
        return self.call(self.aresult(job_id, timeout))

    async def aresult(self, job_id: str, timeout: float | None = None) -> Any:
        check_timeout(timeout)
        if is_workflow_id(job_id):
            return await wait_workflow(await self.abackend(), job_id, timeout)
        return await wait_result(await self.abackend(), job_id, timeout)

    def cancel(self, job_id: str) -> Job | Workflow:
        return self.call(self.acancel(job_id))

    async def acancel(self, job_id: str) -> Job | Workflow:
        """Cancel a job: a scheduled or queued one at once; an active one is
        marked ``cancel_requested`` and stopped by its worker within about a
        heartbeat (docs/aborting.md). InvalidTransition for a finished job.
        ``job_id`` may be a unique prefix of the id (see ``resolve_job_id``).
        Of a workflow's id: every unfinished step of it, and the workflow."""
        if is_workflow_id(job_id):
            return await (await self.abackend()).cancel_workflow(job_id)
        return await self._by_id(job_id, lambda backend, found: backend.cancel(found))

    def jobs(
        self,
        queue: str | None = None,
        state: State | str | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page:
        """A page of jobs of every queue (or one), newest first."""
        return self.call(self.ajobs(queue, state, limit, after))

    async def ajobs(
        self,
        queue: str | None = None,
        state: State | str | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page:
        st = None if state is None else parse_state(state)
        return await (await self.abackend()).list(queue, st, limit, after)

    def queue(self, name: str = "default") -> Queue:
        return Queue(self, name)

    def queues(self) -> list[str]:
        return self.call(self.aqueues())

    async def aqueues(self) -> list[str]:
        return await (await self.abackend()).queues()

    def last_ticks(self) -> dict[str, Tick]:
        """By schedule name, the last tick of each of this App's schedules that
        storage made a job for (a schedule never ticked is absent)."""
        return self.call(self.alast_ticks())

    async def alast_ticks(self) -> dict[str, Tick]:
        names = {(s.queue, s.name): s.name for s in self.schedules.values()}
        found = await (await self.abackend()).last_ticks(list(names))
        return {names[pair]: tick for pair, tick in found.items()}

    def workers(self) -> list[WorkerInfo]:
        """The registered workers, with the leases each holds."""
        return self.call(self.aworkers())

    async def aworkers(self) -> list[WorkerInfo]:
        return await (await self.abackend()).workers()

    # -- lifecycle events --------------------------------------------------

    def events(
        self, queue: str | None = None, after: str | None = None, timeout: float | None = None
    ) -> Iterator[Event]:
        """Lifecycle events of ``queue`` (None: every queue) after the one whose
        id is ``after`` (None: the oldest kept), in order; waits for new ones,
        and ends after ``timeout`` seconds without one (None: never)."""
        return follow_sync(Steps(self.backend, queue, after, timeout), self.call)

    async def aevents(
        self, queue: str | None = None, after: str | None = None, timeout: float | None = None
    ) -> AsyncIterator[Event]:
        """``events``, for ``async for``, on the caller's event loop."""
        steps = Steps(await self.abackend(), queue, after, timeout)
        async for event in follow(steps, _awaited):
            yield event

    # -- plumbing ----------------------------------------------------------

    async def abackend(self) -> Backend:
        """The backend of the running event loop, opened there on first use (and
        again in a forked child, or after a failed opening); closed with its
        loop. Concurrent first uses wait for one opening."""
        return await self._connections.backend()

    @property
    def backend(self) -> Backend:
        """The sync facade's backend (on the portal's loop), opened on first use."""
        return self.call(self.abackend())

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the App's portal, from synchronous code: the sync facade."""
        return self._connections.call(coro)

    def close(self) -> None:
        """Close the sync facade's backend, and those of event loops that are not
        running (a running loop's closes with ``await app.aclose()``, or ``async
        with app:``; one whose loop is closed is gone with it)."""
        self._connections.close()

    async def aclose(self) -> None:
        """Close the backend of the running event loop."""
        await self._connections.aclose()

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> App:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


_said_default = False


def _say_default_once() -> None:
    """An App(None) without TENURE_URL would silently write to a new local
    file: say so, once per process (a log record: tests turn warnings into errors)."""
    global _said_default  # noqa: PLW0603 - once per process
    if not _said_default:
        _said_default = True
        log.warning("App(None) and TENURE_URL is not set: using %s (%s); set TENURE_URL or "
                    "pass a URL", DEFAULT_URL, os.path.join(os.getcwd(), "tenure.db"))  # fmt: skip


async def _awaited(coro: Coroutine[Any, Any, T]) -> T:
    return await coro
