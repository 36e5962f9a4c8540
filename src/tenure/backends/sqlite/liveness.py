"""Worker liveness on SQLite: an exclusive ``flock`` per worker, beside the database.

A worker holds ``<db>.workers/<worker_id>.lock`` locked for its whole life. The
kernel releases the lock the moment the process dies, however it dies, so a
sweeper in any other process can tell a dead worker from a slow one by trying
the lock: if it can take it, the worker is gone.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from tenure.core.names import check_name


class WorkerLocks:
    """The liveness locks this process holds, and the test of others'."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory  # None: an in-memory database, one process only
        self._held: dict[str, int] = {}

    def _path(self, worker_id: str) -> Path:
        assert self.directory is not None
        check_name("worker", worker_id)
        return self.directory / f"{worker_id}.lock"

    def hold(self, worker_id: str) -> None:
        """Take the worker's lock for as long as this process lives (or until release)."""
        if self.directory is None or worker_id in self._held:
            return
        self.directory.mkdir(mode=0o755, exist_ok=True)
        fd = os.open(self._path(worker_id), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        self._held[worker_id] = fd

    def alive(self, worker_id: str) -> bool:
        """Whether some live process holds the worker's lock."""
        if self.directory is None or worker_id in self._held:
            return worker_id in self._held or self.directory is None
        try:
            fd = os.open(self._path(worker_id), os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return True
            raise
        finally:
            os.close(fd)  # also drops the lock if we took it
        return False

    def forget(self, worker_id: str) -> None:
        """Remove a dead worker's lock file."""
        if self.directory is not None:
            self._path(worker_id).unlink(missing_ok=True)

    def release(self, worker_id: str) -> None:
        fd = self._held.pop(worker_id, None)
        if fd is not None:
            self.forget(worker_id)
            os.close(fd)

    def release_all(self) -> None:
        """Drop every lock without removing files: to the fleet, these workers died."""
        for fd in self._held.values():
            os.close(fd)
        self._held.clear()
