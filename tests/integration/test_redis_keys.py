"""Concurrency keys on Redis (_keys.lua): what the claim keeps per key stays
true to the jobs through every transition, and a keyed claim reads the heads
of the keys that may start, never the jobs held back behind a key."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis as redis_sync

from tenure.config import QueuePolicy
from tenure.core.retry import Decision
from tenure.core.states import DeadReason, Outcome, State
from tests.conformance.helpers import register, spec, wait_for
from tests.servers import RedisServer

P = "tenure:{q}:"  # the queue's key prefix
KEYS = ("a", "b", "c", None)
POLICIES = (
    QueuePolicy(), QueuePolicy(max_active_per_key=1), QueuePolicy(fair=True),
    QueuePolicy(max_active_per_key=2, fair=True, max_active=4),
    QueuePolicy(rate_limit_per_key=3, rate_interval_per_key=0.05),
)  # fmt: skip


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    redis_server.flush()
    return redis_server.url


def members(r: redis_sync.Redis, key: str) -> set[str]:
    return {m.decode() for m in r.zrange(P + key, 0, -1)}


def check_sets(r: redis_sync.Redis, keyed: bool) -> None:
    """kq:<key>, kact, kload (and knone, kopen, khead while keyed) say what the
    jobs say."""
    ready = {}
    for m in members(r, "ready"):
        ck = r.hget(P + "job:" + m[32:], "ck")
        ready[m] = ck.decode() if ck else None
    active: Counter[str] = Counter()
    for job_id in members(r, "state:active"):
        ck = r.hget(P + "job:" + job_id, "ck")
        if ck:
            active[ck.decode()] += 1
    for key in KEYS[:-1]:
        assert members(r, "kq:" + key) == {m for m, k in ready.items() if k == key}
    assert {k.decode(): int(n) for k, n in r.hgetall(P + "kact").items() if int(n)} == active
    queued = Counter(k for k in ready.values() if k)
    load = {k.decode(): -int(s) for k, s in r.zrange(P + "kload", 0, -1, withscores=True)}
    assert load == {k: queued[k] + active[k] for k in queued | active}
    if not keyed:
        assert not r.exists(P + "knone", P + "kopen", P + "khead")
        return
    assert members(r, "knone") == {m for m, k in ready.items() if k is None}
    heads = {k.decode(): v.decode() for k, v in r.hgetall(P + "khead").items()}
    assert members(r, "kopen") == {h for h in heads.values() if h not in ("b", "w")}
    for key in KEYS:
        head = heads.get("k" + key if key else "n")
        if head not in ("b", "w"):  # open: its best queued job, if any
            line = sorted((r.zscore(P + "ready", m), m) for m, k in ready.items() if k == key)
            assert head == (line[0][1] if line else None), key


def test_the_per_key_sets__follow_the_jobs_through_every_transition(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    b, r, rnd = open_backend(redis_url), redis_sync.Redis.from_url(redis_url), random.Random(7)
    worker = register(b, "w", ("q",))
    held: list[Any] = []
    policy = POLICIES[0]
    for _ in range(250):
        op = rnd.random()
        if op < 0.3:
            key, delay = rnd.choice(KEYS), rnd.choice((0.0, 0.0, 0.01))
            b.enqueue([spec(queue="q", concurrency_key=key, priority=rnd.randint(0, 2),
                            delay=delay) for _ in range(rnd.randint(1, 4))])  # fmt: skip
        elif op < 0.55:
            taken = b.claim(worker, ["q"], rnd.randint(1, 5))
            held += taken
            if policy.max_active_per_key:  # the limit holds for the keys it took
                counted = Counter(j.concurrency_key for j in held if j.concurrency_key)
                assert all(counted[j.concurrency_key] <= policy.max_active_per_key
                           for j in taken if j.concurrency_key)  # fmt: skip
        elif op < 0.75 and held:
            job = held.pop(rnd.randrange(len(held)))
            b.complete(job.id, job.fence)
        elif op < 0.83 and held:
            job = held.pop(rnd.randrange(len(held)))
            state = rnd.choice((State.QUEUED, State.SCHEDULED, State.DEAD))
            reason = DeadReason.ERROR if state is State.DEAD else None
            b.fail(job.id, job.fence, Outcome.ERROR, "boom", Decision(state, 0.01, reason))
        elif op < 0.87 and held:
            job = held.pop(rnd.randrange(len(held)))
            b.release(job.id, job.fence)
        elif op < 0.93:
            queued = b.list(queue="q", state=State.QUEUED, limit=20).jobs
            if queued:
                b.cancel(rnd.choice(queued).id)
        else:
            policy = rnd.choice(POLICIES)
            b.set_policy("q", policy)
        check_sets(r, policy.keyed)


def test_a_keyed_claim__reads_the_heads_of_keys_not_the_jobs_held_back(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    b, r = open_backend(redis_url), redis_sync.Redis.from_url(redis_url)
    worker = register(b, "w", ("q",))
    b.set_policy("q", QueuePolicy(max_active_per_key=1))
    b.enqueue([spec(queue="q", concurrency_key="a", priority=9) for _ in range(3000)])
    [first] = b.claim(worker, ["q"], 1)  # a is at its limit, 2,999 of its jobs queued
    [other] = b.enqueue([spec(queue="q", concurrency_key="b")])
    r.config_resetstat()
    assert [j.id for j in b.claim(worker, ["q"], 10)] == [other.id]
    stats = r.info("commandstats")
    calls = sum(s["calls"] for name, s in stats.items() if name != "cmdstat_evalsha")
    assert calls < 60, stats  # a walk past a's jobs would be thousands
    assert first.concurrency_key == "a"


def test_a_full_rate_bucket_of_a_key_with_no_job__is_dropped_by_prune(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    b, r = open_backend(redis_url), redis_sync.Redis.from_url(redis_url)
    worker = register(b, "w", ("q",))
    b.set_policy("q", QueuePolicy(rate_limit_per_key=5, rate_interval_per_key=0.05))
    b.enqueue([spec(queue="q", concurrency_key="a")])
    [job] = b.claim(worker, ["q"], 1)
    b.complete(job.id, job.fence)
    assert r.hexists(P + "krate", "a")  # a token short for 10 ms more
    wait_for(lambda: b.prune(100) is not None and not r.hexists(P + "krate", "a"))
    assert r.zcard(P + "kfull") == 0


def test_jobs_of_several_keys__are_stored_by_one_script_call(
    redis_url: str, open_backend: Callable[[str], Any]
) -> None:
    b, r = open_backend(redis_url), redis_sync.Redis.from_url(redis_url)
    b.set_policy("q", QueuePolicy(fair=True))
    keys = ["a", "b", None, "a", "c", None]
    r.config_resetstat()
    jobs = b.enqueue([spec(queue="q", concurrency_key=k) for k in keys])
    assert r.info("commandstats")["cmdstat_evalsha"]["calls"] == 1
    assert [j.concurrency_key for j in jobs] == keys
    assert [b.get(j.id).concurrency_key for j in jobs] == keys
    check_sets(r, keyed=True)
