"""Frames between the supervisor and its executor processes, both ways.

Each frame is a typed dataclass (not frozen: building a frozen one costs
twice its JSON parse, on the path of every job); on the pipe it is
length-prefixed JSON, ``[tag, {fields}]``. JSON only: nothing that crosses a process boundary is
ever unpickled. Both ends run the same tenure, so the frames need no version.
"""

from __future__ import annotations

import enum
import os
import struct
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from tenure.worker.executors.base import HandlerEnd, Raise, Raised, Returned, Settled

HEADER = struct.Struct("!I")
MAX_FRAME = 512 * 1024 * 1024


class WireError(Exception):
    """A frame that cannot be read: the other side is broken or not ours."""


# -- supervisor to executor ----------------------------------------------------


@dataclass(slots=True)
class Run:
    """Run this attempt; ``timed``: tell when it starts (its deadline counts from then)."""

    tag: ClassVar[str] = "run"
    id: str
    fence: int
    task: str
    queue: str
    attempt: int
    args: dict[str, Any]
    key: str | None
    traceparent: str | None
    is_async: bool
    timed: bool
    workflow: str | None = None  # a workflow's step: its workflow, and the steps
    upstream: list[str] | None = None  # it waited for (their values: Upstream)


@dataclass(slots=True)
class Cancel:
    """Cancel this async attempt's task (a deadline, or a stop)."""

    tag: ClassVar[str] = "cancel"
    id: str
    fence: int


@dataclass(slots=True)
class Abort:
    """This attempt's job was cancelled: tell its handler (``current_job().cancelled``)."""

    tag: ClassVar[str] = "abort"
    id: str
    fence: int


class Refusal(enum.StrEnum):
    """Why a request of a handler failed."""

    LEASE_LOST = "lease_lost"
    FAILED = "failed"


@dataclass(slots=True)
class Reply:
    """The answer to the request numbered ``req``; ``error`` None: it was done."""

    tag: ClassVar[str] = "reply"
    req: int
    error: Refusal | None = None
    message: str = ""
    data: Any = None  # what was asked for (Upstream, Spawn)

    def __post_init__(self) -> None:
        if self.error is not None:
            self.error = Refusal(self.error)


@dataclass(slots=True)
class Exit:
    """Exit now (the executor ran its share of jobs)."""

    tag: ClassVar[str] = "exit"


# -- executor to supervisor ----------------------------------------------------


@dataclass(slots=True)
class Ready:
    """The executor imported the App and takes attempts."""

    tag: ClassVar[str] = "ready"
    pid: int


@dataclass(slots=True)
class Fatal:
    """The executor could not start; it exits."""

    tag: ClassVar[str] = "fatal"
    error: str


@dataclass(slots=True)
class Started:
    """A timed attempt's handler starts now."""

    tag: ClassVar[str] = "started"
    id: str
    fence: int


@dataclass(slots=True)
class Progress:
    """Request ``req``: record the handler's progress report."""

    tag: ClassVar[str] = "progress"
    req: int
    id: str
    fence: int
    data: Any


@dataclass(slots=True)
class Heartbeat:
    """Request ``req``: renew the attempt's lease now."""

    tag: ClassVar[str] = "heartbeat"
    req: int
    id: str
    fence: int


@dataclass(slots=True)
class Upstream:
    """Request ``req``: the values of the steps the attempt's step waited for,
    each ``["v", value]`` or ``["f", job id, task, dead reason, error]`` (a Failed)."""

    tag: ClassVar[str] = "upstream"
    req: int
    id: str
    fence: int


@dataclass(slots=True)
class Spawn:
    """Request ``req``: add ``flow`` (``tenure.flows.flow_to_json``) to the step's
    workflow, as its ``seq``-th spawn; the reply's data: the new jobs' ids."""

    tag: ClassVar[str] = "spawn"
    req: int
    id: str
    fence: int
    seq: int
    flow: Any


@dataclass(slots=True)
class Done:
    """An attempt ended: it returned ``value``, settled its job itself, or
    raised (``raised`` says how; ``error`` is the traceback, or what a
    settled handler raised afterwards)."""

    tag: ClassVar[str] = "done"
    id: str
    fence: int
    value: Any = None
    settled: bool = False
    raised: Raise | None = None
    error: str | None = None
    retry_in: float | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if self.raised is not None:
            self.raised = Raise(self.raised)

    @classmethod
    def of(cls, id: str, fence: int, result: HandlerEnd) -> Done:
        match result:
            case Returned(value):
                return cls(id, fence, value)
            case Settled(error):
                return cls(id, fence, settled=True, error=error)
            case Raised(kind, tb, retry_in, reason):
                return cls(id, fence, raised=kind, error=tb, retry_in=retry_in, reason=reason)

    def result(self) -> HandlerEnd:
        if self.raised is not None:
            return Raised(self.raised, self.error or "", self.retry_in, self.reason)
        if self.settled:
            return Settled(self.error)
        return Returned(self.value)


# An executor has two pipes in: attempts to run, read by the thread that runs
# them, which thus needs no other thread to wake it; and what must reach a
# handler while it runs, read by a thread of its own.
ToRunner = Run | Exit
ToReader = Cancel | Abort | Reply
ToExecutor = ToRunner | ToReader
Request = Progress | Heartbeat | Upstream | Spawn
ToSupervisor = Ready | Fatal | Started | Request | Done
Frame = ToExecutor | ToSupervisor

FRAMES: dict[str, type[Frame]] = {
    f.tag: f
    for f in (
        Run,
        Cancel,
        Abort,
        Reply,
        Exit,
        Ready,
        Fatal,
        Started,
        Progress,
        Heartbeat,
        Upstream,
        Spawn,
        Done,
    )
}


def frame(message: Frame) -> bytes:
    data = orjson.dumps((message.tag, message))
    if len(data) > MAX_FRAME:
        raise WireError(f"frame of {len(data)} bytes exceeds {MAX_FRAME}")
    return HEADER.pack(len(data)) + data


def parse(data: bytes | memoryview) -> Frame:
    try:
        tag, fields = orjson.loads(data)
        return FRAMES[tag](**fields)
    except (ValueError, TypeError, KeyError) as exc:  # orjson's JSONDecodeError is a ValueError
        raise WireError(f"not a frame: {exc}") from exc


def split(buffer: bytearray) -> list[Frame]:
    """The whole frames at the start of ``buffer``, taken out of it: one read
    of a pipe may carry several, and end inside one."""
    frames: list[Frame] = []
    start, end = 0, len(buffer)
    view = memoryview(buffer)
    try:
        while end - start >= HEADER.size:
            stop = start + HEADER.size + size_of(view[start : start + HEADER.size])
            if stop > end:
                break
            frames.append(parse(view[start + HEADER.size : stop]))
            start = stop
    finally:
        view.release()
    del buffer[:start]
    return frames


def size_of(header: bytes | memoryview) -> int:
    (size,) = HEADER.unpack(header)
    if size > MAX_FRAME:
        raise WireError(f"frame of {size} bytes exceeds {MAX_FRAME}")
    return int(size)


def read_exactly(fd: int, n: int) -> bytes | None:
    """Read ``n`` bytes from a blocking fd; None at end of file."""
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> Frame | None:
    """The next frame from a blocking fd; None when the writer is gone."""
    header = read_exactly(fd, HEADER.size)
    if header is None:
        return None
    body = read_exactly(fd, size_of(header))
    if body is None:
        return None
    return parse(body)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
