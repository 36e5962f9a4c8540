"""Wake-ups on SQLite, which cannot wake another process by itself.

Each registered worker listens on a unix datagram socket,
``<db>.workers/<worker_id>.bell``. Whoever makes a job runnable (an enqueue, a
requeue, a rescue) rings the bell of every registered worker once its
transaction has committed; an idle worker then claims at once instead of at
the end of its backoff. The sockets are files in the workers' directory, which
only the database's owner (and, if it may write the database, its group) can
enter (liveness.py): anyone could send to a socket of the abstract namespace.
A path too long for a socket address is reached through the directory's file
descriptor (``/proc/self/fd``); where neither works there are no bells, and
workers poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterable

MAX_ADDRESS = 107  # bytes of a unix socket's path (sun_path, less its final NUL)


class Doorbells:
    """Wake-ups of idle workers on one host: a datagram to each worker's socket."""

    def __init__(self, directory: str | None) -> None:
        self.directory = directory  # the workers' directory; None: no bells (in memory)
        self._dir_fd: int | None = None  # to reach it by a short path, if its own is too long
        self._bells: dict[str, socket.socket] = {}
        self._ringer: socket.socket | None = None

    def _address(self, worker_id: str) -> str:
        assert self.directory is not None
        path = os.path.join(self.directory, f"{worker_id}.bell")
        if len(os.fsencode(path)) <= MAX_ADDRESS:
            return path
        if self._dir_fd is None:
            self._dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return f"/proc/self/fd/{self._dir_fd}/{worker_id}.bell"

    def listen(self, worker_id: str) -> None:
        """Start listening for ``worker_id`` (best effort: no bell, no harm). The
        workers' directory exists by now: the worker holds its lock in it."""
        if self.directory is None:
            return
        bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            address = self._address(worker_id)
            with contextlib.suppress(FileNotFoundError):  # left by a process of ours that died
                os.unlink(address)
            bell.bind(address)
        except OSError:
            bell.close()
            return
        bell.setblocking(False)
        self._bells[worker_id] = bell

    def stop(self, worker_id: str) -> None:
        bell = self._bells.pop(worker_id, None)
        if bell is not None:
            bell.close()
            self.forget(worker_id)

    def forget(self, worker_id: str) -> None:
        """Remove a worker's bell (its worker stopped, or died)."""
        if self.directory is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._address(worker_id))

    def ring(self, worker_ids: Iterable[str]) -> None:
        if self.directory is None:
            return
        if self._ringer is None:
            self._ringer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._ringer.setblocking(False)
        for worker_id in worker_ids:
            with contextlib.suppress(OSError):  # gone, or its bell is full: it is awake
                self._ringer.sendto(b"!", self._address(worker_id))

    def ring_once(self, worker_ids: Iterable[str]) -> None:
        """``ring``, from any thread: with a socket of its own, closed after."""
        if self.directory is None:
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as ringer:
            ringer.setblocking(False)
            for worker_id in worker_ids:
                with contextlib.suppress(OSError):  # gone, or its bell is full: it is awake
                    ringer.sendto(b"!", self._address(worker_id))

    async def wait(self, timeout: float) -> None:
        """Until a bell of this process rings, or ``timeout`` seconds."""
        if not self._bells:
            await asyncio.sleep(timeout)
            return
        bell = next(iter(self._bells.values()))
        loop = asyncio.get_running_loop()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await loop.sock_recv(bell, 16)
        with contextlib.suppress(OSError):  # one wake-up for everything rung meanwhile
            while bell.recv(16):
                pass

    def close(self) -> None:
        """Close every bell; their files stay, as their lock files do (to the
        fleet, these workers died; a sweeper removes both)."""
        for bell in self._bells.values():
            bell.close()
        self._bells.clear()
        if self._ringer is not None:
            self._ringer.close()
            self._ringer = None
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None
