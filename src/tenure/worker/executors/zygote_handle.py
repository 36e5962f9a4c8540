"""The zygote as the supervisor holds it: asked for executors, and replaced if it dies.

The zygote itself is ``zygote_main.py``. It is the parent of the executors, so it
reaps them and says how each exited; if it dies, so do they (their
``PR_SET_PDEATHSIG``; elsewhere the pool kills them), and the next executor
asked for starts a new zygote, a fresh interpreter that imports the App again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tenure.errors import TenureError
from tenure.worker.executors.zygote_main import FORK, ForkedZygote

log = logging.getLogger("tenure.executor")

# Not ``-m``: the package imports the module before runpy would run it as __main__.
ZYGOTE_MAIN = "import sys; from tenure.worker.executors.zygote_main import main; main(sys.argv[1:])"
CLOSE_WAIT = 5.0  # seconds close() waits for the zygote to exit before it kills it


Forked = tuple[int, asyncio.Future[int]]  # an executor's pid, and its return code to come


@dataclass(eq=False)
class _Process:
    """One zygote process, from its start to its reaping."""

    pid: int
    sock: socket.socket
    wait: Callable[[], int]  # blocks until it has exited: its return code
    ready: asyncio.Future[None]
    forks: collections.deque[asyncio.Future[Forked]] = field(default_factory=collections.deque)
    exits: dict[int, asyncio.Future[int]] = field(default_factory=dict)  # by executor pid
    reader: asyncio.Task[None] | None = None
    dead: bool = False


class Zygote:
    """The supervisor's side of its zygote. ``on_death`` is called when a
    zygote dies unasked, before its executors' exits are told."""

    def __init__(
        self,
        app_path: str,
        forked: ForkedZygote | None = None,
        on_death: Callable[[], None] = lambda: None,
    ) -> None:
        self.app_path = app_path
        self.on_death = on_death
        self._forked = forked
        self._current: _Process | None = None
        self._sending = asyncio.Lock()
        self._closing = False

    @property
    def pid(self) -> int | None:
        return None if self._current is None or self._current.dead else self._current.pid

    async def start(self) -> None:
        """Adopt the zygote the CLI forked, or start one; return once it is ready."""
        await self._ready()

    async def fork(self, fd_runs: int, fd_control: int, fd_out: int) -> Forked:
        """An executor on these pipe ends: its pid, and a future of its return code."""
        zygote = await self._ready()
        forked: asyncio.Future[Forked] = asyncio.get_running_loop().create_future()
        refused: OSError | None = None
        async with self._sending:  # replies come in the order of the requests
            zygote.forks.append(forked)
            try:
                await _send_fds(zygote.sock, [fd_runs, fd_control, fd_out])
            except OSError as exc:
                zygote.forks.remove(forked)
                refused = exc
        if refused is not None:
            # Its end of the socket is gone: it died, and its reader is about to
            # see so. Wait for that (``pid`` None, ``on_death`` told) so that the
            # caller, asking again, asks the next zygote, not this one.
            if zygote.reader is not None:
                await asyncio.wait({zygote.reader}, timeout=CLOSE_WAIT)
            raise TenureError(f"the zygote {zygote.pid} took no request: {refused}")
        return await forked

    async def _ready(self) -> _Process:
        if self._closing:
            raise TenureError("the process pool is closing")
        if self._current is None or self._current.dead:
            self._current = self._adopt() if self._forked is not None else self._spawn()
            self._current.reader = asyncio.create_task(self._read(self._current))
        await asyncio.shield(self._current.ready)
        return self._current

    def _adopt(self) -> _Process:
        forked, self._forked = self._forked, None
        assert forked is not None
        forked.sock.setblocking(False)
        return _Process(forked.pid, forked.sock, lambda: _exit_code(forked.pid),
                        asyncio.get_running_loop().create_future())  # fmt: skip

    def _spawn(self) -> _Process:
        ours, theirs = socket.socketpair()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p or "." for p in sys.path)}
        with theirs:
            proc = subprocess.Popen(
                [sys.executable, "-c", ZYGOTE_MAIN, self.app_path, str(theirs.fileno()),
                 str(os.getpid())],
                pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        ours.setblocking(False)
        return _Process(proc.pid, ours, proc.wait, asyncio.get_running_loop().create_future())

    async def _read(self, zygote: _Process) -> None:
        loop = asyncio.get_running_loop()
        buffer = b""
        with contextlib.suppress(OSError, ValueError):  # ValueError: not JSON, not ours
            while data := await loop.sock_recv(zygote.sock, 1 << 16):
                *lines, buffer = (buffer + data).split(b"\n")
                for line in lines:
                    self._on_message(zygote, json.loads(line))
        await self._on_end(zygote)

    def _on_message(self, zygote: _Process, message: dict[str, Any]) -> None:
        match message:
            case {"forked": int(pid)}:
                exited = zygote.exits[pid] = asyncio.get_running_loop().create_future()
                if not (asking := zygote.forks.popleft()).done():
                    asking.set_result((pid, exited))
                # else the fork was cancelled: its pipes are closed, it exits on their end
            case {"exited": int(pid), "code": int(code)}:
                if (told := zygote.exits.pop(pid, None)) is not None:
                    told.set_result(code)
            case {"failed": str(error)}:
                if not (asking := zygote.forks.popleft()).done():
                    asking.set_exception(TenureError(error))
            case {"ready": int(), "threads": list(threads)}:
                if threads:
                    log.warning(
                        "importing the App started threads (%s): executors forked "
                        "from it have none of them",
                        ", ".join(map(str, threads)),
                    )
                zygote.ready.set_result(None)
            case {"fatal": str(error)} if not zygote.ready.done():
                zygote.ready.set_exception(TenureError(error))

    async def _on_end(self, zygote: _Process) -> None:
        zygote.dead = True
        zygote.sock.close()
        code = await asyncio.get_running_loop().run_in_executor(None, zygote.wait)
        how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
        if not zygote.ready.done():
            zygote.ready.set_exception(TenureError(f"the zygote {zygote.pid} {how} while starting"))
        started = zygote.ready.exception() is None  # retrieved: none may have awaited it
        if started and not self._closing:
            log.error("the zygote %d %s; its executors die with it, the next starts another",
                      zygote.pid, how)  # fmt: skip
            self.on_death()
        for forked in zygote.forks:
            if not forked.done():
                forked.set_exception(TenureError(f"the zygote {zygote.pid} {how}"))
        zygote.forks.clear()
        for exited in zygote.exits.values():  # PR_SET_PDEATHSIG, or the pool, killed them
            exited.set_result(-signal.SIGKILL)
        zygote.exits.clear()

    async def close(self) -> None:
        """Stop the zygote (its executors, if any are left, die with it)."""
        self._closing = True
        if self._forked is not None:  # never adopted
            self._forked.sock.close()
            await asyncio.get_running_loop().run_in_executor(None, _exit_code, self._forked.pid)
        zygote = self._current
        if zygote is None or zygote.reader is None:
            return
        if not zygote.dead:
            with contextlib.suppress(OSError):
                zygote.sock.shutdown(socket.SHUT_WR)  # end of file: it exits
        done, _ = await asyncio.wait({zygote.reader}, timeout=CLOSE_WAIT)
        if not done:
            with contextlib.suppress(ProcessLookupError):
                os.kill(zygote.pid, signal.SIGKILL)
            await zygote.reader


async def _send_fds(sock: socket.socket, fds: list[int]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        try:
            socket.send_fds(sock, [FORK], fds)
            return
        except BlockingIOError:
            writable: asyncio.Future[None] = loop.create_future()
            loop.add_writer(sock, _settle, writable)
            try:
                await writable
            finally:
                loop.remove_writer(sock)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _exit_code(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
