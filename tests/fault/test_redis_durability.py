"""Durability on Redis: with ``appendonly yes`` + ``appendfsync everysec``, a
SIGKILL of the server loses no job acknowledged more than one second before it.

A producer enqueues without pause while the server runs; the test kills the
server (SIGKILL), starts it again on the same directory and port, and reads
back every job the producer was told was stored.
"""

from __future__ import annotations

import threading
import time

from tenure.app import App
from tenure.errors import BackendUnavailable, JobNotFound
from tests.conformance.helpers import wait_for
from tests.servers import RedisServer


def test_a_killed_server__keeps_every_job_acknowledged_a_second_before(
    aof_redis: RedisServer,
) -> None:
    app = App(aof_redis.url)
    acked: list[tuple[float, list[str]]] = []  # (when the enqueue returned, its job ids)
    stop = threading.Event()

    def produce() -> None:
        n = 0
        while not stop.is_set():
            try:
                jobs = app.enqueue_many("t", [{"n": n + i} for i in range(20)])
            except BackendUnavailable:
                return  # the server is gone
            acked.append((time.time(), [j.id for j in jobs]))
            n += 20

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        wait_for(lambda: acked and time.time() - acked[0][0] > 1.5, timeout=10)
        killed_at = time.time()
        aof_redis.kill()  # SIGKILL: no shutdown, no final fsync
    finally:
        stop.set()
        producer.join(10)
    aof_redis.start()
    old = [ids for at, ids in acked if at < killed_at - 1.0]
    recent = [ids for at, ids in acked if at >= killed_at - 1.0]
    assert old, "the producer acknowledged nothing before the last second"

    def readable() -> bool:
        try:
            app.queue("default").counts()
        except BackendUnavailable:
            return False
        return True

    wait_for(readable, timeout=30)
    lost = []
    for ids in old:
        for job_id in ids:
            try:
                app.get_job(job_id)
            except JobNotFound:
                lost.append(job_id)
    app.close()
    assert lost == [], f"{len(lost)} of {sum(map(len, old))} jobs acknowledged > 1 s before lost"
    print(f"kept {sum(map(len, old))} older jobs; {sum(map(len, recent))} in the last second")
