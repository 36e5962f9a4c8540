"""The conformance suite and the failure model on a real Redis Cluster.

Three redis-server processes in cluster mode (random ports, no replicas) and
the same tests, unchanged, imported here: this module's ``backend_url`` names
the cluster (``?cluster=yes``), flushed before each test. The model-based test
is left out: its per-example flush speaks to one node only.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from tenure.backends.redis.transport import RedisPyTransport
from tests.conformance.conftest import open_killable, worker  # noqa: F401 - fixtures
from tests.conformance.test_claim import *  # noqa: F403
from tests.conformance.test_claim_skip import *  # noqa: F403
from tests.conformance.test_dlq import *  # noqa: F403
from tests.conformance.test_enqueue import *  # noqa: F403
from tests.conformance.test_lag import *  # noqa: F403
from tests.conformance.test_operators import *  # noqa: F403
from tests.conformance.test_races import *  # noqa: F403
from tests.conformance.test_rescue import *  # noqa: F403
from tests.conformance.test_retention import *  # noqa: F403
from tests.conformance.test_settle import *  # noqa: F403
from tests.conformance.test_state_machine import *  # noqa: F403
from tests.conformance.test_ticks import *  # noqa: F403
from tests.conformance.test_workflows import *  # noqa: F403
from tests.conftest import SyncBackend, server_or_skip
from tests.fault.test_failure_model import *  # noqa: F403
from tests.servers import ServerUnavailable, free_port, wait_port

NODES = 3


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is valid and free too."""
    while True:
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


class RedisCluster:
    """Three cluster-mode redis-servers holding every slot between them."""

    def __init__(self) -> None:
        server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if not server or not cli:
            raise ServerUnavailable("redis-server or redis-cli not found")
        self.root = Path(tempfile.mkdtemp(prefix="tenure-redis-cluster-"))
        self.ports = [cluster_port() for _ in range(NODES)]
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            self._start(server, cli)
        except BaseException:
            self.close()
            raise

    def _start(self, server: str, cli: str) -> None:
        for port in self.ports:
            node = self.root / str(port)
            node.mkdir()
            self.procs.append(subprocess.Popen(
                [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(node),
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--save", "", "--appendonly", "no", "--logfile", str(node / "log")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))  # fmt: skip
        for port in self.ports:
            wait_port(port)
        created = subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if created.returncode != 0:
            raise ServerUnavailable(f"redis-cli --cluster create failed: {created.stdout}")
        deadline = time.monotonic() + 30
        while not all(self._ok(p) for p in self.ports):
            if time.monotonic() > deadline:
                raise ServerUnavailable("the cluster did not come up")
            time.sleep(0.05)

    @staticmethod
    def _ok(port: int) -> bool:
        with redis_sync.Redis(port=port) as node:
            return b"cluster_state:ok" in node.execute_command("CLUSTER", "INFO")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0?cluster=yes"

    def flush(self) -> None:
        for port in self.ports:
            with redis_sync.Redis(port=port) as node:
                node.flushall()

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(30)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisCluster]:
    cluster = server_or_skip("redis", RedisCluster)
    yield cluster
    cluster.close()


@pytest.fixture(params=["redis-cluster"])
def backend_url(redis_cluster: RedisCluster) -> str:
    """Overrides the session's: every imported test runs on the cluster."""
    redis_cluster.flush()
    return redis_cluster.url


def test_the_queues_of_these_tests__live_on_several_nodes(redis_cluster: RedisCluster) -> None:
    """Not a cluster in name only: queues hash to different nodes."""
    from redis.crc import key_slot

    with redis_sync.Redis(port=redis_cluster.ports[0]) as node:
        slots = node.execute_command("CLUSTER", "SLOTS")
    owners = {(s[0], s[1]): s[2][1] for s in slots}

    def owner(queue: str) -> int:
        slot = key_slot(f"tenure:{{{queue}}}:ready".encode())
        return next(port for (lo, hi), port in owners.items() if lo <= slot <= hi)

    assert len({owner(q) for q in ("default", "a", "b", "c", "other", "amo")}) > 1


def test_on_a_cluster__there_is_no_lane_every_call_is_routed_by_redis_py(
    backend: SyncBackend,
) -> None:
    """A lane is one connection to one node; a queue's calls go to its slot's node."""
    assert isinstance(backend.inner.runner.topology.hot, RedisPyTransport)
