"""Redis behind Sentinel (``tests/servers_sentinel.py``): kill -9 the primary
while a producer enqueues and two `tenure worker` processes drain; the
sentinels promote the replica, and the workers resume on it.

What asynchronous replication loses when the primary dies is measured, not
assumed: acknowledged enqueues missing on the promoted replica, and jobs that
ran more than once (an attempt in flight at the kill, or a completion the
replica never had). With ``?wait_replicas=1`` an acknowledged enqueue is on
the replica. The figures are in docs/guarantees.md; the long runs are in
``make soak`` (``TENURE_SENTINEL_ROUNDS``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tenure import App, State
from tenure.chaos.lab import Lab
from tenure.core.states import TERMINAL
from tenure.errors import BackendUnavailable, JobNotFound
from tests.conftest import server_or_skip
from tests.fault.wakeups import WAKE_WITHIN, woken_after, woken_line
from tests.servers_sentinel import SentinelGroup

RESUME_WITHIN = 10.0  # seconds from the kill until a job completes on the promoted replica
ROUNDS = int(os.environ.get("TENURE_SENTINEL_ROUNDS", "5"))


@pytest.fixture
def group() -> Iterator[SentinelGroup]:
    group = server_or_skip("redis", SentinelGroup)
    yield group
    group.close()


@dataclass
class Failover:
    """What one failover did."""

    resumed_after: float  # seconds from the kill until a job enqueued after it completed
    acknowledged: int  # enqueues the producer saw succeed
    lost: int  # of those, missing on the promoted replica
    ran_again: int  # jobs with more than one attempt

    def line(self) -> str:
        return (f"resumed after {self.resumed_after:.1f} s; {self.lost} of {self.acknowledged} "
                f"acknowledged enqueues lost; {self.ran_again} jobs ran again")  # fmt: skip


def _plus_one(n: int | None) -> int | None:
    return None if n is None else n + 1


def completed(lab: Lab) -> int | None:
    """How many of the lab's jobs completed; None while Redis does not answer."""
    try:
        return lab.app.queue(lab.queue).counts()[State.COMPLETED]
    except BackendUnavailable:
        return None


def fail_over(group: SentinelGroup, query: str = "") -> Failover:
    """Two workers drain what a producer enqueues; the primary is killed; once
    the workers run jobs again, every acknowledged job is looked for."""
    with Lab(group.url(query), "sentinel", lease_ttl=2.0, heartbeat_interval=0.25) as lab:
        lab.worker("--concurrency", "2")
        lab.worker("--concurrency", "2")
        acknowledged: list[str] = []
        stop = threading.Event()

        def produce() -> None:
            with App(lab.url) as app:
                while not stop.is_set():
                    try:
                        job = app.enqueue("chaos.sleep", {"seconds": 0}, queue=lab.queue)
                    except BackendUnavailable:
                        time.sleep(0.02)
                        continue
                    acknowledged.append(job.id)
                    time.sleep(0.005)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        try:
            lab.wait("jobs to run", lambda: len(acknowledged) > 100 and (completed(lab) or 0) > 50)
            killed = time.monotonic()
            group.kill(group.primary)
            # the first count the promoted replica gives, then one more job done there
            before = lab.wait("the replica to answer", lambda: _plus_one(completed(lab)))
            lab.wait("a job to complete on the promoted replica",
                     lambda: (completed(lab) or 0) >= before, timeout=60)  # fmt: skip
            resumed = time.monotonic() - killed
            group.restart(group.primary)  # back as a replica: wait_replicas has one again
            time.sleep(0.5)  # the producer goes on on the new primary a little
        finally:
            stop.set()
            producer.join(30)
        assert group.primary_now() == group.replica
        found = []
        for job_id in acknowledged:
            try:
                found.append(lab.job(job_id))
            except JobNotFound:
                continue
        for job in found:
            lab.wait(f"job {job.id} to finish", lambda j=job: lab.job(j.id).state in TERMINAL)
        ran_again = sum(1 for job in found if lab.job(job.id).attempts > 1)
        return Failover(resumed, len(acknowledged), len(acknowledged) - len(found), ran_again)


def test_a_killed_primary__workers_resume_on_the_promoted_replica(
    group: SentinelGroup, capsys: pytest.CaptureFixture[str]
) -> None:
    result = fail_over(group)
    with capsys.disabled():
        print(f"\nsentinel failover (async replication): {result.line()}")
    assert result.resumed_after < RESUME_WITHIN, result


@pytest.mark.soak
@pytest.mark.timeout(ROUNDS * 120)
@pytest.mark.parametrize("query", ["", "wait_replicas=1"], ids=["async", "wait_replicas"])
def test_failovers__what_each_loses(query: str, capsys: pytest.CaptureFixture[str]) -> None:
    results = []
    for _ in range(ROUNDS):
        group = server_or_skip("redis", SentinelGroup)
        try:
            results.append(fail_over(group, query))
        finally:
            group.close()
    with capsys.disabled():
        print(f"\nsentinel failovers, {query or 'async replication'}:")
        for r in results:
            print("  " + r.line())
    assert all(r.resumed_after < RESUME_WITHIN for r in results), results
    if query:
        assert sum(r.lost for r in results) == 0, results


def test_an_idle_worker__wakes_on_the_promoted_replica_when_a_job_comes(
    group: SentinelGroup, capsys: pytest.CaptureFixture[str]
) -> None:
    with Lab(group.url(), "sentinel-idle", lease_ttl=2.0, heartbeat_interval=0.25) as lab:
        woken = woken_after(lab, lambda: group.kill(group.primary))
    with capsys.disabled():
        print(woken_line("sentinel failover", woken))
    assert woken < WAKE_WITHIN
