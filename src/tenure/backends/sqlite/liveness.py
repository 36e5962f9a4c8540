"""Worker liveness on SQLite: registration, heartbeats (the leases' renewal),
and the proof a worker is alive: an exclusive ``flock`` per worker, beside the
database.

A worker holds ``<db>.workers/<worker_id>.lock`` locked for its whole life. The
kernel releases the lock the moment the process dies, however it dies, so a
sweeper in any other process can tell a dead worker from a slow one by trying
the lock: if it can take it, the worker is gone.

Anyone who can open a lock file can hold a shared lock on it and make a dead
worker look alive, so the directory and its files belong to the database
file's owner and give nobody else access; its group shares them only when the
group may write the database (then its members run workers too). The wake-up
sockets (doorbells.py) live in the same directory for the same reason.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path

import orjson

from tenure.backends.base import LeaseRef, Renewal, WorkerInfo
from tenure.backends.sqlite.database import Database
from tenure.backends.sqlite.doorbells import Doorbells
from tenure.backends.sqlite.queries import Q
from tenure.core.clock import Clock
from tenure.core.names import check_name


@dataclass(frozen=True)
class Access:
    """Modes and owner for the directory beside a database and the files in it."""

    directory: int
    file: int
    owner: tuple[int, int] | None  # (uid, gid) to give them, when it is not ours

    @classmethod
    def following(cls, database: Path | None) -> Access:
        """The database's owner; its group only if the group may write it; others never."""
        if database is None:
            return cls(0o700, 0o600, None)
        st = os.stat(database)
        shared = st.st_mode & stat.S_IWGRP
        owner = (st.st_uid, st.st_gid)
        mine = owner == (os.geteuid(), os.getegid())
        return cls(0o770 if shared else 0o700, 0o660 if shared else 0o600, None if mine else owner)

    def apply(self, fd: int, mode: int) -> None:
        """Give the open file or directory this mode (whatever the umask) and owner,
        as far as we may: another user's stays as it is."""
        with contextlib.suppress(PermissionError):
            os.fchmod(fd, mode)
            if self.owner is not None:  # only root gives files away; a member, to its group
                uid, gid = self.owner
                os.fchown(fd, uid if os.geteuid() == 0 else -1, gid)


class WorkerLocks:
    """The liveness locks this process holds, and the test of others'."""

    def __init__(self, directory: Path | None, database: Path | None = None) -> None:
        self.directory = directory  # None: an in-memory database, one process only
        self.database = database  # whose owner and mode the directory follows
        self._held: dict[str, int] = {}
        self._access: Access | None = None  # once the directory is prepared

    def _path(self, worker_id: str) -> Path:
        assert self.directory is not None
        check_name("worker", worker_id)
        return self.directory / f"{worker_id}.lock"

    def hold(self, worker_id: str) -> None:
        """Take the worker's lock for as long as this process lives (or until release)."""
        if self.directory is None or worker_id in self._held:
            return
        access = self._prepare(self.directory)
        fd = os.open(self._path(worker_id), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, access.file)
        try:
            access.apply(fd, access.file)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        self._held[worker_id] = fd

    def _prepare(self, directory: Path) -> Access:
        """The directory, made (or, made by an older tenure, narrowed) to the database's access."""
        if self._access is None:
            access = Access.following(self.database)
            with contextlib.suppress(FileExistsError):
                os.mkdir(directory, access.directory)
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                access.apply(fd, access.directory)
            finally:
                os.close(fd)
            self._access = access
        return self._access

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


class Workers:
    """Workers' rows, their leases' renewal, and their liveness locks. Its
    methods run on the backend's thread."""

    def __init__(
        self, db: Database, clock: Clock, locks: WorkerLocks, doorbells: Doorbells
    ) -> None:
        self.db = db
        self.clock = clock
        self.locks = locks
        self.doorbells = doorbells

    def register(self, info: WorkerInfo) -> None:
        self.locks.hold(info.id)  # before the row exists, so a row always has its lock
        self.doorbells.listen(info.id)
        now = self.clock.now()
        with self.db.tx() as conn:
            conn.execute(
                Q["register_worker"],
                (info.id, info.hostname, info.pid, orjson.dumps(list(info.queues)).decode(),
                 now, now),
            )  # fmt: skip

    def deregister(self, worker_id: str) -> None:
        with self.db.tx() as conn:
            conn.execute(Q["deregister_worker"], (worker_id,))
        self.locks.release(worker_id)
        self.doorbells.stop(worker_id)

    def heartbeat(self, worker_id: str, held: set[LeaseRef]) -> Renewal:
        self.db.file.check()  # once per interval: a deleted or replaced file stops the worker
        now = self.clock.now()
        with self.db.tx() as conn:
            presented = orjson.dumps([list(lease) for lease in held])
            rows = conn.execute(Q["renew_leases"], (now, worker_id, presented)).fetchall()
            conn.execute(Q["touch_worker"], (now, worker_id))
        renewed = {(i, f) for i, f, _ in rows}
        return Renewal(
            frozenset(held - renewed), frozenset((i, f) for i, f, cancel in rows if cancel)
        )

    def workers(self) -> list[WorkerInfo]:
        conn = self.db.conn
        leases = dict(conn.execute(Q["leases_held"]).fetchall())
        return [
            WorkerInfo(i, h, p, tuple(orjson.loads(q)), s, seen, leases.get(i, 0),
                       self._seems_alive(i))
            for i, h, p, q, s, seen in conn.execute(Q["list_workers"])
        ]  # fmt: skip

    def _seems_alive(self, worker_id: str) -> bool:
        """Whether the worker's lock is held; True when this user may not open
        lock files (a reader of the database only): then its heartbeat tells."""
        try:
            return self.locks.alive(worker_id)
        except PermissionError:
            return True

    def bury_dead(self, conn: sqlite3.Connection) -> dict[str, float]:
        """Forget registered workers whose liveness lock is free: they are gone.
        Returns when each was last seen (its last heartbeat)."""
        dead = {}
        for worker_id, *_, last_seen in conn.execute(Q["list_workers"]).fetchall():
            if not self.locks.alive(worker_id):
                conn.execute(Q["deregister_worker"], (worker_id,))
                self.locks.forget(worker_id)
                self.doorbells.forget(worker_id)
                dead[worker_id] = last_seen
        return dead
