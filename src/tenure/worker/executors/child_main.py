"""The executor process: runs handlers for its supervisor, and nothing else.

It never talks to storage. It dies with its supervisor: ``PR_SET_PDEATHSIG``
kills it the moment its zygote dies, which dies with the supervisor the same
way, and end of file on its pipes makes it exit at once (belt and braces: the
signal is Linux-only, the pipes are not). It ignores SIGINT and SIGTERM, which
a terminal or an init system may send to the whole process group: the
supervisor decides when its handlers stop.

The main thread reads the attempts to run off their own pipe, and runs sync
handlers itself, one at a time: from one attempt's end to the next one's
start, no other thread has to wake. Async handlers run on an event loop in a
second thread, up to ``--async-slots`` at once. A reader thread takes what
must reach a handler while it runs (aborts, cancels, replies) off a second
pipe, silent while jobs merely flow.

The zygote (``zygote_main.py``) forks it, with the App imported already, and calls
:func:`run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, NoReturn

from tenure.backends.base import LeaseRef
from tenure.context import JobContext, Transaction
from tenure.core.payload import check as check_json
from tenure.core.workflows import Flow
from tenure.errors import InvalidInput, LeaseLost, TenureError
from tenure.flows import decode_values, flow_to_json
from tenure.hooks import Hooks
from tenure.worker.executors.base import HandlerEnd, Raise, Raised, Returned
from tenure.worker.executors.handlers import raised, run_async, run_sync
from tenure.worker.executors.wire import (
    Abort,
    Cancel,
    Done,
    Fatal,
    Heartbeat,
    Progress,
    Ready,
    Refusal,
    Reply,
    Request,
    Run,
    Spawn,
    Started,
    ToSupervisor,
    Upstream,
    frame,
    read_frame,
    split,
    write_all,
)

if TYPE_CHECKING:
    from tenure.app import App

PR_SET_PDEATHSIG = 1
ABORTS_KEPT = 64  # aborts of attempts not read yet (see ExecutorProcess)


def die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies; exit now if it already has."""
    if sys.platform.startswith("linux"):
        import ctypes  # here: the supervisor never needs it; the zygote's forks inherit it

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(0)


def batch_scheduling() -> None:
    """Have Linux schedule this process as a batch one (``SCHED_BATCH``: the
    same share of the CPU, but its wake-ups do not preempt what runs). On a
    busy machine an executor woken by its handler's I/O would otherwise
    preempt the supervisor mid-cycle, and every executor waits on the
    supervisor. Where the policy does not exist, nothing changes."""
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is not None:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, policy, os.sched_param(0))


class ExecutorProcess:
    """The inside of one executor process: takes attempts off the pipe, runs
    their handlers, and sends back how each ended."""

    def __init__(self, fd_runs: int, fd_control: int, fd_out: int) -> None:
        self.fd_runs, self.fd_control, self.fd_out = fd_runs, fd_control, fd_out
        self._write_lock = threading.Lock()
        # Attempts given to run and not done, made by the main thread as it
        # reads them; an abort that comes before its attempt was read waits
        # in ``_aborted`` (both under ``_attempts_lock``), the newest
        # ABORTS_KEPT only: one that came just after its attempt ended is
        # never taken, and the supervisor stops an attempt whose handler
        # did not stop in time anyway.
        self._contexts: dict[LeaseRef, JobContext] = {}
        self._aborted: dict[LeaseRef, None] = {}  # in arrival order
        self._attempts_lock = threading.Lock()
        self._replies: dict[int, Future[Reply]] = {}
        self._next_request = 0
        self._request_lock = threading.Lock()
        self._aio_loop: asyncio.AbstractEventLoop | None = None
        self._aio_tasks: dict[LeaseRef, asyncio.Task[Any]] = {}
        self.tasks: dict[str, Any] = {}
        self.transaction: Transaction | None = None
        self.hooks = Hooks()  # the App's, once loaded

    def send(self, message: ToSupervisor) -> None:
        data = frame(message)
        with self._write_lock:
            write_all(self.fd_out, data)

    # -- requests to the supervisor (progress, heartbeat) --------------------

    def _request_number(self) -> tuple[int, Future[Reply]]:
        with self._request_lock:
            self._next_request += 1
            req = self._next_request
            reply: Future[Reply] = Future()
            self._replies[req] = reply
        return req, reply

    def _ask(self, request: Request, reply: Future[Reply]) -> Any:
        self.send(request)
        answer = reply.result()
        if answer.error is Refusal.LEASE_LOST:
            raise LeaseLost(answer.message or "this attempt's lease was lost")
        if answer.error is not None:
            raise TenureError(answer.message)
        return answer.data

    def progress(self, run: Run, data: Any) -> None:
        req, reply = self._request_number()
        self._ask(Progress(req, run.id, run.fence, data), reply)

    def heartbeat(self, run: Run) -> None:
        req, reply = self._request_number()
        self._ask(Heartbeat(req, run.id, run.fence), reply)

    def upstream(self, run: Run) -> list[Any]:
        req, reply = self._request_number()
        return decode_values(self._ask(Upstream(req, run.id, run.fence), reply))

    def spawn(self, run: Run, seq: int, flow: Flow) -> list[str]:
        req, reply = self._request_number()
        ids: list[str] = self._ask(Spawn(req, run.id, run.fence, seq, flow_to_json(flow)), reply)
        return ids

    def context(self, run: Run) -> JobContext:
        return JobContext(
            id=run.id,
            task=run.task,
            queue=run.queue,
            attempt=run.attempt,
            fence=run.fence,
            args=run.args,
            key=run.key,
            traceparent=run.traceparent,
            _progress=lambda data: self.progress(run, data),
            _heartbeat=lambda: self.heartbeat(run),
            _transaction=self.transaction,
            workflow=run.workflow,
            _upstream=lambda: self.upstream(run),
            _spawn=lambda seq, flow: self.spawn(run, seq, flow),
        )

    # -- the reader thread ---------------------------------------------------

    def read_forever(self) -> None:
        while True:
            try:
                message = read_frame(self.fd_control)
            except Exception:  # a broken pipe or frame: the supervisor is gone or mad
                message = None
            match message:
                case None:
                    os._exit(0)  # the supervisor is gone: no handler runs on
                case Reply(req=req):
                    if (future := self._replies.pop(req, None)) is not None:
                        future.set_result(message)
                case Cancel(id=job_id, fence=fence):
                    self._cancel_async((job_id, fence))
                case Abort(id=job_id, fence=fence):  # the job was cancelled: tell its handler
                    self.abort((job_id, fence))

    def abort(self, attempt: LeaseRef) -> None:
        """Tell the attempt's handler its job was cancelled, now or when it starts."""
        with self._attempts_lock:
            told = self._contexts.get(attempt)
            if told is None:
                self._aborted[attempt] = None
                if len(self._aborted) > ABORTS_KEPT:
                    del self._aborted[next(iter(self._aborted))]
        if told is not None:
            told._cancel()

    # -- the main thread: attempts in, handlers run ----------------------------

    def run_forever(self) -> NoReturn:
        buffer = bytearray()
        while True:
            try:
                data = os.read(self.fd_runs, 1 << 16)
                buffer += data
                messages = split(buffer) if data else None
            except Exception:  # a broken pipe or frame: the supervisor is gone or mad
                messages = None
            if messages is None:
                os._exit(0)  # the supervisor is gone: no handler runs on
            for message in messages:
                if not isinstance(message, Run):
                    os._exit(0)  # Exit: this executor ran its share of jobs
                ctx = self.take(message)
                if message.is_async:
                    self._start_async(message, ctx)
                else:
                    self._run_sync(message, ctx)

    def take(self, run: Run) -> JobContext:
        """The context of an attempt just read, cancelled already if its abort came first."""
        ctx = self.context(run)
        attempt = (run.id, run.fence)
        with self._attempts_lock:
            self._contexts[attempt] = ctx
            if self._aborted and attempt in self._aborted:
                del self._aborted[attempt]
                ctx._cancel()
        return ctx

    def _run_sync(self, run: Run, ctx: JobContext) -> None:
        if run.timed:  # the deadline counts from here: tell the supervisor
            self.send(Started(run.id, run.fence))
        result: HandlerEnd
        try:
            result = run_sync(self.tasks[run.task].fn, ctx, self.hooks)
        except BaseException as exc:  # no such task here
            result = raised(exc)
        self._contexts.pop((run.id, run.fence), None)
        self.send(_done(run, result))

    def _start_async(self, run: Run, ctx: JobContext) -> None:
        if self._aio_loop is None:
            self._aio_loop = asyncio.new_event_loop()
            threading.Thread(target=self._aio_loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._run_async(run, ctx), self._aio_loop)

    async def _run_async(self, run: Run, ctx: JobContext) -> None:
        attempt = (run.id, run.fence)
        self._aio_tasks[attempt] = asyncio.current_task()  # type: ignore[assignment]
        if run.timed:
            self.send(Started(run.id, run.fence))
        result: HandlerEnd
        try:
            result = await run_async(self.tasks[run.task].fn, ctx, self.hooks)
        except asyncio.CancelledError:  # the supervisor asked: it knows the end already
            result = Raised(Raise.CANCELLED, "cancelled by the supervisor")
        except BaseException as exc:  # no such task here
            result = raised(exc)
        finally:
            self._aio_tasks.pop(attempt, None)
            self._contexts.pop(attempt, None)
        self.send(_done(run, result))

    def _cancel_async(self, attempt: LeaseRef) -> None:
        task = self._aio_tasks.get(attempt)
        if task is not None and self._aio_loop is not None:
            self._aio_loop.call_soon_threadsafe(task.cancel)


def _done(run: Run, result: HandlerEnd) -> Done:
    if isinstance(result, Returned):
        try:  # here: on the pipe, a NaN would become null and a datetime a string
            check_json(result.value, what="job result")
        except InvalidInput as error:
            result = Raised(Raise.ERROR, f"bad result: {error}")
    return Done.of(run.id, run.fence, result)


def run(app: App, fd_runs: int, fd_control: int, fd_out: int, parent: int) -> NoReturn:
    """Be an executor for ``app`` on these pipes, in a process the zygote
    ``parent`` forked; never returns."""
    die_with_parent(parent)
    batch_scheduling()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    for fd in (fd_runs, fd_control, fd_out):
        os.set_inheritable(fd, False)  # a handler's own children must not hold our pipes
    executor = ExecutorProcess(fd_runs, fd_control, fd_out)
    try:
        from tenure.backends.factory import from_url

        executor.tasks = app.tasks
        executor.hooks = app.hooks
        executor.transaction = from_url(app.url).transaction  # its own, opened on first use
    except BaseException as exc:
        executor.send(Fatal(f"executor cannot start: {exc}"))
        os._exit(1)
    threading.Thread(target=executor.read_forever, name="tenure-reader", daemon=True).start()
    executor.send(Ready(os.getpid()))
    executor.run_forever()
