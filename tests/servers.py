"""Real PostgreSQL and Redis servers for the tests: started from the binaries on
the machine, on random ports, in temporary directories, so that fault tests can
stop, restart and freeze them.

PostgreSQL refuses to run as root: as root, the data and socket directories
belong to the ``postgres`` user and the server runs as that user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

from tenure.chaos.lab import process_gone


class ServerUnavailable(Exception):
    """The binaries are missing or the server would not start."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 30.0, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), 0.2):
            return
        time.sleep(0.02)
    raise ServerUnavailable(f"nothing listens on port {port} after {timeout} s")


def postgres_bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return found[0] if found else shutil.which(name)


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


class PostgresServer:
    """One PostgreSQL cluster; ``new_database()`` gives each test a clean database.
    It listens on ``listen`` (loopback, and others a test's network namespaces reach);
    clients reach it at the first of them, ``host``."""

    def __init__(
        self,
        *,
        listen: tuple[str, ...] = ("127.0.0.1",),
        port: int | None = None,
        max_connections: int = 300,
    ) -> None:
        self.listen = listen
        self.max_connections = max_connections
        self.host = listen[0]
        pg_ctl = postgres_bin("pg_ctl")
        if not postgres_bin("initdb") or not pg_ctl:
            raise ServerUnavailable("PostgreSQL binaries (initdb, pg_ctl) not found")
        self.pg_ctl = pg_ctl
        self.as_root = os.geteuid() == 0
        self.root = Path(tempfile.mkdtemp(prefix="tenure-pg-"))
        self.data = self.root / "data"
        self.port = port or free_port()
        self.log = self.root / "server.log"
        if self.as_root:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
        self.create()
        self.start()
        self._count = 0

    def create(self) -> None:
        """Make the cluster's data directory (a standby copies its primary's instead)."""
        self._run([str(postgres_bin("initdb")), "-D", str(self.data), "-U", "postgres",
                   "--auth=trust", "--no-sync", "-E", "UTF8"])  # fmt: skip

    # Commands are run through this: a server on a host of its own starts in it.
    wrapper: tuple[str, ...] = ()

    def _run(self, command: list[str]) -> None:
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        command = [*self.wrapper, *command]
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        if done.returncode != 0:
            raise ServerUnavailable(f"{' '.join(command)} failed: {done.stderr or done.stdout}")

    def start(self) -> None:
        options = " ".join([
            f"-p {self.port} -k {self.root} -c listen_addresses={','.join(self.listen)}",
            f"-c fsync=off -c full_page_writes=off -c max_connections={self.max_connections}",
        ])  # fmt: skip
        self._run([self.pg_ctl, "-D", str(self.data), "-l", str(self.log), "-o", options,
                   "-w", "-t", "60", "start"])  # fmt: skip
        wait_port(self.port, host=self.host)

    def stop(self, mode: str = "fast") -> None:
        self._run([self.pg_ctl, "-D", str(self.data), "-m", mode, "-w", "stop"])

    def restart(self) -> None:
        self.stop()
        self.start()

    def kill9(self) -> None:
        """SIGKILL the postmaster and every backend at once, as a crash would
        (stopped first, so that it forks no backend the kill would miss)."""
        postmaster = self.pid
        os.kill(postmaster, signal.SIGSTOP)
        pids = [postmaster, *children(postmaster)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not all(process_gone(p) for p in pids):
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"PostgreSQL {postmaster} still runs 30 s after SIGKILL")
            time.sleep(0.01)
        # The dead postmaster may stay a zombie (nobody reaps it here), which the
        # next postmaster would take for a live one: its lock files go, as a reboot's would.
        (self.data / "postmaster.pid").unlink(missing_ok=True)
        (self.root / f".s.PGSQL.{self.port}.lock").unlink(missing_ok=True)

    @property
    def pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/{database}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        psql = postgres_bin("psql")
        assert psql
        done = subprocess.run([psql, "-h", self.host, "-p", str(self.port), "-U", "postgres",
                               "-d", database, "-At", "-c", sql],
                              capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
        return done.stdout.strip()

    def new_database(self) -> str:
        self._count += 1
        name = f"t{self._count}_{uuid.uuid4().hex[:6]}"
        self.psql(f"CREATE DATABASE {name}")
        return self.url(name)

    def close(self) -> None:
        with contextlib.suppress(ServerUnavailable):
            self.stop("immediate")
        # A session's cluster holds a database per test (hundreds, each a copy
        # of template1): deleting it took over two minutes on a loaded disk,
        # past the teardown's timeout. It goes in the background, orphaned.
        subprocess.run(["sh", "-c", 'rm -rf "$0" >/dev/null 2>&1 &', str(self.root)], check=True)


class PgBouncer:
    """PgBouncer in transaction mode in front of ``server``, every database of it
    reachable (``* =``), each with at most ``pool`` server connections. A
    server connection idle for a second is closed: each test's database has
    a pool of its own, which would otherwise hold its connections until the
    server refused more."""

    def __init__(self, server: PostgresServer, *, pool: int = 20) -> None:
        binary = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
        if not binary:
            raise ServerUnavailable("pgbouncer not found")
        self.server = server
        self.root = Path(tempfile.mkdtemp(prefix="tenure-pgbouncer-"))
        self.port = free_port()
        (self.root / "users.txt").write_text('"postgres" ""\n')
        (self.root / "pgbouncer.ini").write_text(f"""\
[databases]
* = host={server.host} port={server.port}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.root / "users.txt"}
pool_mode = transaction
default_pool_size = {pool}
max_client_conn = 2000
server_idle_timeout = 1
logfile = {self.root / "pgbouncer.log"}
""")
        user = "postgres" if os.geteuid() == 0 else None  # it refuses to run as root
        if user:
            shutil.chown(self.root, user)
        command = [binary, str(self.root / "pgbouncer.ini")]
        self.proc = subprocess.Popen(command, user=user, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            wait_port(self.port)
        except ServerUnavailable:
            self.close()
            raise

    def url(self, direct_url: str) -> str:
        """The URL of ``direct_url``'s database through this pooler, its liveness
        session to PostgreSQL itself."""
        database = direct_url.rsplit("/", 1)[1]
        return (f"postgresql://postgres@127.0.0.1:{self.port}/{database}"
                f"?liveness_url={quote(direct_url, safe='')}")  # fmt: skip

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        shutil.rmtree(self.root, ignore_errors=True)


class RedisServer:
    """One redis-server; tests flush it before use."""

    def __init__(
        self,
        *,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        listen: tuple[str, ...] = ("127.0.0.1",),
    ) -> None:
        self.listen = listen
        binary = shutil.which("redis-server")
        if not binary:
            raise ServerUnavailable("redis-server not found")
        self.binary = binary
        self.root = Path(tempfile.mkdtemp(prefix="tenure-redis-"))
        self.port = free_port()
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        # Bound beyond loopback on purpose: protected mode would refuse those clients.
        command = [self.binary, "--port", str(self.port), "--bind", *self.listen,
                   "--protected-mode", "no" if len(self.listen) > 1 else "yes",
                   "--dir", str(self.root), "--save", "",
                   "--appendonly", "yes" if self.appendonly else "no",
                   "--appendfsync", self.appendfsync, "--daemonize", "no",
                   "--logfile", str(self.root / "server.log")]  # fmt: skip
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(self.port)
        except ServerUnavailable:
            self.proc.kill()
            raise

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            self.proc.wait(30)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), 5) as s:
            s.sendall(b"*1\r\n$8\r\nFLUSHALL\r\n")
            if not s.recv(64).startswith(b"+OK"):
                raise ServerUnavailable("FLUSHALL failed")

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)
