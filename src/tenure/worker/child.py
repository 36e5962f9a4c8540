"""The executor process: runs handlers for its supervisor, and nothing else.

It never talks to storage. It dies with its supervisor: ``PR_SET_PDEATHSIG``
kills it the moment the supervisor's thread that spawned it dies, and end of
file on its command pipe makes it exit at once (belt and braces: the signal is
Linux-only, the pipe is not). It ignores SIGINT and SIGTERM, which a terminal or
an init system may send to the whole process group: the supervisor decides when
its handlers stop.

Sync handlers run on the main thread, one at a time; async handlers run on an
event loop in a second thread, up to ``--async-slots`` at once. A reader
thread takes commands and replies off the pipe.

Run as ``python -m tenure.worker.child APP_PATH FD_IN FD_OUT PARENT_PID``.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import queue
import signal
import sys
import threading
from concurrent.futures import Future
from typing import Any

from tenure.context import JobContext, Transaction, running
from tenure.core.payload import check as check_json
from tenure.errors import InvalidInput, LeaseLost, TenureError
from tenure.hooks import Hooks
from tenure.worker.executor import Raised, Settled, outcome_of
from tenure.worker.wire import Message, frame, read_frame, write_all

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies; exit now if it already has."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(0)


class Executor:
    def __init__(self, fd_in: int, fd_out: int) -> None:
        self.fd_in, self.fd_out = fd_in, fd_out
        self._write_lock = threading.Lock()
        self._sync_jobs: queue.SimpleQueue[tuple[Message, JobContext] | None] = queue.SimpleQueue()
        # Attempts given to run and not done, by (job id, fence): made by the
        # reader thread, so that an abort right after the run finds its attempt.
        self._contexts: dict[tuple[str, int], JobContext] = {}
        self._replies: dict[int, Future[Message]] = {}
        self._next_request = 0
        self._request_lock = threading.Lock()
        self._aio_loop: asyncio.AbstractEventLoop | None = None
        self._aio_tasks: dict[tuple[str, int], asyncio.Task[Any]] = {}  # by (job id, fence)
        self.tasks: dict[str, Any] = {}
        self.transaction: Transaction | None = None
        self.hooks = Hooks()  # the App's, once loaded

    def send(self, message: Message) -> None:
        data = frame(message)
        with self._write_lock:
            write_all(self.fd_out, data)

    # -- requests to the supervisor (progress, heartbeat) --------------------

    def request(self, message: Message) -> Message:
        with self._request_lock:
            self._next_request += 1
            req = self._next_request
            reply: Future[Message] = Future()
            self._replies[req] = reply
        self.send({**message, "req": req})
        answer = reply.result()
        if answer.get("error") == "lease_lost":
            raise LeaseLost(answer.get("message", "this attempt's lease was lost"))
        if answer.get("error"):
            raise TenureError(str(answer.get("message")))
        return answer

    def _ask(self, message: Message) -> None:
        self.request(message)

    def context(self, job: Message) -> JobContext:
        ids = {"id": job["id"], "fence": job["fence"]}
        return JobContext(
            id=job["id"],
            task=job["task"],
            queue=job["queue"],
            attempt=job["attempt"],
            fence=job["fence"],
            args=job["args"],
            key=job.get("key"),
            traceparent=job.get("traceparent"),
            _progress=lambda data: self._ask({"op": "progress", **ids, "data": data}),
            _heartbeat=lambda: self._ask({"op": "heartbeat", **ids}),
            _transaction=self.transaction,
        )

    # -- the reader thread ---------------------------------------------------

    def read_forever(self) -> None:
        while True:
            try:
                message = read_frame(self.fd_in)
            except Exception:  # a broken pipe or frame: the supervisor is gone or mad
                message = None
            if message is None or message["op"] == "exit":
                os._exit(0)  # the supervisor is gone or asked: no handler runs on
            op = message["op"]
            if op == "reply":
                future = self._replies.pop(message["req"], None)
                if future is not None:
                    future.set_result(message)
            elif op == "run":
                ctx = self._contexts[message["id"], message["fence"]] = self.context(message)
                if message["async"]:
                    self._start_async(message, ctx)
                else:
                    self._sync_jobs.put((message, ctx))
            elif op == "cancel":
                self._cancel_async((message["id"], message["fence"]))
            elif op == "abort":  # the job was cancelled: tell its handler
                told = self._contexts.get((message["id"], message["fence"]))
                if told is not None:
                    told._cancel()

    # -- running handlers ----------------------------------------------------

    def run_sync_forever(self) -> None:
        while (item := self._sync_jobs.get()) is not None:
            job, ctx = item
            if job.get("timed"):  # the deadline counts from here: tell the supervisor
                self.send({"op": "started", "id": job["id"], "fence": job["fence"]})
            try:
                with running(ctx), self.hooks.around(ctx):
                    value = self.tasks[job["task"]].fn(**job["args"])
                done = _done(job, ctx, value, None)
            except BaseException as exc:
                done = _done(job, ctx, None, exc)
            self._contexts.pop((job["id"], job["fence"]), None)
            self.send(done)

    def _start_async(self, job: Message, ctx: JobContext) -> None:
        if self._aio_loop is None:
            self._aio_loop = asyncio.new_event_loop()
            threading.Thread(target=self._aio_loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._run_async(job, ctx), self._aio_loop)

    async def _run_async(self, job: Message, ctx: JobContext) -> None:
        attempt = (job["id"], job["fence"])
        self._aio_tasks[attempt] = task = asyncio.current_task()  # type: ignore[assignment]
        ctx._running_in(task)
        if job.get("timed"):
            self.send({"op": "started", "id": job["id"], "fence": job["fence"]})
        try:
            with running(ctx), self.hooks.around(ctx):
                value = await self.tasks[job["task"]].fn(**job["args"])
            done = _done(job, ctx, value, None)
        except BaseException as exc:
            done = _done(job, ctx, None, exc)
        finally:
            self._aio_tasks.pop(attempt, None)
            self._contexts.pop(attempt, None)
        self.send(done)

    def _cancel_async(self, attempt: tuple[str, int]) -> None:
        task = self._aio_tasks.get(attempt)
        if task is not None and self._aio_loop is not None:
            self._aio_loop.call_soon_threadsafe(task.cancel)


def _done(job: Message, ctx: JobContext, value: Any, exc: BaseException | None) -> Message:
    message: Message = {"op": "done", "id": job["id"], "fence": job["fence"]}
    match outcome_of(ctx, value, exc):
        case Settled(error):
            return {**message, "kind": "settled", "error": error}
        case Raised(kind, tb, retry_in, reason):
            return {**message, "kind": kind, "error": tb, "retry_in": retry_in, "reason": reason}
        case _:
            pass
    try:  # here: on the pipe, a NaN would become null and a datetime a string
        check_json(value, what="job result")
    except InvalidInput as error:
        return {**message, "kind": "error", "error": f"bad result: {error}"}
    return {**message, "kind": "returned", "value": value}


def main(argv: list[str]) -> None:
    app_path, fd_in, fd_out, parent = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    die_with_parent(parent)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    for fd in (fd_in, fd_out):
        os.set_inheritable(fd, False)  # a handler's own children must not hold our pipes
    executor = Executor(fd_in, fd_out)
    try:
        from tenure.backends.factory import from_url
        from tenure.loader import load_app

        app = load_app(app_path)
        executor.tasks = app.tasks
        executor.hooks = app.hooks
        executor.transaction = getattr(from_url(app.url), "transaction", None)
    except BaseException as exc:
        executor.send({"op": "fatal", "error": f"executor cannot load {app_path}: {exc}"})
        os._exit(1)
    threading.Thread(target=executor.read_forever, name="tenure-reader", daemon=True).start()
    executor.send({"op": "ready", "pid": os.getpid()})
    executor.run_sync_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
