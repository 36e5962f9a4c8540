"""A PostgreSQL primary and its streaming standby, for failover tests.

The standby is the primary's data copied by ``pg_basebackup -R`` (which
writes ``standby.signal`` and ``primary_conninfo``), started on a port of
its own. :class:`ReplicatedPostgres` keeps the pair: ``url()`` names both
hosts, as a client configured for failover does; ``failover()`` kills the
primary (kill -9) and promotes the standby; ``rebuild()`` makes a new standby
of the new primary on the old one's port, so the URL stays right.

Given a network namespace, the primary runs in it, on a host of its own
(:class:`HostedPostgres`): a failover can then make that host vanish (its end
of the cable down) before the kill, so that its clients' connections are left
half-open, as when a machine loses its power.

With ``synchronous=True`` the primary's commits wait for the standby to flush
them (``synchronous_commit=on``, ``synchronous_standby_names='*'``); without,
replication is asynchronous (PostgreSQL's default).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import TYPE_CHECKING

from tests.servers import PostgresServer, ServerUnavailable, postgres_bin

if TYPE_CHECKING:
    from tests.fault.nemesis import Netns


class PostgresStandby(PostgresServer):
    """A streaming standby of ``primary``, read-only until promoted."""

    def __init__(self, primary: PostgresServer, *, port: int | None = None) -> None:
        self.primary = primary
        super().__init__(port=port)

    def create(self) -> None:
        basebackup = postgres_bin("pg_basebackup")
        if basebackup is None:
            raise ServerUnavailable("pg_basebackup not found")
        primary = self.primary
        self._run([basebackup, "-h", primary.host, "-p", str(primary.port), "-U", "postgres",
                   "-D", str(self.data), "-R", "-X", "stream", "-c", "fast",
                   "--no-sync"])  # fmt: skip
        # The primary's wish to wait for a standby is not this one's, once promoted:
        # it would wait for a standby it does not have. The last setting wins.
        with (self.data / "postgresql.auto.conf").open("a") as conf:
            conf.write("synchronous_standby_names = ''\n")

    def promote(self) -> None:
        """Make this standby a primary; returns once it accepts writes."""
        self._run([self.pg_ctl, "-D", str(self.data), "-w", "-t", "60", "promote"])


class HostedPostgres(PostgresServer):
    """A PostgreSQL in network namespace ``netns``, reached at its address only."""

    def __init__(self, netns: Netns) -> None:
        self.netns = netns
        self.wrapper = ("ip", "netns", "exec", netns.name)
        super().__init__(listen=(netns.ns_ip,))

    def start(self) -> None:
        subnet = self.netns.ns_ip.rsplit(".", 1)[0] + ".0/24"
        hba = self.data / "pg_hba.conf"
        lines = [f"host all all {subnet} trust\n", f"host replication all {subnet} trust\n"]
        text = hba.read_text()
        with hba.open("a") as f:
            f.writelines(line for line in lines if line not in text)
        super().start()

    def vanish(self) -> None:
        """Its host gone: the cable cut at its end, then every process killed."""
        self.netns.vanish()
        self.kill9()


class ReplicatedPostgres:
    """A primary and a streaming standby of it, on random ports."""

    def __init__(self, *, synchronous: bool, netns: Netns | None = None) -> None:
        self.synchronous = synchronous
        self.primary: PostgresServer = PostgresServer() if netns is None else HostedPostgres(netns)
        self.standby: PostgresStandby | None = None
        self.dead: PostgresServer | None = None  # the killed primary, until rebuilt
        self._count = 0
        try:
            self.standby = PostgresStandby(self.primary)
            self.hosts = [f"{s.host}:{s.port}" for s in (self.primary, self.standby)]
            self.attached()
        except BaseException:
            self.close()
            raise

    def url(self, database: str = "postgres") -> str:
        """Both hosts, the first primary's first: a rebuilt standby keeps its port."""
        return f"postgresql://postgres@{','.join(self.hosts)}/{database}"

    def new_database(self) -> str:
        """A new database on the primary (the standby replays it), named by a URL of both hosts."""
        self._count += 1
        name = f"f{self._count}_{int(time.time() * 1000) % 100000}"
        self.primary.psql(f"CREATE DATABASE {name}")
        return self.url(name)

    def attached(self, timeout: float = 30.0) -> None:
        """Wait until the standby streams (and, if synchronous, commits wait for it)."""
        if self.synchronous:
            self.primary.psql("ALTER SYSTEM SET synchronous_standby_names = '*'")
            self.primary.psql("SELECT pg_reload_conf()")
        wanted = "sync" if self.synchronous else "async"
        query = "SELECT string_agg(state || ':' || sync_state, ',') FROM pg_stat_replication"
        deadline = time.monotonic() + timeout
        while (found := self.primary.psql(query)) != f"streaming:{wanted}":
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"the standby does not stream as {wanted}: {found!r}")
            time.sleep(0.05)

    def failover(
        self, lag: float = 0.0, *, vanish: bool = False, detect: float = 0.0
    ) -> tuple[float, float, float]:
        """Kill -9 the primary and promote the standby: when the standby stopped
        receiving, when the primary was dead, and when the standby was promoted
        (wall-clock times). With ``lag``,
        the primary stops sending WAL (its walsender frozen) that long before the
        kill, as if the standby had fallen behind by as much. With ``vanish``, its
        host vanishes first (a HostedPostgres). ``detect``: the seconds a
        failover manager takes to decide, between the death and the promotion."""
        assert self.standby is not None
        stopped = time.time()
        if lag:
            [sender] = self.primary.psql("SELECT pid FROM pg_stat_replication").split()
            os.kill(int(sender), signal.SIGSTOP)
            time.sleep(lag)  # the lag itself
        if vanish:
            assert isinstance(self.primary, HostedPostgres)
            self.primary.vanish()
        else:
            self.primary.kill9()
        # When it is all dead: a backend commits until its own SIGKILL lands.
        killed = time.time()
        time.sleep(detect)  # the failover manager's own delay, a cadence
        self.standby.promote()
        promoted = time.time()
        self.dead, self.primary, self.standby = self.primary, self.standby, None
        return stopped, killed, promoted

    def rebuild(self) -> None:
        """A new standby of the new primary, on the killed one's port."""
        assert self.dead is not None and self.standby is None
        assert not isinstance(self.dead, HostedPostgres), "its host is gone for good"
        port = self.dead.port
        self.dead.close()
        self.dead = None
        self.standby = PostgresStandby(self.primary, port=port)
        self.attached()

    def close(self) -> None:
        """Kill both (nothing of theirs is kept: pg_ctl's stop waits for seconds
        on a loaded machine) and remove their directories."""
        for server in (self.standby, self.primary, self.dead):
            if server is not None:
                with contextlib.suppress(OSError, ValueError, ServerUnavailable):
                    server.kill9()  # OSError: not running (no pid file, or gone)
                server.close()
