"""Dramatiq: ``dramatiq peers.dramatiq_peer --processes 1 --threads N`` (a
supervisor process forks the worker process). No bulk enqueue API."""

from __future__ import annotations

import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from harness.records import ENDED, record
from peers import QUEUE, URL, script

broker = RedisBroker(url=URL or "redis://127.0.0.1:6379/0")
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE)
def noop(i: int) -> None:
    record(i)


@dramatiq.actor(queue_name=QUEUE)
def sleep(i: int, seconds: float) -> None:
    record(i)
    time.sleep(seconds)
    record(i, ENDED)


class Client:
    BULK = None

    def enqueue(self, i: int) -> None:
        noop.send(i)

    def enqueue_sleep(self, i: int, seconds: float) -> None:
        sleep.send(i, seconds)

    def close(self) -> None:
        broker.close()


def worker_command(concurrency: int | None) -> list[str]:
    argv = [script("dramatiq"), "peers.dramatiq_peer", "--queues", QUEUE]
    if concurrency is not None:
        argv += ["--processes", "1", "--threads", str(concurrency)]
    return argv
