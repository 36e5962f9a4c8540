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

import orjson
import pytest
import redis as redis_sync

from tenure.backends.redis.flows import Staged
from tenure.backends.redis.transport import RedisPyTransport
from tenure.config import QueuePolicy
from tenure.core.states import State
from tenure.core.workflows import CancelReason, WorkflowState, chain, compile_flow, group
from tenure.errors import JobNotFound
from tenure.portal import Portal
from tests.conformance.conftest import open_killable, worker  # noqa: F401 - fixtures
from tests.conformance.helpers import nonzero_counts, register
from tests.conformance.test_claim import *  # noqa: F403
from tests.conformance.test_claim_skip import *  # noqa: F403
from tests.conformance.test_dlq import *  # noqa: F403
from tests.conformance.test_enqueue import *  # noqa: F403
from tests.conformance.test_keys import *  # noqa: F403
from tests.conformance.test_lag import *  # noqa: F403
from tests.conformance.test_operators import *  # noqa: F403
from tests.conformance.test_races import *  # noqa: F403
from tests.conformance.test_rescue import *  # noqa: F403
from tests.conformance.test_retention import *  # noqa: F403
from tests.conformance.test_settle import *  # noqa: F403
from tests.conformance.test_state_machine import *  # noqa: F403
from tests.conformance.test_ticks import *  # noqa: F403
from tests.conformance.test_workflows import *  # noqa: F403
from tests.conformance.test_workflows import finish, kill, kinds, run, state, step, take
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
    assert isinstance(backend.inner.runner.topology.transport, RedisPyTransport)


# -- workflows across hash slots (relay.py) ---------------------------------------


@pytest.fixture
def mover(backend: SyncBackend) -> str:
    """A worker of the queues these tests use, each on a node of its own."""
    return register(backend, "worker-1", ("default", "other", "b"))


def test_a_chain_and_a_fan_in_across_nodes__release_each_step_in_its_slot(
    backend: SyncBackend, mover: str
) -> None:
    flow = chain(step("a", "other"), step("b"), group(step("c", "other"), step("d")), step("e"))
    wf, jobs = run(backend, flow)
    finish(backend, mover, "a", ("other",))
    b = take(backend, mover, "b")
    assert (b.workflow, b.upstream) == (wf.id, (jobs["a"].id,))
    backend.complete(b.id, b.fence, "b")
    finish(backend, mover, "c", ("other",))
    assert state(backend, jobs["e"]) == State.WAITING
    finish(backend, mover, "d")
    assert "ready" in kinds(backend, jobs["e"])
    finish(backend, mover, "e")
    assert backend.get_workflow(wf.id).state == WorkflowState.COMPLETED


def test_a_dead_step__cascades_across_nodes_and_a_retry_resumes_it(
    backend: SyncBackend, mover: str
) -> None:
    wf, jobs = run(backend, chain(step("a"), step("b", "other"), step("c"), step("d", "other")))
    a = kill(backend, mover, "a")
    for name in "bcd":
        job = backend.get(jobs[name].id)
        assert (job.state, job.cancel_reason) == (State.CANCELLED, CancelReason.UPSTREAM_FAILED)
    assert backend.get_workflow(wf.id).state == WorkflowState.FAILED
    assert backend.retry_dead("default", [a.id]) == 1
    assert {state(backend, jobs[n]) for n in "bcd"} == {State.WAITING}
    assert backend.get_workflow(wf.id).state == WorkflowState.RUNNING
    for name, queue in zip("abcd", ("default", "other") * 2, strict=True):
        finish(backend, mover, name, (queue,))
    assert backend.get_workflow(wf.id).state == WorkflowState.COMPLETED


def test_a_relay_that_died__is_finished_by_the_next_sweep_and_a_second_changes_nothing(
    backend: SyncBackend, portal: Portal, mover: str
) -> None:
    wf, jobs = run(backend, chain(step("a"), step("b", "other")))
    a = take(backend, mover, "a")
    runner, keys = backend.inner.runner, backend.inner.keys
    home = keys.queue("default")
    # complete() runs this script, then relays its outbox: here the relay never runs
    codes, relays, _ = portal.run(runner.call("complete", [home], [a.id, a.fence, b'"a"']))
    assert (codes, relays) == ([0], [home.encode()])
    assert state(backend, jobs["b"]) == State.WAITING
    [message] = portal.run(runner.command("LRANGE", home + "outbox", 0, -1))
    assert backend.rescue().swept
    assert state(backend, jobs["b"]) == State.QUEUED
    assert portal.run(runner.command("LLEN", home + "outbox")) == 0
    portal.run(runner.call("apply", [keys.queue("other")], [message]))  # a late second relay
    assert kinds(backend, jobs["b"]).count("ready") == 1
    assert backend.counts("other")[State.QUEUED] == 1
    finish(backend, mover, "b", ("other",))
    assert backend.get_workflow(wf.id).state == WorkflowState.COMPLETED


def test_a_workflow_its_producer_left_pending__is_absent_then_dropped_by_a_sweep(
    backend: SyncBackend, portal: Portal
) -> None:
    inner = backend.inner
    spec = compile_flow(chain(step("a"), step("b", "other")))
    staged = Staged.of(spec, inner.keys)
    holder, _ = portal.run(inner.parts.flows.write(staged))
    assert holder is None  # then it died: no commit
    with pytest.raises(JobNotFound):
        backend.get_workflow(spec.id)
    assert {backend.get(s.spec.id).state for s in spec.steps} == {State.WAITING}
    backend.rescue()  # too young to be abandoned
    assert len(backend.get_many([s.spec.id for s in spec.steps])) == 2
    pending = inner.keys.queue("default") + "wfpending"
    portal.run(inner.runner.command("ZADD", pending, "XX", 0, spec.id))  # a day ago or so
    assert backend.rescue().swept
    assert backend.get_many([s.spec.id for s in spec.steps]) == []
    assert nonzero_counts(backend) == {} and nonzero_counts(backend, "other") == {}
    with pytest.raises(JobNotFound):
        backend.get_workflow(spec.id)


def test_cancelling_a_workflow_across_nodes__cancels_every_step(
    backend: SyncBackend, mover: str
) -> None:
    wf, _ = run(backend, chain(group(step("a"), step("b", "other")), step("c", "other")))
    cancelled = backend.cancel_workflow(wf.id)
    assert cancelled.state == WorkflowState.CANCELLED
    assert {j.state for j in cancelled.jobs} == {State.CANCELLED}
    assert backend.claim(mover, ["default", "other"], 10) == []


def test_a_spawn_across_nodes__its_steps_wait_on_each_other_and_the_dependents_on_its_sinks(
    backend: SyncBackend, mover: str
) -> None:
    wf, jobs = run(backend, chain(step("a"), step("b", "other")))
    a = take(backend, mover, "a")
    [x] = backend.spawn(a.id, a.fence, 1, compile_flow(chain(step("x", "b"), step("y"))))
    assert (x.task, x.state) == ("x", State.QUEUED)
    backend.complete(a.id, a.fence, "a")
    assert state(backend, jobs["b"]) == State.WAITING
    finish(backend, mover, "x", ("b",))
    y = take(backend, mover, "y")
    assert y.upstream == (x.id,)
    backend.complete(y.id, y.fence, "y")
    assert backend.get(jobs["b"].id).upstream == (a.id, y.id)
    finish(backend, mover, "b", ("other",))
    done = backend.get_workflow(wf.id)
    assert done.state == WorkflowState.COMPLETED and len(done.jobs) == 4


def test_a_spawned_step_that_ends_before_its_dependent_is_written__counts_once_it_is(
    backend: SyncBackend, portal: Portal, mover: str
) -> None:
    _, jobs = run(backend, chain(step("a"), step("z")))
    a = take(backend, mover, "a")
    runner, keys, flows = backend.inner.runner, backend.inner.keys, backend.inner.parts.flows
    spawned = compile_flow(chain(step("x", "other"), step("y", "b")))
    y_id = spawned.steps[1].spec.id
    # spawn.lua, then of its messages only the one that writes x is relayed
    call, _ = portal.run(flows.prepare_spawn(a.id, a.fence, 1, spawned))
    [(code, *_), relays, _] = portal.run(runner.pipeline([call]))[0]
    assert code == 0 and relays == [keys.queue("default").encode()]
    outbox = portal.run(runner.command("LRANGE", keys.queue("default") + "outbox", 0, -1))
    [writes_x] = [m for m in outbox if orjson.loads(m)["p"] == keys.queue("other")]
    portal.run(runner.call("apply", [keys.queue("other")], [writes_x]))
    finish(backend, mover, "x", ("other",))  # its edge to y, not written yet, waits for it
    with pytest.raises(JobNotFound):
        backend.get(y_id)
    assert backend.rescue().swept  # relays the rest: y is written, its edge counted done
    assert state(backend, backend.get(y_id)) == State.QUEUED
    backend.complete(a.id, a.fence, "a")
    assert state(backend, jobs["z"]) == State.WAITING
    finish(backend, mover, "y", ("b",))
    assert backend.get(jobs["z"].id).upstream == (a.id, y_id)
    assert state(backend, jobs["z"]) == State.QUEUED


def test_a_failed_workflow_whose_steps_are_purged_and_pruned__leaves_nothing(
    backend: SyncBackend, portal: Portal, mover: str
) -> None:
    from tests.conformance.aging import age

    backend.set_policy("other", QueuePolicy(keep_completed=60.0))
    wf, jobs = run(backend, chain(step("a"), step("b", "other")))
    kill(backend, mover, "a")
    assert backend.purge_dead("default") == 1
    assert backend.get_workflow(wf.id).state == WorkflowState.FAILED  # b is still there
    age(backend, [jobs["b"].id], 120.0)
    assert backend.prune(100) == 1
    with pytest.raises(JobNotFound):
        backend.get_workflow(wf.id)
    runner, keys = backend.inner.runner, backend.inner.keys
    assert portal.run(runner.command("HEXISTS", keys.workflows, wf.id)) == 0


def test_a_cancelled_workflows_steps__stay_cancelled_when_a_dead_one_is_retried(
    backend: SyncBackend, mover: str
) -> None:
    wf, jobs = run(backend, chain(step("x"), step("y", "other")))
    dead = kill(backend, mover, "x")
    assert backend.get(jobs["y"].id).cancel_reason == CancelReason.UPSTREAM_FAILED
    backend.cancel_workflow(wf.id)  # failed already: cancelled now; so is y, by hand
    assert backend.get(jobs["y"].id).cancel_reason is None
    backend.retry_dead("default", [dead.id])
    assert state(backend, jobs["y"]) == State.CANCELLED
    assert backend.get_workflow(wf.id).state == WorkflowState.CANCELLED
