"""A task: a registered handler, its defaults, and typed enqueue.

A job's arguments are one JSON object, and the worker calls the handler with
them as keywords. So ``enqueue`` binds what it is given, positional arguments
included, to the handler's parameters by name, and refuses at once what would
not bind (a mistyped name, a missing argument, an option such as ``delay``
passed as an argument): the job would only fail on every attempt. Options go
through ``with_options``, never through the arguments.

A task stores its jobs through the App that registered it; ``tenure.app``
imports this module, so this one names ``App`` for the type checker only.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypedDict, TypeVar

from tenure.config import QueuePolicy
from tenure.core.workflows import Step
from tenure.errors import InvalidInput
from tenure.job import Job, JobSpec

if TYPE_CHECKING:
    from tenure.app import App

P = ParamSpec("P")
R = TypeVar("R")

# What with_options takes: a job's options, never its arguments.
OPTIONS = ("delay", "run_at", "priority", "key", "queue", "timeout", "max_attempts", "conn",
           "may_fail", "concurrency_key", "debounce", "unique_for")  # fmt: skip
_PLAIN = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


class EnqueueOptions(TypedDict, total=False):
    """A job's options, as ``App.enqueue`` takes them by name (see
    ``Task.with_options``); None, or absent: the task's, else the queue's."""

    queue: str | None
    delay: float | None
    run_at: float | None
    priority: int | None
    key: str | None
    max_attempts: int | None
    timeout: float | None
    concurrency_key: str | None
    debounce: float | None
    unique_for: float | None


@dataclass(frozen=True)
class Parameters:
    """What a handler accepts as keywords, for a check that needs no ``bind``."""

    signature: inspect.Signature
    names: frozenset[str]  # keyword parameters
    required: frozenset[str]
    any_keyword: bool  # it has **kwargs

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> Parameters | None:
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):  # some builtins and C functions have none
            return None
        params = sig.parameters.values()
        names = frozenset(p.name for p in params if p.kind in _PLAIN)
        required = frozenset(p.name for p in params if p.kind in _PLAIN and p.default is p.empty)
        any_keyword = any(p.kind is p.VAR_KEYWORD for p in params)
        return cls(sig, names, required, any_keyword)

    def fit(self, keywords: dict[str, Any]) -> bool:
        keys = keywords.keys()
        return (self.any_keyword or keys <= self.names) and self.required <= keys


@dataclass(frozen=True)
class Task(Generic[P, R]):
    """A registered handler. Call it to run it here; ``enqueue`` it to run it on a worker.

    ``queue``, ``timeout``, ``max_attempts`` and ``priority`` are the task's
    defaults: every job of the task gets them unless its own options say
    otherwise, and a worker applies the timeout and attempt budget of the
    task it has registered to jobs enqueued by name too.
    """

    app: App
    fn: Callable[P, R]
    name: str
    queue: str
    timeout: float | None
    max_attempts: int | None
    priority: int
    # Set by with_options: this copy's options for each job it enqueues, and the
    # caller's connection whose transaction they are enqueued in.
    options: dict[str, Any] = field(default_factory=dict, hash=False)
    conn: Any = field(default=None, hash=False, compare=False, repr=False)

    @functools.cached_property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    @functools.cached_property
    def parameters(self) -> Parameters | None:
        return Parameters.of(self.fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def with_options(
        self,
        *,
        delay: float | None = None,
        run_at: float | None = None,
        priority: int | None = None,
        key: str | None = None,
        queue: str | None = None,
        timeout: float | None = None,
        max_attempts: int | None = None,
        conn: Any = None,
        may_fail: bool | None = None,
        concurrency_key: str | None = None,
        debounce: float | None = None,
        unique_for: float | None = None,
    ) -> Task[P, R]:
        """A copy of this task whose jobs get these options (None: unchanged):
        ``add.with_options(delay=3).enqueue(5, 6)``. Checked now, not at enqueue.

        ``conn``: the caller's connection to the App's database (a psycopg
        ``Connection`` for ``enqueue``, an ``AsyncConnection`` for ``aenqueue``,
        or a ``sqlite3.Connection``): jobs are written in its open transaction
        and exist if and only if the caller commits it.

        ``may_fail``: as a workflow's step (``step``), its dependents run even
        if it ends dead or cancelled, with a ``tenure.Failed`` as its value in
        their ``current_job().upstream``.

        ``concurrency_key``: the key its queue's ``_per_key`` limits and
        ``fair`` turns count it under. With ``key``: ``debounce=S`` (while a
        job of the key has not started, an enqueue replaces its arguments and
        moves its start to now + S, and returns it) or ``unique_for=S`` (an
        enqueue returns the job of the key while unfinished or finished less
        than S seconds ago)."""
        if may_fail is not None and not isinstance(may_fail, bool):
            raise InvalidInput(f"may_fail must be True or False, got {may_fail!r}")
        given = {"delay": delay, "run_at": run_at, "priority": priority, "key": key,
                 "queue": queue, "timeout": timeout, "max_attempts": max_attempts,
                 "may_fail": may_fail, "concurrency_key": concurrency_key,
                 "debounce": debounce, "unique_for": unique_for}  # fmt: skip
        options = {**self.options, **{k: v for k, v in given.items() if v is not None}}
        if conn is not None:
            self.app.callers(conn)  # raises InvalidInput for a connection of the wrong kind
        copy = dataclasses.replace(self, options=options, conn=self.conn if conn is None else conn)
        JobSpec.create(self.name, **copy._merged({}))  # raises InvalidInput for a bad option
        return copy

    # -- enqueue -----------------------------------------------------------

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Enqueue one job of this task with these arguments (as the handler takes them)."""
        [job] = self.app.store([self.spec(self.arguments(args, kwargs))], self.conn)
        return job

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """``enqueue`` on the running event loop."""
        [job] = await self.app.astore([self.spec(self.arguments(args, kwargs))], self.conn)
        return job

    def step(self, *args: P.args, **kwargs: P.kwargs) -> Step:
        """A step of a workflow running this task with these arguments (checked
        as ``enqueue`` checks them), stored by ``App.workflow``."""
        return Step(self.spec(self.arguments(args, kwargs)), bool(self.options.get("may_fail")))

    def enqueue_many(self, args_list: Iterable[dict[str, Any]], **options: Any) -> list[Job]:
        """Enqueue one job per dict of keyword arguments, in one round trip."""
        specs = self.specs(args_list, **options)
        return self.app.store(specs, self.conn) if specs else []

    async def aenqueue_many(self, args_list: Iterable[dict[str, Any]], **options: Any) -> list[Job]:
        """``enqueue_many`` on the running event loop."""
        specs = self.specs(args_list, **options)
        return await self.app.astore(specs, self.conn) if specs else []

    def arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The handler's arguments as one JSON object: positional ones under their
        parameter's name. InvalidInput when they would not bind to the handler."""
        params = self.parameters
        if params is None:
            if args:
                raise InvalidInput(
                    f"task {self.name!r}: its handler's signature cannot be read, so its "
                    "arguments must be given by keyword"
                )
            return kwargs
        if not args and params.fit(kwargs):
            return kwargs
        try:
            bound = params.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidInput(self._unbound(exc, kwargs)) from None
        arguments: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            kind = params.signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                arguments.update(value)
            elif kind in _PLAIN:
                arguments[name] = value
            else:  # a positional-only parameter, or *args: a worker passes keywords only
                raise InvalidInput(
                    f"task {self.name!r}: a worker calls its handler with keyword arguments, "
                    f"and its parameter {name!r} cannot take one"
                )
        return arguments

    def _unbound(self, exc: TypeError, kwargs: dict[str, Any]) -> str:
        assert self.parameters is not None
        text = (
            f"arguments do not fit task {self.name!r}: "
            f"{self.name}{self.parameters.signature}: {exc}"
        )
        misplaced = sorted(set(kwargs) & set(OPTIONS) - self.parameters.names)
        if misplaced:
            shown = ", ".join(f"{k}=..." for k in misplaced)
            text += f"; options go through {self.name}.with_options({shown}).enqueue(...)"
        return text

    def policy(self, queue: QueuePolicy) -> QueuePolicy:
        """The policy this task's jobs run under: the queue's, with the task's
        ``timeout`` and ``max_attempts`` over it (a job's own options win over both)."""
        if self.timeout is None and self.max_attempts is None:
            return queue
        return _with_defaults(queue, self.timeout, self.max_attempts)

    # -- specs -------------------------------------------------------------

    def spec(self, args: dict[str, Any] | None = None, **options: Any) -> JobSpec:
        """The JobSpec of one job of this task; options override the task's defaults."""
        [spec] = self.specs([args], **options)
        return spec

    def specs(self, args_list: Iterable[dict[str, Any] | None], **options: Any) -> list[JobSpec]:
        """The JobSpecs of jobs of this task, one per argument dict, options as for
        spec(). Each dict must bind to the handler's parameters."""
        if isinstance(args_list, Iterable) and not isinstance(args_list, dict | str | bytes):
            args_list = [self._checked(a) for a in args_list]
        return JobSpec.create_many(self.name, args_list, max_payload=self.app.max_payload,
                                   **self._merged(options))  # fmt: skip

    def _checked(self, args: dict[str, Any] | None) -> dict[str, Any] | None:
        keywords = {} if args is None else args
        if not isinstance(keywords, dict):
            return args  # for JobSpec to refuse, with its message
        params = self.parameters
        if params is not None and params.fit(keywords):
            return keywords
        if not all(isinstance(k, str) for k in keywords):
            return keywords  # for JobSpec to refuse, with its message
        return self.arguments((), keywords)

    def _merged(self, options: dict[str, Any]) -> dict[str, Any]:
        defaults: dict[str, Any] = {
            "queue": self.queue,
            "timeout": self.timeout,
            "max_attempts": self.max_attempts,
            "priority": self.priority,
        }
        given = {k: v for k, v in options.items() if v is not None}
        merged = {**defaults, **self.options, **given}
        merged.pop("may_fail", None)  # a step's, not its job's
        return merged


@functools.lru_cache(maxsize=256)
def _with_defaults(
    policy: QueuePolicy, timeout: float | None, max_attempts: int | None
) -> QueuePolicy:
    # Cached: a worker asks at every attempt, and a policy is refreshed, not changed.
    defaults = {"timeout": timeout, "max_attempts": max_attempts}
    return policy.replace(**{k: v for k, v in defaults.items() if v is not None})
