"""Frozen, validated configuration. Every default lives here, once."""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import logging
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from tenure.core.hosts import is_loopback
from tenure.core.names import check_name, shown
from tenure.core.values import ATTEMPTS_RANGE, TIMEOUT_RANGE, check_number, shown_bound

# `X as X`: re-exported (mypy --strict) at the value checks' old address.
from tenure.core.values import MAX_SECONDS as MAX_SECONDS  # noqa: PLC0414
from tenure.core.values import check_integer as check_integer  # noqa: PLC0414
from tenure.core.values import check_seconds as check_seconds  # noqa: PLC0414
from tenure.errors import InvalidInput

Delivery = Literal["at-least-once", "at-most-once"]
Pool = Literal["process", "thread"]
DELIVERIES: tuple[Delivery, ...] = ("at-least-once", "at-most-once")

log = logging.getLogger("tenure")

DEFAULT_URL = "sqlite:///tenure.db"
DEFAULT_MAX_PAYLOAD = 1024 * 1024
# A payload crosses to an executor in one frame of at most 512 MiB, with its job.
MAX_PAYLOAD_RANGE = (1, 256 * 1024 * 1024)

LEASE_TTL_MAX = 3_600.0

# The bounds of each numeric policy field, in seconds but for the counts. A
# shorter lease expires before a heartbeat crosses the network, and costs the
# worker its CPU; a longer one keeps a frozen worker's jobs away for over an
# hour (heartbeats renew it: a long job never needs a long lease). A job
# waits for a sweep to be recovered: one a minute at least.
POLICY_BOUNDS: dict[str, tuple[float, float]] = {
    "lease_ttl": (0.05, LEASE_TTL_MAX),
    "heartbeat_interval": (0.01, LEASE_TTL_MAX / 2),
    "sweep_interval": (0.01, 60.0),
    "max_attempts": ATTEMPTS_RANGE,
    "max_stalls": ATTEMPTS_RANGE,
    "timeout": TIMEOUT_RANGE,
    "backoff_base": (0.0, MAX_SECONDS),
    "backoff_max": (0.0, MAX_SECONDS),
    "backoff_jitter": (0.0, 1.0),
    "unknown_task_grace": (0.0, MAX_SECONDS),
    # 0: a cancelled attempt's executor is killed at once; a handler that needs
    # more than an hour to stop is not stopping.
    "cancel_grace": (0.0, 3_600.0),
    # Events are kept for a minute at least (a reader that restarts resumes
    # where it stopped), and up to a billion per queue.
    "events_max_age": (60.0, MAX_SECONDS),
    "events_max_count": (1, 1_000_000_000),
    # Fleet-wide limits: jobs active at once, and starts per rate_interval.
    "max_active": (1, 1_000_000),
    "rate_limit": (1, 1_000_000_000),
    "rate_interval": (0.001, 86_400.0),
    # The same, for each concurrency key of the queue (tenure.core.limits).
    "max_active_per_key": (1, 1_000_000),
    "rate_limit_per_key": (1, 1_000_000_000),
    "rate_interval_per_key": (0.001, 86_400.0),
    # Finished jobs are kept for these many seconds (None: forever); 0 prunes
    # them at the next sweep.
    "keep_completed": (0.0, MAX_SECONDS),
    "keep_dead": (0.0, MAX_SECONDS),
}
_COUNTS = frozenset({"max_attempts", "max_stalls", "events_max_count", "max_active", "rate_limit",
                     "max_active_per_key", "rate_limit_per_key"})  # fmt: skip
_ABOVE = frozenset({"timeout"})  # bounds (lo, hi]: zero is not a deadline
# None: no deadline, no limit, kept forever
_OPTIONAL = frozenset({"timeout", "max_active", "rate_limit", "keep_completed", "keep_dead",
                       "max_active_per_key", "rate_limit_per_key"})  # fmt: skip
_FLAGS = ("events", "paused", "fair")
_SHARES = frozenset({"backoff_jitter"})  # a number within [0, 1], not seconds


def _clamped(name: str, value: Any) -> Any:
    """A stored number within its field's bounds (a timeout <= 0: none)."""
    bounds = POLICY_BOUNDS.get(name)
    if bounds is None or isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if name in _ABOVE and value <= bounds[0]:
        return None
    if name in _OPTIONAL and name in _COUNTS and value < bounds[0]:
        return None  # a limit below one: none
    if name in _COUNTS and isinstance(value, float):
        return value
    return min(max(value, bounds[0]), bounds[1])  # NaN stays NaN: refused


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """A queue's policy, stored with the queue and read by every worker.

    Times are float seconds. ``timeout`` is the default deadline of one
    attempt (None: no deadline) for tasks that do not set their own.

    Bounds, the same on every backend (booleans are not numbers):

    - ``lease_ttl`` within [0.05, 3600]; ``heartbeat_interval`` at least 0.01
      and at most half of ``lease_ttl``; ``sweep_interval`` within [0.01, 60];
    - ``max_attempts`` and ``max_stalls`` integers within [1, 1000000];
    - ``timeout`` (when set) within (0, ten years]; ``backoff_base`` and
      ``backoff_max`` within [0, ten years]; ``backoff_jitter`` within [0, 1];
      ``unknown_task_grace`` within [0, ten years] (0: dead-letter at once);
    - ``cancel_grace`` within [0, 3600];
    - ``events_max_age`` within [60, ten years]; ``events_max_count`` an
      integer within [1, 1000000000];
    - ``max_active`` (when set) an integer within [1, 1000000];
      ``rate_limit`` (when set) an integer within [1, 1000000000];
      ``rate_interval`` within [0.001, 86400]; the same for
      ``max_active_per_key``, ``rate_limit_per_key`` and ``rate_interval_per_key``;
    - ``keep_completed`` and ``keep_dead`` (when set) within [0, ten years].

    They are ``POLICY_BOUNDS``. ``events`` (a bool) says whether the queue's
    transitions record lifecycle events; the sweep deletes those older than
    ``events_max_age`` seconds or beyond the newest ``events_max_count``.

    Limits hold across the whole fleet, enforced by the claim itself (None:
    no limit). ``max_active``: at most that many jobs of the queue active at
    once. ``rate_limit``: at most that many starts per ``rate_interval``
    seconds, as a token bucket kept in storage: it holds up to
    ``rate_limit`` starts and refills at ``rate_limit`` per
    ``rate_interval``, so a full bucket allows a burst of ``rate_limit``
    starts, and any span of ``t`` seconds at most
    ``rate_limit * (1 + t / rate_interval)``. The ``_per_key`` limits are
    the same for each job's ``concurrency_key``, together with the queue's
    own; a job held back by its key does not hold back other keys' jobs.
    ``fair`` (a bool): claims take turns across keys. ``paused`` (a bool):
    the queue's jobs are not claimed; enqueues still land.

    Retention: the sweep deletes a job that finished (by storage's clock)
    ``keep_completed`` seconds ago when it is ``completed`` or ``cancelled``,
    ``keep_dead`` seconds ago when it is ``dead``, with its history; 0 deletes
    it at the next sweep, None keeps it forever. A dead job retried from the
    DLQ is unfinished again, and is kept until it finishes again.
    """

    lease_ttl: float = 15.0
    """How long a claim stays valid without a heartbeat, judged by the storage
    server's clock: a frozen or partitioned worker's jobs come back after it
    (and one sweep)."""
    heartbeat_interval: float = 2.0
    """How often a worker's supervisor renews all its leases, in one round trip;
    at most half of ``lease_ttl``, so that one late heartbeat loses nothing."""
    sweep_interval: float = 1.0
    """How often the fleet sweeps (one sweep per interval across all workers):
    the longest a dead worker's jobs wait to be recovered (on PostgreSQL, if
    the dead worker was the one sweeping, the others take over at random
    times, about four tries per interval across the fleet: a quarter of an
    interval more, on average)."""
    max_attempts: int = 3
    """Attempts a job may make before it is dead; a failed one retries after a
    backoff."""
    max_stalls: int = 3
    """Attempts of a job that may crash or stall (its executor or its worker
    died, or its lease ran out) before the job is dead: a job that takes
    workers down with it stops doing so."""
    delivery: Delivery = "at-least-once"
    """``at-least-once``: leases, heartbeats, recovery. ``at-most-once``: a claim
    removes the job; it never runs twice, and may not run at all."""
    timeout: float | None = None
    """The deadline of one attempt, from its handler's start, for tasks that set
    none (None: no deadline); past it the executor is killed."""
    backoff_base: float = 1.0
    """The wait before the second attempt; it doubles with each attempt after."""
    backoff_max: float = 300.0
    """The longest wait between two attempts."""
    backoff_jitter: float = 0.2
    """The share of each wait taken off at random, so that many failures at
    once do not all retry at once."""
    unknown_task_grace: float = 600.0
    """How long a job of a task no worker knows keeps going back to the queue
    for a worker that knows it (a rolling deploy) before it is dead
    (``unknown_task``); 0: dead at once."""
    cancel_grace: float = 10.0
    """How long a handler whose job was cancelled while it ran has to stop by
    itself (it sees ``current_job().cancelled``; an async one,
    ``CancelledError``) before its executor is killed (see aborting.md)."""
    events: bool = True
    """Whether the queue's transitions record lifecycle events."""
    events_max_age: float = 86_400.0
    """Events older than this are deleted by the sweep."""
    events_max_count: int = 100_000
    """At most this many of the queue's newest events are kept."""
    max_active: int | None = None
    """At most this many of the queue's jobs active at once across the fleet,
    enforced by the claim (None: no limit)."""
    rate_limit: int | None = None
    """At most this many starts per ``rate_interval`` across the fleet, from a
    token bucket kept in storage and checked by the claim (None: no limit)."""
    rate_interval: float = 1.0
    """The seconds in which ``rate_limit`` starts are allowed (the bucket refills
    at ``rate_limit`` per ``rate_interval``)."""
    max_active_per_key: int | None = None
    """At most this many active jobs of one ``concurrency_key`` at once across
    the fleet, enforced by the claim (None: no limit). Jobs without a key are
    not limited by it."""
    rate_limit_per_key: int | None = None
    """At most this many starts of one ``concurrency_key`` per
    ``rate_interval_per_key``, from a token bucket per key (None: no limit)."""
    rate_interval_per_key: float = 1.0
    """The seconds in which ``rate_limit_per_key`` starts of one key are allowed."""
    fair: bool = False
    """Claims take turns across the concurrency keys with ready jobs (round
    robin; jobs without a key are one key of their own), so a key with a
    million jobs queued does not hold back a key with one. Priorities still
    order the jobs within a key."""
    paused: bool = False
    """A paused queue's jobs are not claimed; enqueues still land."""
    keep_completed: float | None = 86_400.0
    """How long a completed or cancelled job is kept after it finished, before
    the sweep prunes it: a day (0: at the next sweep; None: forever)."""
    keep_dead: float | None = 14 * 86_400.0
    """How long a dead job is kept after it died: two weeks, time to look at
    the DLQ (0: at the next sweep; None: forever)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        for name, (lo, hi) in POLICY_BOUNDS.items():
            value = getattr(self, name)
            if value is None and name in _OPTIONAL:
                continue
            if name in _COUNTS:
                check_integer(name, value, lo, hi)
            else:
                kind = "a number" if name in _SHARES else "a number of seconds"
                check_number(name, value, lo, hi, above=name in _ABOVE, kind=kind)
        if self.heartbeat_interval * 2 > self.lease_ttl:
            raise InvalidInput(
                f"heartbeat_interval ({self.heartbeat_interval}) must be at most half of "
                f"lease_ttl ({self.lease_ttl}), so that one late heartbeat does not lose a lease"
            )
        for flag in _FLAGS:
            if not isinstance(value := getattr(self, flag), bool):
                raise InvalidInput(f"{flag} must be true or false, got {shown(value)}")
        if not isinstance(self.delivery, str) or self.delivery not in DELIVERIES:
            raise InvalidInput(
                f"delivery must be one of {', '.join(DELIVERIES)}, got {self.delivery!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QueuePolicy:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidInput(
                f"unknown policy field(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        return cls(**data)

    @classmethod
    def from_json(cls, data: str | bytes | None) -> QueuePolicy:
        """The policy stored as JSON, or the defaults when nothing is stored.

        A stored policy is never refused: one written before the bounds were
        (or by hand) would stop every worker of its queue, and could not even
        be changed. A number out of bounds is brought within them; anything
        else invalid, or unknown, gives way to the default, with a warning."""
        if data is None:
            return cls()
        stored = orjson.loads(data)
        try:
            return cls.from_dict(stored)
        except InvalidInput:
            return cls._within_bounds(stored if isinstance(stored, dict) else {})

    @classmethod
    def _within_bounds(cls, stored: dict[str, Any]) -> QueuePolicy:
        clamped = {name: _clamped(name, value) for name, value in stored.items()}
        try:
            return cls.from_dict(clamped)
        except InvalidInput:
            pass
        policy = cls()
        for name, value in clamped.items():  # each field that fits what came before it
            try:
                policy = policy.replace(**{name: value})
            except InvalidInput as exc:
                log.warning("stored policy: %s; ignored", exc)
        return policy

    def replace(self, **changes: Any) -> QueuePolicy:
        return QueuePolicy.from_dict({**self.to_dict(), **changes})

    @property
    def limited(self) -> bool:
        """Whether claims must count: a fleet-wide limit is set."""
        return self.max_active is not None or self.rate_limit is not None or self.keyed

    @property
    def keyed(self) -> bool:
        """Whether claims must look at concurrency keys: a per-key limit or
        ``fair`` is set."""
        return (
            self.max_active_per_key is not None or self.rate_limit_per_key is not None or self.fair
        )


FieldKind = Literal["seconds", "count", "share", "choice", "flag"]


@dataclass(frozen=True, slots=True)
class PolicyField:
    """One field of :class:`QueuePolicy` as an editor shows it, derived from
    the class: its type, its bounds (``POLICY_BOUNDS``) and its docstring."""

    name: str
    kind: FieldKind
    optional: bool  # None is a value: no deadline, no limit, kept forever
    low: float | None
    high: float | None
    above: bool  # low itself is out of bounds
    choices: tuple[str, ...]
    doc: str  # the field's docstring, on one line

    @property
    def bounds(self) -> str:
        """``[lo, hi]`` (``(lo, hi]`` when ``above``), as the checks word them."""
        if self.low is None or self.high is None:
            return ""
        return f"{'(' if self.above else '['}{shown_bound(self.low)}, {shown_bound(self.high)}]"


@functools.cache
def policy_fields() -> tuple[PolicyField, ...]:
    """Every field of :class:`QueuePolicy`, in order, with what an editor needs."""
    hints = typing.get_type_hints(QueuePolicy)
    docs = _attribute_docs(QueuePolicy)
    fields = []
    for f in dataclasses.fields(QueuePolicy):
        hint = hints[f.name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = type(None) in typing.get_args(hint)
        base = args[0] if optional else hint
        choices: tuple[str, ...] = ()
        kind: FieldKind
        if base is bool:
            kind = "flag"
        elif typing.get_origin(base) is Literal:
            kind, choices = "choice", typing.get_args(base)
        elif base is int:
            kind = "count"
        else:
            kind = "share" if f.name in _SHARES else "seconds"
        low, high = POLICY_BOUNDS.get(f.name, (None, None))
        fields.append(PolicyField(f.name, kind, optional, low, high, f.name in _ABOVE,
                                  choices, docs.get(f.name, "")))  # fmt: skip
    return tuple(fields)


def _attribute_docs(cls: type) -> dict[str, str]:
    """The docstring under each annotated attribute of ``cls``, on one line."""
    try:
        source = inspect.getsource(cls)
    except OSError:  # installed without its sources: the fields, without their words
        return {}
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    docs = {}
    for node, after in zip(body.body, body.body[1:], strict=False):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):  # fmt: skip
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


# The most attempts one worker runs at once, per pool: each is an executor
# process (a Python interpreter, tens of MB) or a thread; past these, a worker
# exhausts its host's memory or thread limit before it does more work. More
# throughput comes from more workers.
MAX_CONCURRENCY: dict[Pool, int] = {"process": 256, "thread": 1024}
MAX_ASYNC_SLOTS = 1024  # async attempts on one executor's loop


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How one worker process runs. ``concurrency`` is at most
    ``MAX_CONCURRENCY[pool]``: 256 executor processes, or 1024 threads."""

    queues: tuple[str, ...] = ("default",)
    concurrency: int = 4
    drain_timeout: float = 30.0
    idle_poll_min: float = 0.01
    idle_poll_max: float | None = None  # None: the backend's (Capabilities.idle_poll)
    burst: bool = False  # exit when the queues are empty (tests, demos, batch jobs)
    pool: Pool = "process"  # sync handlers in executor processes, or "thread"
    async_slots: int = 1  # async attempts one executor runs at once
    max_jobs_per_executor: int | None = None  # recycle an executor after this many
    metrics_port: int | None = None  # serve Prometheus metrics on this port (tenure.metrics)
    metrics_host: str = "127.0.0.1"
    metrics_public: bool = False  # serve metrics on an address other than loopback
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if not self.queues:
            raise InvalidInput("a worker needs at least one queue")
        for q in self.queues:
            check_name("queue", q)
        if self.pool not in MAX_CONCURRENCY:
            raise InvalidInput(f"pool must be 'process' or 'thread', got {self.pool!r}")
        most = MAX_CONCURRENCY[self.pool]
        if isinstance(self.concurrency, int) and self.concurrency > most:
            raise InvalidInput(
                f"concurrency {self.concurrency} is more than a {self.pool} pool runs "
                f"(at most {most}): run more workers instead"
            )
        check_integer("concurrency", self.concurrency, 1, most)
        check_seconds("drain_timeout", self.drain_timeout)
        check_seconds("idle_poll_min", self.idle_poll_min, above=True)
        if self.idle_poll_max is not None:
            check_seconds("idle_poll_max", self.idle_poll_max, above=True)
        check_integer("async_slots", self.async_slots, 1, MAX_ASYNC_SLOTS)
        if self.max_jobs_per_executor is not None:
            check_integer("max_jobs_per_executor", self.max_jobs_per_executor, 1, 10**9)
        if self.metrics_port is not None:
            check_integer("metrics_port", self.metrics_port, 1, 65535)
        if not (isinstance(self.metrics_host, str) and self.metrics_host.strip()):
            raise InvalidInput(
                f"metrics_host must be a host name or address, got {shown(self.metrics_host)}"
            )
        served = self.metrics_port is not None
        if served and not self.metrics_public and not is_loopback(self.metrics_host):
            raise InvalidInput(
                f"metrics on {self.metrics_host} could be read by anyone who reaches it "
                "(queue names, job counts): serve them on loopback, or say "
                "--metrics-public (metrics_public=True)"
            )
        if self.idle_poll_max is not None and self.idle_poll_min > self.idle_poll_max:
            raise InvalidInput("idle_poll_min must not exceed idle_poll_max")
