"""Jobs as storage returns them, and the specification of a job to enqueue."""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from tenure.config import DEFAULT_MAX_PAYLOAD
from tenure.core.names import check_key, check_name
from tenure.core.payload import encode_args
from tenure.core.states import DeadReason, Outcome, State
from tenure.errors import InvalidInput

PRIORITY_RANGE = (-1_000_000, 1_000_000)


def new_job_id() -> str:
    """A time-ordered, globally unique id (UUIDv7 layout: 48-bit ms time, then random)."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms << 80) | (0x7 << 76) | (rand & ((1 << 76) - 1))
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(frozen=True, slots=True)
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
    ) -> JobSpec:
        spec = cls(
            id=new_job_id(),
            task=task,
            queue=queue,
            args=b"{}",
            delay=delay,
            run_at=run_at,
            priority=priority,
            key=key,
            max_attempts=max_attempts,
            timeout=timeout,
        )
        spec.check(max_payload)  # options first: a bad name is reported before a bad payload
        args_json = encode_args({} if args is None else args, limit=max_payload)
        return dataclasses.replace(spec, args=args_json)

    def check(self, max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        """Raise InvalidInput unless every field is valid (backends check every spec)."""
        check_name("task", self.task)
        check_name("queue", self.queue)
        check_key(self.key)
        if not isinstance(self.args, bytes) or len(self.args) > max_payload:
            size = len(self.args) if isinstance(self.args, bytes) else "?"
            raise InvalidInput(
                f"job arguments are {size} bytes of JSON, more than max_payload "
                f"({max_payload} bytes)"
            )
        if not _finite(self.delay) or self.delay < 0:
            raise InvalidInput(f"delay must be a finite number of seconds >= 0, got {self.delay!r}")
        if self.run_at is not None and not _finite(self.run_at):
            raise InvalidInput(
                f"run_at must be a finite epoch time in seconds, got {self.run_at!r}"
            )
        lo, hi = PRIORITY_RANGE
        if not _integer(self.priority) or not lo <= self.priority <= hi:
            raise InvalidInput(
                f"priority must be an integer within [{lo}, {hi}], got {self.priority!r}"
            )
        if self.max_attempts is not None and (
            not _integer(self.max_attempts) or self.max_attempts < 1
        ):
            raise InvalidInput(f"max_attempts must be an integer >= 1, got {self.max_attempts!r}")
        if self.timeout is not None and (not _finite(self.timeout) or self.timeout <= 0):
            raise InvalidInput(
                f"timeout must be a finite number of seconds > 0, got {self.timeout!r}"
            )


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


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


@dataclass(frozen=True, slots=True)
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
    history: tuple[Attempt, ...] = field(default=())
