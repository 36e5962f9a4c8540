"""Executor processes as the supervisor holds them: forked, spoken to, killed.

The process pool (``process.py``) decides what runs where; this module only
has the zygote fork a child, keeps its pipes, and reads its frames until it dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import signal
from dataclasses import dataclass, field

from tenure.backends.base import LeaseRef
from tenure.job import Job
from tenure.worker.executors.base import AttemptResult, Stopped, TimedOut
from tenure.worker.executors.wire import Frame, ToExecutor, WireError, frame, parse, size_of
from tenure.worker.executors.zygotes import Zygote


class StopReason(enum.Enum):
    """Why the supervisor stopped an attempt in an executor process."""

    TIMEOUT = "timeout"  # past its deadline: it ends TimedOut
    STOPPED = "stopped"  # lease lost, drain, cancel grace spent, or collateral: Stopped


@dataclass(slots=True)
class Running:
    """One attempt placed in an executor process, until its end is known."""

    job: Job
    is_async: bool
    result: asyncio.Future[AttemptResult]
    timeout: float | None
    timer: asyncio.TimerHandle | None = None
    stop_reason: StopReason | None = None

    def stop(self, reason: StopReason = StopReason.STOPPED) -> None:
        """Mark it stopped, unless it was already, for whatever reason."""
        if self.stop_reason is None:
            self.stop_reason = reason

    def end(self, result: AttemptResult) -> None:
        """Its end, once: one the supervisor stopped ends as it stopped it,
        whatever the handler did meanwhile."""
        if self.result.done():
            return
        if self.stop_reason is StopReason.TIMEOUT:
            result = TimedOut(self.timeout or 0.0)
        elif self.stop_reason is StopReason.STOPPED:
            result = Stopped()
        self.result.set_result(result)


@dataclass
class Child:
    """One executor process and the attempts it runs."""

    pid: int
    exited: asyncio.Future[int]  # its return code, told by the zygote that forked it
    transport: asyncio.WriteTransport
    reader: asyncio.StreamReader
    ready: asyncio.Future[None]
    jobs: dict[LeaseRef, Running] = field(default_factory=dict)  # by attempt
    done: int = 0
    retiring: bool = False
    killed: bool = False

    def send(self, message: ToExecutor) -> None:
        if not self.transport.is_closing():
            self.transport.write(frame(message))

    async def read(self) -> Frame | None:
        """The child's next frame; None once its pipe closed (it is dead, or dying)."""
        try:
            header = await self.reader.readexactly(4)
            return parse(await self.reader.readexactly(size_of(header)))
        except (asyncio.IncompleteReadError, ConnectionError, WireError):
            return None

    def kill_all(self) -> None:
        """Kill it to stop an attempt: the others it runs are collateral,
        handed back without penalty."""
        for running in self.jobs.values():
            running.stop()
        self.kill()

    def kill(self) -> None:
        if not self.killed:
            self.killed = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    async def wait(self) -> int:
        """Its exit status, once it has exited (negative: the signal that killed it)."""
        return await asyncio.shield(self.exited)


async def fork(zygote: Zygote) -> Child:
    """Have the zygote fork an executor process; it is ready when its
    ``ready`` future is done."""
    loop = asyncio.get_running_loop()
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    try:
        pid, exited = await zygote.fork(to_child_r, from_child_w)
    except BaseException:
        os.close(to_child_w)
        os.close(from_child_r)
        raise
    finally:  # the child has its own: ours would keep its pipe from ending when it dies
        os.close(to_child_r)
        os.close(from_child_w)
    transport, _ = await loop.connect_write_pipe(
        asyncio.Protocol, os.fdopen(to_child_w, "wb", buffering=0)
    )
    reader = asyncio.StreamReader(limit=2**31)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(from_child_r, "rb", buffering=0)
    )
    return Child(pid, exited, transport, reader, loop.create_future())
