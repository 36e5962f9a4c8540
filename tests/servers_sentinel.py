"""Redis behind Sentinel for the tests: a primary, one replica and three
sentinels (``redis-server --sentinel``) watching them as service ``mymaster``,
on random ports, in a temporary directory, started from the machine's binary
as ``tests/servers.py`` starts Redis, so that a test can kill the primary and
watch the sentinels promote the replica.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis as redis_sync

from tests.servers import ServerUnavailable, free_port, wait_port

SERVICE = "mymaster"


class SentinelGroup:
    """A primary, a replica and three sentinels (quorum 2). ``down_after``: the
    milliseconds a sentinel waits before it takes the primary for down."""

    def __init__(self, *, down_after: int = 1000) -> None:
        binary = shutil.which("redis-server")
        if not binary:
            raise ServerUnavailable("redis-server not found")
        self.binary = binary
        self.root = Path(tempfile.mkdtemp(prefix="tenure-sentinel-"))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}  # port -> its process
        self.commands: dict[int, list[str]] = {}  # port -> what started it
        try:
            self.primary = self._redis("primary")
            self.replica = self._redis("replica", "--replicaof", "127.0.0.1", str(self.primary))
            self._wait(lambda: self._linked(self.replica), "the replica to sync")
            self.sentinels = [self._sentinel(i, down_after) for i in range(3)]
            self._wait(self._watching, "the sentinels to see each other and the replica")
        except BaseException:
            self.close()
            raise

    def url(self, query: str = "") -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/0" + (f"?{query}" if query else "")

    def primary_now(self) -> int:
        """The port of the primary, as the first sentinel that answers names it."""
        for port in self.sentinels:
            try:
                with redis_sync.Redis(port=port, socket_timeout=1) as s:
                    _, primary = s.sentinel_get_master_addr_by_name(SERVICE)
                    return int(primary)
            except redis_sync.RedisError:
                continue
        raise ServerUnavailable("no sentinel answers")

    def kill(self, port: int) -> None:
        proc = self.procs[port]
        proc.kill()
        proc.wait(30)

    def restart(self, port: int) -> None:
        """Start a killed server again, empty (no persistence): the sentinels
        make it a replica of the primary they promoted."""
        self._start(port, self.commands[port])

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        shutil.rmtree(self.root, ignore_errors=True)

    def _start(self, port: int, command: list[str]) -> int:
        self.commands[port] = command
        self.procs[port] = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            wait_port(port)
        except ServerUnavailable:
            self.procs[port].kill()
            raise
        return port

    def _redis(self, name: str, *extra: str) -> int:
        port = free_port()
        folder = self.root / name
        folder.mkdir()
        return self._start(port, [
            self.binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
            "--save", "", "--appendonly", "no", "--daemonize", "no",
            "--logfile", str(folder / "server.log"), *extra,
        ])  # fmt: skip

    def _sentinel(self, n: int, down_after: int) -> int:
        port = free_port()
        conf = self.root / f"sentinel-{n}.conf"  # a sentinel rewrites its file: its own
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndaemonize no\ndir {self.root}\n"
            f"logfile {self.root / f'sentinel-{n}.log'}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {down_after}\n"
            f"sentinel failover-timeout {SERVICE} 10000\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        return self._start(port, [self.binary, str(conf), "--sentinel"])

    def _linked(self, port: int) -> bool:
        with redis_sync.Redis(port=port) as r:
            return bool(r.info("replication").get("master_link_status") == "up")

    def _watching(self) -> bool:
        for port in self.sentinels:
            with redis_sync.Redis(port=port) as s:
                state = s.sentinel_masters()[SERVICE]
                if int(state["num-slaves"]) < 1 or int(state["num-other-sentinels"]) < 2:
                    return False
        return True

    @staticmethod
    def _wait(predicate: object, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():  # type: ignore[operator]
                return
            time.sleep(0.05)
        raise ServerUnavailable(f"timed out after {timeout:.0f} s waiting for {what}")
