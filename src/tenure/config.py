"""Frozen, validated configuration. Every default lives here, once."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from tenure.errors import InvalidInput

Delivery = Literal["at-least-once", "at-most-once"]
Pool = Literal["process", "thread"]
DELIVERIES: tuple[Delivery, ...] = ("at-least-once", "at-most-once")

DEFAULT_URL = "sqlite:///tenure.db"
DEFAULT_MAX_PAYLOAD = 1024 * 1024


def _positive(name: str, value: object, *, allow_zero: bool = False) -> None:
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
    )
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidInput(f"{name} must be a finite number {bound}, got {value!r}")


def _count(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidInput(f"{name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """A queue's policy, stored with the queue and read by every worker.

    Times are float seconds. ``timeout`` is the default deadline of one
    attempt (None: no deadline) for tasks that do not set their own.
    """

    lease_ttl: float = 15.0
    heartbeat_interval: float = 2.0
    sweep_interval: float = 1.0
    max_attempts: int = 3
    max_stalls: int = 3
    delivery: Delivery = "at-least-once"
    timeout: float | None = None
    backoff_base: float = 1.0
    backoff_max: float = 300.0
    backoff_jitter: float = 0.2

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        _positive("lease_ttl", self.lease_ttl)
        _positive("heartbeat_interval", self.heartbeat_interval)
        _positive("sweep_interval", self.sweep_interval)
        if self.heartbeat_interval * 2 > self.lease_ttl:
            raise InvalidInput(
                f"heartbeat_interval ({self.heartbeat_interval}) must be at most half of "
                f"lease_ttl ({self.lease_ttl}), so that one late heartbeat does not lose a lease"
            )
        _count("max_attempts", self.max_attempts)
        _count("max_stalls", self.max_stalls)
        if self.delivery not in DELIVERIES:
            raise InvalidInput(f"delivery must be one of {', '.join(DELIVERIES)}")
        if self.timeout is not None:
            _positive("timeout", self.timeout)
        _positive("backoff_base", self.backoff_base, allow_zero=True)
        _positive("backoff_max", self.backoff_max, allow_zero=True)
        if not (isinstance(self.backoff_jitter, int | float) and 0 <= self.backoff_jitter <= 1):
            raise InvalidInput(f"backoff_jitter must be within [0, 1], got {self.backoff_jitter!r}")

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
        """The policy stored as JSON, or the defaults when nothing is stored."""
        return cls() if data is None else cls.from_dict(orjson.loads(data))

    def replace(self, **changes: Any) -> QueuePolicy:
        return QueuePolicy.from_dict({**self.to_dict(), **changes})


# The most attempts one worker runs at once, per pool: each is an executor
# process (a Python interpreter, tens of MB) or a thread; past these, a worker
# exhausts its host's memory or thread limit before it does more work. More
# throughput comes from more workers.
MAX_CONCURRENCY: dict[Pool, int] = {"process": 256, "thread": 1024}


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How one worker process runs. ``concurrency`` is at most
    ``MAX_CONCURRENCY[pool]``: 256 executor processes, or 1024 threads."""

    queues: tuple[str, ...] = ("default",)
    concurrency: int = 4
    drain_timeout: float = 30.0
    idle_poll_min: float = 0.01
    idle_poll_max: float = 1.0
    burst: bool = False  # exit when the queues are empty (tests, demos, batch jobs)
    pool: Pool = "process"  # sync handlers in executor processes, or "thread"
    async_slots: int = 1  # async attempts one executor runs at once
    max_jobs_per_executor: int | None = None  # recycle an executor after this many
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        from tenure.core.names import check_name

        if not self.queues:
            raise InvalidInput("a worker needs at least one queue")
        for q in self.queues:
            check_name("queue", q)
        _count("concurrency", self.concurrency)
        _positive("drain_timeout", self.drain_timeout, allow_zero=True)
        _positive("idle_poll_min", self.idle_poll_min)
        _positive("idle_poll_max", self.idle_poll_max)
        if self.pool not in ("process", "thread"):
            raise InvalidInput(f"pool must be 'process' or 'thread', got {self.pool!r}")
        if self.concurrency > MAX_CONCURRENCY[self.pool]:
            raise InvalidInput(
                f"concurrency {self.concurrency} is more than a {self.pool} pool runs "
                f"(at most {MAX_CONCURRENCY[self.pool]}): run more workers instead"
            )
        _count("async_slots", self.async_slots)
        if self.max_jobs_per_executor is not None:
            _count("max_jobs_per_executor", self.max_jobs_per_executor)
        if self.idle_poll_min > self.idle_poll_max:
            raise InvalidInput("idle_poll_min must not exceed idle_poll_max")
