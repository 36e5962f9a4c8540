"""Wake-ups on SQLite, which cannot wake another process by itself.

Each registered worker listens on a unix datagram socket in the abstract
namespace (Linux), named after the database file and the worker. Whoever makes
a job runnable (an enqueue, a requeue, a rescue) rings the bell of every
registered worker once its transaction has committed; an idle worker then
claims at once instead of at the end of its backoff. Without abstract sockets
(not Linux) there are no bells and workers poll, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
from collections.abc import Iterable


class Doorbells:
    def __init__(self, db_path: str) -> None:
        digest = hashlib.sha1(os.path.abspath(db_path).encode()).hexdigest()[:16]
        self._prefix = f"\0tenure-{digest}-"
        self._bells: dict[str, socket.socket] = {}
        self._ringer: socket.socket | None = None

    def listen(self, worker_id: str) -> None:
        """Start listening for ``worker_id`` (best effort: no bell, no harm)."""
        bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            bell.bind(self._prefix + worker_id)
        except OSError:
            bell.close()
            return
        bell.setblocking(False)
        self._bells[worker_id] = bell

    def stop(self, worker_id: str) -> None:
        bell = self._bells.pop(worker_id, None)
        if bell is not None:
            bell.close()

    def ring(self, worker_ids: Iterable[str]) -> None:
        if self._ringer is None:
            self._ringer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._ringer.setblocking(False)
        for worker_id in worker_ids:
            with contextlib.suppress(OSError):  # gone, or its bell is full: it is awake
                self._ringer.sendto(b"!", self._prefix + worker_id)

    async def wait(self, timeout: float) -> None:
        """Until a bell of this process rings, or ``timeout`` seconds."""
        if not self._bells:
            await asyncio.sleep(timeout)
            return
        bell = next(iter(self._bells.values()))
        loop = asyncio.get_running_loop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(loop.sock_recv(bell, 16), timeout)
        with contextlib.suppress(OSError):  # one wake-up for everything rung meanwhile
            while bell.recv(16):
                pass

    def close(self) -> None:
        for worker_id in list(self._bells):
            self.stop(worker_id)
        if self._ringer is not None:
            self._ringer.close()
            self._ringer = None
