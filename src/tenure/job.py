"""Jobs as storage returns them, and the specification of a job to enqueue."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

import orjson

from tenure.config import DEFAULT_MAX_PAYLOAD
from tenure.core.ids import new_job_ids
from tenure.core.names import check_concurrency_key, check_job_id, check_key, check_name, shown
from tenure.core.payload import encode_args
from tenure.core.states import DeadReason, Outcome, State
from tenure.core.values import (
    ATTEMPTS_RANGE,
    MAX_SECONDS,
    PRIORITY_RANGE,
    check_integer,
    check_seconds,
)
from tenure.core.workflows import CancelReason, Workflow, WorkflowSpec, WorkflowState
from tenure.errors import InvalidInput
from tenure.traces import TRACEPARENT, current_traceparent

STATES: dict[State | str, State] = {s.value: s for s in State}
_T = TypeVar("_T")


_DASHES = (8, 12, 16, 20)  # where new_job_id's groups end: 8-4-4-4-12 hex digits
_HEX = frozenset("0123456789abcdefABCDEF")


def id_prefix(text: str) -> str:
    """A prefix of a job id as typed: hex digits without the dashes (as copied
    from a UUID shown without them) get them back, in lower case."""
    if len(text) <= _DASHES[0] or len(text) > 32 or not set(text) <= _HEX:
        return text
    text = text.lower()
    cuts = [0, *(d for d in _DASHES if d < len(text)), len(text)]
    return "-".join(text[a:b] for a, b in itertools.pairwise(cuts))


@dataclass(frozen=True)
class JobSpec:
    """A validated request to enqueue one job. Build it with :meth:`create`."""

    id: str
    task: str
    queue: str
    args: bytes  # JSON object
    delay: float = 0.0
    run_at: float | None = None  # absolute; wins over delay
    priority: int = 0
    key: str | None = None
    max_attempts: int | None = None  # None: the queue's policy decides
    timeout: float | None = None  # None: the queue's policy decides
    traceparent: str | None = None  # the enqueue's trace context (W3C), if traced
    # Per-key limits and fair turns (QueuePolicy's ``_per_key`` fields, ``fair``).
    concurrency_key: str | None = None
    # With ``key``: while a job of that key has not started, an enqueue
    # replaces its args and moves its start to now + debounce (the same id).
    debounce: float | None = None
    # With ``key``: the job of that key is returned while unfinished, or
    # finished less than ``unique_for`` seconds ago.
    unique_for: float | None = None

    @classmethod
    def create(
        cls,
        task: str,
        args: dict[str, Any] | None = None,
        *,
        queue: str = "default",
        delay: float = 0.0,
        run_at: float | None = None,
        priority: int = 0,
        key: str | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        concurrency_key: str | None = None,
        debounce: float | None = None,
        unique_for: float | None = None,
    ) -> JobSpec:
        [spec] = cls.create_many(task, [args], queue=queue, delay=delay, run_at=run_at,
                                 priority=priority, key=key, max_attempts=max_attempts,
                                 timeout=timeout, max_payload=max_payload,
                                 concurrency_key=concurrency_key, debounce=debounce,
                                 unique_for=unique_for)  # fmt: skip
        return spec

    @classmethod
    def create_many(
        cls,
        task: str,
        args_list: Iterable[dict[str, Any] | None],
        *,
        queue: str = "default",
        delay: float = 0.0,
        run_at: float | None = None,
        priority: int = 0,
        key: str | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        concurrency_key: str | None = None,
        debounce: float | None = None,
        unique_for: float | None = None,
    ) -> list[JobSpec]:
        """One spec per argument dict, all with the same options (validated once,
        before any payload: a bad name is reported before a bad payload)."""
        _check_options((task, queue, delay, run_at, priority, max_attempts, timeout, None,
                        concurrency_key, debounce, unique_for))  # fmt: skip
        check_key(key)
        _check_windows(key, debounce, unique_for)
        if isinstance(args_list, dict | str | bytes) or not isinstance(args_list, Iterable):
            raise InvalidInput(
                f"enqueue_many takes a list of argument dicts, got {type(args_list).__name__}"
            )
        payloads = [encode_args({} if a is None else a, limit=max_payload) for a in args_list]
        shared = {"task": task, "queue": queue, "delay": delay, "run_at": run_at,
                  "priority": priority, "key": key, "max_attempts": max_attempts,
                  "timeout": timeout, "traceparent": current_traceparent(),
                  "concurrency_key": concurrency_key, "debounce": debounce,
                  "unique_for": unique_for}  # fmt: skip
        return [
            _built(cls, {"id": i, "args": a, **shared})
            for i, a in zip(new_job_ids(len(payloads)), payloads, strict=True)
        ]

    def check(self, max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        """Raise InvalidInput unless every field is valid (backends check every spec)."""
        _check_options(self.options())
        check_job_id(self.id)
        check_key(self.key)
        _check_windows(self.key, self.debounce, self.unique_for)
        if not isinstance(self.args, bytes) or len(self.args) > max_payload:
            size = len(self.args) if isinstance(self.args, bytes) else "?"
            raise InvalidInput(
                f"job arguments are {size} bytes of JSON, more than max_payload "
                f"({max_payload} bytes)"
            )

    def stored(self, state: State | str, run_at: float, created_at: float) -> Job:
        """The Job storage just made of this spec (as ``get`` will read it back)."""
        job = _built(Job, {
            **_NEW, "id": self.id, "task": self.task, "queue": self.queue,
            "args": orjson.loads(self.args), "state": STATES[state], "priority": self.priority,
            "run_at": float(run_at), "created_at": float(created_at),
            "max_attempts": self.max_attempts,
            "timeout": None if self.timeout is None else float(self.timeout), "key": self.key,
            "traceparent": self.traceparent,
        })  # fmt: skip
        return keyed(job, self.concurrency_key)

    def stored_at(self, now: float) -> Job:
        """The Job storage made of this spec at ``now`` (its clock), as the SQL
        backends store it: run_at is ``now + delay`` (or ``+ debounce``) unless given."""
        run_at = self.run_at if self.run_at is not None else now + (self.debounce or self.delay)
        return self.stored(State.SCHEDULED if run_at > now else State.QUEUED, run_at, now)

    def options(self) -> tuple[Any, ...]:
        """The fields a batch usually shares (all but id, args and key)."""
        return (self.task, self.queue, self.delay, self.run_at, self.priority,
                self.max_attempts, self.timeout, self.traceparent, self.concurrency_key,
                self.debounce, self.unique_for)  # fmt: skip


def check_specs(specs: Sequence[JobSpec], max_payload: int) -> None:
    """``spec.check()`` for each spec, with the options a batch shares checked once."""
    seen: set[tuple[Any, ...]] = set()
    for spec in specs:
        options = spec.options()
        try:
            known = options in seen
        except TypeError:  # something unhashable, hence invalid: check() says what
            known = False
        if not known:
            _check_options(options)
            seen.add(options)
        check_job_id(spec.id)
        check_key(spec.key)
        _check_windows(spec.key, spec.debounce, spec.unique_for)
        if not isinstance(spec.args, bytes) or len(spec.args) > max_payload:
            spec.check(max_payload)  # raises with the details


def _check_options(options: tuple[Any, ...]) -> None:
    (task, queue, delay, run_at, priority, max_attempts, timeout, traceparent,
     concurrency_key, debounce, unique_for) = options  # fmt: skip
    check_name("task", task)
    check_name("queue", queue)
    check_seconds("delay", delay)
    if run_at is not None:
        # Judged by the caller's clock, which a margin of ten years forgives.
        latest = time.time() + MAX_SECONDS
        real = isinstance(run_at, int | float) and not isinstance(run_at, bool)
        if not (real and 0 <= run_at <= latest):
            raise InvalidInput(
                "run_at must be an epoch time in seconds, from 0 to ten years from now, "
                f"got {shown(run_at)}"
            )
        if delay:
            raise InvalidInput(
                f"give delay or run_at, not both (delay {shown(delay)}, run_at {shown(run_at)}): "
                "delay counts from now, run_at is an epoch time"
            )
    check_integer("priority", priority, *PRIORITY_RANGE)
    if max_attempts is not None:
        check_integer("max_attempts", max_attempts, *ATTEMPTS_RANGE)
    if timeout is not None:
        check_seconds("timeout", timeout, above=True)
    if traceparent is not None and not (
        isinstance(traceparent, str) and TRACEPARENT.fullmatch(traceparent)
    ):
        raise InvalidInput(f"traceparent must be a W3C traceparent, got {shown(traceparent)}")
    check_concurrency_key(concurrency_key)
    if debounce is not None:
        check_seconds("debounce", debounce, above=True)
        if delay or run_at is not None:
            raise InvalidInput(
                "give debounce or delay/run_at, not both: a debounced job starts "
                "debounce seconds after the last enqueue of its key"
            )
        if unique_for is not None:
            raise InvalidInput(
                "give debounce or unique_for, not both: debounce replaces a waiting job, "
                "unique_for returns it"
            )
    if unique_for is not None:
        check_seconds("unique_for", unique_for, above=True)


def _check_windows(key: str | None, debounce: float | None, unique_for: float | None) -> None:
    """``debounce`` and ``unique_for`` are windows of a ``key``."""
    for name, value in (("debounce", debounce), ("unique_for", unique_for)):
        if value is not None and key is None:
            raise InvalidInput(
                f"{name} needs a key: it applies to the jobs enqueued with the same key"
            )


@dataclass(frozen=True, slots=True)
class Attempt:
    """One delivery of a job to a handler, as recorded in the job's history."""

    attempt: int
    fence: int
    worker: str | None
    started_at: float
    ended_at: float | None
    outcome: Outcome | None  # None while the attempt runs
    error: str | None = None


@dataclass(frozen=True)
class Job:
    """A job as storage holds it. ``history`` is filled by ``get``, empty elsewhere."""

    id: str
    task: str
    queue: str
    args: dict[str, Any]
    state: State
    priority: int
    run_at: float
    created_at: float
    attempts: int = 0
    stalls: int = 0
    max_attempts: int | None = None
    timeout: float | None = None
    fence: int = 0
    key: str | None = None
    worker: str | None = None
    lease_expires_at: float | None = None
    result: Any = None
    error: str | None = None
    dead_reason: DeadReason | None = None
    progress: Any = None
    finished_at: float | None = None
    traceparent: str | None = None  # the trace context of its enqueue (W3C), if traced
    # Cancelled while active: its worker stops the attempt, and it never runs
    # again (it ends ``cancelled``, unless the attempt completed first).
    cancel_requested: bool = False
    # Set by the sweeper when it recovers the job's attempt, until the next
    # attempt ends: when the lost attempt's lease was last proven (storage's
    # clock). The claim that starts the job again returns it, so its worker
    # can tell the recovery's latency.
    recovered_from: float | None = None
    # The attempts it had made when it was last retried from the DLQ (0: never):
    # attempts keep their numbers, and its budget counts those after this one.
    budget_from: int = 0
    history: tuple[Attempt, ...] = field(default=())
    # A workflow's step (tenure.core.workflows): its workflow's id, the ids of
    # the steps it waits for (in the order of its ``upstream`` values), whether
    # its dependents run even if it fails, and why it was cancelled, if not by
    # hand. Class defaults for every other job: storage sets them with ``in_flow``.
    workflow: str | None = None
    upstream: tuple[str, ...] = ()
    may_fail: bool = False
    cancel_reason: CancelReason | None = None
    # Its concurrency key (QueuePolicy's ``_per_key`` limits, ``fair``), if
    # enqueued with one. A class default for every other job: storage sets it
    # with ``keyed``.
    concurrency_key: str | None = None


# The fields of every job, as storage decodes them (``job_of``), and those only
# some jobs have: a workflow's step (``in_flow``), a keyed job (``keyed``).
FLOW_FIELDS = ("workflow", "upstream", "may_fail", "cancel_reason")
EXTRA_FIELDS = (*FLOW_FIELDS, "concurrency_key")
JOB_FIELDS = tuple(f.name for f in fields(Job) if f.name not in EXTRA_FIELDS)
# A new job's fields that no spec sets (JobSpec.stored).
_NEW = {"attempts": 0, "stalls": 0, "fence": 0, "worker": None, "lease_expires_at": None,
        "result": None, "error": None, "dead_reason": None, "progress": None,
        "finished_at": None, "cancel_requested": False,
        "recovered_from": None, "budget_from": 0, "history": ()}  # fmt: skip


def job_of(values: Iterable[Any]) -> Job:
    """The Job of all its fields' values, in the order of ``JOB_FIELDS``. Storage
    decodes every job through this: it skips the frozen dataclass's ``__init__``,
    which sets each of the 24 fields through ``object.__setattr__`` and takes
    twice as long."""
    return _built(Job, zip(JOB_FIELDS, values, strict=True))


def in_flow(
    job: Job,
    workflow: str | None,
    upstream: Sequence[str] = (),
    may_fail: bool = False,
    cancel_reason: str | None = None,
) -> Job:
    """``job``, just decoded, with its workflow fields (a step's); unchanged
    when ``workflow`` is None."""
    if workflow is not None:
        job.__dict__.update(workflow=workflow, upstream=tuple(upstream), may_fail=bool(may_fail),
                            cancel_reason=None if cancel_reason is None
                            else CancelReason(cancel_reason))  # fmt: skip
    return job


def keyed(job: Job, concurrency_key: str | None) -> Job:
    """``job``, just decoded, with its concurrency key; unchanged when None."""
    if concurrency_key is not None:
        job.__dict__["concurrency_key"] = concurrency_key
    return job


def stored_workflow(spec: WorkflowSpec, now: float, jobs: Sequence[Job] | None = None) -> Workflow:
    """The workflow ``spec`` as storage makes it at ``now``: running, its
    first steps queued (or scheduled), the others waiting (their run_at the
    one they were given, else ``now``). ``jobs``: ``stored_steps``'s, made
    already."""
    jobs = tuple(stored_steps(spec, now) if jobs is None else jobs)
    sinks = tuple(spec.steps[k].spec.id for k in spec.sinks)
    return Workflow(spec.id, WorkflowState.RUNNING, now, None, spec.key, spec.many, sinks, jobs)


def stored_steps(spec: WorkflowSpec, now: float) -> Iterator[Job]:
    """The jobs of ``stored_workflow(spec, now)``, one at a time."""
    ids = [s.spec.id for s in spec.steps]
    for s in spec.steps:
        job = (s.spec.stored(State.WAITING, _or(s.spec.run_at, now), now) if s.upstream
               else s.spec.stored_at(now))  # fmt: skip
        yield in_flow(job, spec.id, [ids[u] for u in s.upstream], s.may_fail)


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _built(cls: type[_T], items: Any) -> _T:
    """An instance of the frozen (dict-based) dataclass ``cls`` with the fields in
    ``items`` (a mapping or pairs), all of them, as trusted values."""
    instance = object.__new__(cls)
    instance.__dict__.update(items)
    return instance
