"""Test mode: run tasks in your own tests, without a separate worker.

``run(task, *args, **kwargs)`` calls a task's handler here and now, as a
worker's attempt would: arguments and result go through JSON, and
``tenure.current_job()`` is real (an id, attempt 1, a fence, ``progress()``
checked as JSON and kept in memory, ``heartbeat()``), inside the App's
``around_attempt`` hooks. Nothing is stored unless the handler enqueues.
What the handler raises (``Retry``, ``Fail`` or any other) is raised to the
caller; no timeout applies.

``drain(app)`` runs a real worker in this process (a thread pool, in a thread
of its own) until the App's queues hold no due job, and says what it did:
for a test that enqueues and wants the work done, on a temporary SQLite file
(``sqlite:///{tmp_path}/tenure.db``) or any other storage.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar, overload

import orjson

from tenure.app import App, Task
from tenure.config import WorkerConfig
from tenure.context import JobContext, running
from tenure.core.ids import new_job_id
from tenure.core.payload import encode, encode_args
from tenure.core.states import State
from tenure.errors import TenureError

__all__ = ["Drained", "Ran", "arun", "attempt", "drain", "run"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


@dataclass
class Ran:
    """One attempt run by :func:`attempt`: its result (as JSON decodes it), the
    progress it reported, in order, and the context its handler saw."""

    result: Any
    progress: list[Any] = field(default_factory=list)
    context: JobContext | None = None


@overload
def run(  # an async handler's result is what it awaits
    task: Task[P, Coroutine[Any, Any, T]], /, *args: P.args, **kwargs: P.kwargs
) -> T: ...


@overload
def run(task: Task[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R: ...


def run(task: Task[P, Any], /, *args: P.args, **kwargs: P.kwargs) -> Any:
    """Run ``task``'s handler here with these arguments, as one attempt of a
    job would run on a worker; its result as JSON decodes it."""
    return attempt(task, *args, **kwargs).result


@overload
async def arun(
    task: Task[P, Coroutine[Any, Any, T]], /, *args: P.args, **kwargs: P.kwargs
) -> T: ...


@overload
async def arun(task: Task[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R: ...


async def arun(task: Task[P, Any], /, *args: P.args, **kwargs: P.kwargs) -> Any:
    """``run``, from a running event loop: an async handler runs on it, a sync
    one in a thread."""
    ran = Ran(None)
    fn: Callable[..., Any] = task.fn
    with _attempt(task, args, kwargs, ran) as ctx:
        if task.is_async:
            value = await fn(**ctx.args)
        else:
            value = await asyncio.to_thread(fn, **ctx.args)  # the context goes along
        ran.result = _as_stored(task, value)
    return ran.result


def attempt(task: Task[P, Any], /, *args: P.args, **kwargs: P.kwargs) -> Ran:
    """``run``, returning the whole attempt: result, progress reports, context."""
    ran = Ran(None)
    fn: Callable[..., Any] = task.fn
    with _attempt(task, args, kwargs, ran) as ctx:
        if task.is_async:
            _no_running_loop()
            value = asyncio.run(fn(**ctx.args))
        else:
            value = fn(**ctx.args)
        ran.result = _as_stored(task, value)
    return ran


@contextlib.contextmanager
def _attempt(
    task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any], ran: Ran
) -> Iterator[JobContext]:
    if not isinstance(task, Task):
        raise TypeError(f"tenure.testing runs a task (app.task), got {type(task).__name__}")
    arguments = task.arguments(args, kwargs)
    stored = orjson.loads(encode_args(arguments, limit=task.app.max_payload))
    ctx = JobContext(
        id=new_job_id(),
        task=task.name,
        queue=task.options.get("queue", task.queue),
        attempt=1,
        fence=1,
        args=stored,
        _progress=ran.progress.append,
        _heartbeat=lambda: None,
        _transaction=_no_transaction,
    )
    ran.context = ctx
    with running(ctx), task.app.hooks.around(ctx):
        yield ctx


def _as_stored(task: Task[Any, Any], value: Any) -> Any:
    """What a worker would store of the result (InvalidInput if it could not)."""
    return orjson.loads(encode(value, what="job result", limit=task.app.max_payload))


def _no_running_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise TenureError("an event loop runs here: use await tenure.testing.arun(task, ...)")


@contextlib.contextmanager
def _no_transaction(job_id: str, fence: int, result: Any) -> Iterator[Any]:
    raise TenureError(
        "tenure.testing.run stores nothing, so job.transaction() has no job to complete: "
        "test such a handler with tenure.testing.drain on a temporary SQLite database"
    )
    yield  # pragma: no cover - a generator, for contextmanager


# -- drain -----------------------------------------------------------------


@dataclass(frozen=True)
class Drained:
    """What :func:`drain` did: attempts run, and how many more jobs of the
    queues it drained are completed and dead than before; ``scheduled``: jobs
    left waiting for a later time (a retry's backoff, a delay)."""

    attempts: int
    completed: int
    dead: int
    scheduled: int


def drain(app: App, queues: Iterable[str] | None = None, *, concurrency: int = 4) -> Drained:
    """Run a worker of ``app`` in this process until ``queues`` (None: those of
    its tasks and those in storage) hold no due job: jobs its handlers enqueue
    run too; jobs due later (a retry's backoff) stay. Handlers run on a thread
    pool of ``concurrency`` threads; the worker is real (leases, heartbeats,
    retries, dead-lettering), only in a thread of its own."""
    app.flush()  # jobs held for a test's transaction, which never commits
    names = tuple(sorted(set(queues or ()))) or _queues_of(app)
    config = WorkerConfig(queues=names, concurrency=concurrency, pool="thread", burst=True)
    before = {q: app.queue(q).counts() for q in names}
    attempts = 0
    while True:
        attempts += _burst(app, config)
        app.flush()  # what its handlers enqueued in the test's transaction
        if not _due(app, names):
            break
    after = {q: app.queue(q).counts() for q in names}

    def grown(state: State) -> int:
        return sum(after[q][state] - before[q][state] for q in names)

    scheduled = sum(after[q][State.SCHEDULED] for q in names)
    return Drained(attempts, grown(State.COMPLETED), grown(State.DEAD), scheduled)


def _queues_of(app: App) -> tuple[str, ...]:
    return tuple(sorted({t.queue for t in app.tasks.values()} | set(app.queues()))) or ("default",)


def _burst(app: App, config: WorkerConfig) -> int:
    """One worker in burst mode, in a thread of its own (a loop of its own, and
    no signal handlers taken from the caller); the attempts it ran."""
    from tenure.worker.supervisor import Supervisor  # the App never imports the worker

    supervisor = Supervisor(app, config)
    failed: list[BaseException] = []

    def work() -> None:
        try:
            asyncio.run(supervisor.run())
        except BaseException as exc:  # raised to the caller
            failed.append(exc)

    thread = threading.Thread(target=work, name="tenure-testing-worker")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return supervisor.processed


def _due(app: App, queues: tuple[str, ...]) -> bool:
    """Whether a job of ``queues`` is due: queued, or scheduled and due now
    (a sweep makes those queued, as a worker's does)."""
    app.call(_sweep(app))
    return any(app.queue(q).counts()[State.QUEUED] for q in queues)


async def _sweep(app: App) -> None:
    await (await app.abackend()).rescue()
