"""Executor processes as the supervisor holds them: forked, spoken to, killed.

The process pool (``process.py``) decides what runs where; this module only
has the zygote fork a child, keeps its pipes, and hands on its frames as they
arrive, in the loop's own read callback: no task wakes per frame, and one read
takes every frame waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import signal
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from tenure.backends.base import LeaseRef
from tenure.errors import LeaseLost
from tenure.flows import encode_values, flow_from_json
from tenure.job import Job
from tenure.worker.executors.base import AttemptResult, Link, OnEnd, Stopped, TimedOut
from tenure.worker.executors.wire import (
    Abort,
    Cancel,
    Exit,
    Frame,
    Heartbeat,
    Progress,
    Refusal,
    Reply,
    Request,
    Run,
    Spawn,
    ToExecutor,
    Upstream,
    WireError,
    frame,
    split,
)
from tenure.worker.executors.zygote_handle import Zygote

log = logging.getLogger("tenure.executor")

ASYNC_CANCEL_GRACE = 1.0


class StopReason(enum.Enum):
    """Why the supervisor stopped an attempt in an executor process."""

    TIMEOUT = "timeout"  # past its deadline: it ends TimedOut
    STOPPED = "stopped"  # lease lost, drain, cancel grace spent, or collateral: Stopped


@dataclass(slots=True, eq=False)
class Running:
    """One attempt begun in the process pool, until its end is told."""

    job: Job
    is_async: bool
    on_end: OnEnd
    timeout: float | None
    started: float = 0.0  # loop time it was sent to an executor (0: not yet)
    timer: asyncio.TimerHandle | None = None
    stop_reason: StopReason | None = None
    ended: bool = False

    @property
    def lease(self) -> LeaseRef:
        return self.job.id, self.job.fence

    def stop(self, reason: StopReason = StopReason.STOPPED) -> None:
        """Mark it stopped, unless it was already, for whatever reason."""
        if self.stop_reason is None:
            self.stop_reason = reason

    def end(self, result: AttemptResult, now: float) -> None:
        """Tell its end, once: one the supervisor stopped ends as it stopped
        it, whatever the handler did meanwhile."""
        if self.ended:
            return
        self.ended = True
        if self.timer is not None:
            self.timer.cancel()
        if self.stop_reason is StopReason.TIMEOUT:
            result = TimedOut(self.timeout or 0.0)
        elif self.stop_reason is StopReason.STOPPED:
            result = Stopped()
        self.on_end(result, now - self.started if self.started else 0.0)


class FrameReader(asyncio.Protocol):
    """The frames of a child's pipe, handed to ``on_frames`` as they complete;
    ``closed`` is done at end of file (the child is dead, or dying)."""

    def __init__(self, on_frames: Callable[[list[Frame]], None]) -> None:
        self.on_frames = on_frames
        self.buffer = bytearray()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        try:
            frames = split(self.buffer)
        except WireError:  # not our child any more: as good as dead
            if self.transport is not None:
                self.transport.close()
            return
        if frames:
            self.on_frames(frames)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


@dataclass(eq=False)
class Child:
    """One executor process and the attempts it runs."""

    pid: int
    exited: asyncio.Future[int]  # its return code, told by the zygote that forked it
    ready: asyncio.Future[None]
    runs: asyncio.WriteTransport | None = None  # attempts and Exit, to the thread running them
    control: asyncio.WriteTransport | None = None  # cancels, aborts, replies
    reader: FrameReader | None = None
    jobs: dict[LeaseRef, Running] = field(default_factory=dict)  # by attempt
    # Its sync attempts in the order sent: the first runs, the others wait in
    # its pipe (it runs them one after the other).
    line: deque[Running] = field(default_factory=deque)
    done: int = 0
    retiring: bool = False
    killed: bool = False
    gone: bool = False  # its pipe closed: it is dead, or dying

    def take(self, running: Running, now: float) -> None:
        """Send it an attempt: an async one starts now, a sync one once those
        sent before it have ended."""
        self.jobs[running.lease] = running
        if not running.is_async:
            self.line.append(running)
        if running.is_async or len(self.line) == 1:
            running.started = now
        job = running.job
        upstream = None if job.workflow is None else list(job.upstream)
        self.send(Run(job.id, job.fence, job.task, job.queue, job.attempts, job.args, job.key,
                      job.traceparent, running.is_async, running.timeout is not None,
                      job.workflow, upstream))  # fmt: skip

    def ended(self, lease: LeaseRef, now: float) -> Running | None:
        """The attempt that ended, no longer its; the next sync one starts."""
        running = self.jobs.pop(lease, None)
        if running is None or running.is_async:
            return running
        self.line.remove(running)  # the first, unless the executor is not ours
        if self.line and not self.line[0].started:
            self.line[0].started = now
        return running

    def waiting(self) -> list[Running]:
        """Its sync attempts sent that have not started: they can go elsewhere."""
        return list(self.line)[1:]

    def send(self, message: ToExecutor) -> None:
        pipe = self.runs if isinstance(message, Run | Exit) else self.control
        if pipe is not None and not pipe.is_closing():
            pipe.write(frame(message))

    def close(self) -> None:
        reading = self.reader.transport if self.reader is not None else None
        for pipe in (self.runs, self.control, reading):
            if pipe is not None:
                pipe.close()

    async def answer(self, request: Request, link: Link) -> None:
        """Do what a handler asked of the supervisor, and tell it how that went."""
        running = self.jobs.get((request.id, request.fence))
        reply = Reply(request.req)
        try:
            if running is None or running.stop_reason is not None:
                raise LeaseLost(f"job {request.id} is no longer run by this executor")
            match request:
                case Progress(data=data):
                    await link.progress(running.job, data)
                case Heartbeat():
                    await link.heartbeat(running.job)
                case Upstream():
                    reply.data = encode_values(await link.upstream(running.job))
                case Spawn(seq=seq, flow=flow):
                    reply.data = await link.spawn(running.job, seq, flow_from_json(flow))
        except LeaseLost as exc:
            reply.error, reply.message = Refusal.LEASE_LOST, str(exc)
        except Exception as exc:
            reply.error, reply.message = Refusal.FAILED, str(exc)
        self.send(reply)

    def interrupt(self, running: Running) -> None:
        """Stop one attempt: one waiting in the pipe ends now, and the executor
        is killed if it comes to start it; an async one is cancelled (killed
        if it will not yield); a sync one is killed."""
        running.stop()
        loop = asyncio.get_running_loop()
        if running in self.waiting():
            loop.call_soon(running.end, Stopped(), loop.time())
        elif running.is_async and len(self.jobs) > 1:
            self.send(Cancel(running.job.id, running.job.fence))
            loop.call_later(ASYNC_CANCEL_GRACE, self._kill_if_running, running)
        else:
            self.kill_all()

    def _kill_if_running(self, running: Running) -> None:
        if self.jobs.get(running.lease) is running:
            self.kill_all()

    def abort(self, running: Running, grace: float) -> None:
        """Tell the handler its job was cancelled; stop it if it still runs
        ``grace`` seconds later."""
        self.send(Abort(running.job.id, running.job.fence))
        asyncio.get_running_loop().call_later(grace, self._abort_overdue, running)

    def _abort_overdue(self, running: Running) -> None:
        if self.jobs.get(running.lease) is running and not running.ended:
            log.warning("job %s was cancelled and did not stop: killing its executor %d",
                        running.job.id, self.pid)  # fmt: skip
            if running in self.waiting():
                self.interrupt(running)
            else:
                running.stop()
                self.kill_all()

    def kill_all(self) -> None:
        """Kill it to stop an attempt: the others it runs are collateral,
        handed back without penalty (those waiting go to another executor)."""
        waiting = self.waiting()
        for running in self.jobs.values():
            if running not in waiting:
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


async def fork(zygote: Zygote, on_frames: Callable[[Child, list[Frame]], None]) -> Child:
    """Have the zygote fork an executor process; it is ready when its
    ``ready`` future is done. Its frames go to ``on_frames``."""
    loop = asyncio.get_running_loop()
    runs_r, runs_w = os.pipe()
    control_r, control_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    try:
        pid, exited = await zygote.fork(runs_r, control_r, from_child_w)
    except BaseException:
        for fd in (runs_w, control_w, from_child_r):
            os.close(fd)
        raise
    finally:  # the child has its own: ours would keep its pipes from ending when it dies
        for fd in (runs_r, control_r, from_child_w):
            os.close(fd)
    child = Child(pid, exited, loop.create_future())
    child.runs, _ = await loop.connect_write_pipe(
        asyncio.Protocol, os.fdopen(runs_w, "wb", buffering=0)
    )
    child.control, _ = await loop.connect_write_pipe(
        asyncio.Protocol, os.fdopen(control_w, "wb", buffering=0)
    )
    reader = FrameReader(lambda frames: on_frames(child, frames))
    await loop.connect_read_pipe(lambda: reader, os.fdopen(from_child_r, "rb", buffering=0))
    child.reader = reader
    return child
