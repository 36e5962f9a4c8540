"""The Redis key layout of tenure: every key the backend and its scripts touch.

All keys start with a prefix (``tenure`` unless the URL says ``?prefix=``).
Every key of one queue carries the queue's name as a hash tag, ``{queue}``, so a
queue lives in one hash slot and every script touches one slot: the backend
works on Redis Cluster. The fleet-wide keys share the tag ``{@}``, which no
queue name can take ('@' is not allowed in names).

Per queue ``q``, under ``<prefix>:{q}:`` (the scripts build these names from
that prefix, passed as ``KEYS[1]``; ``_lib.lua`` mirrors this table)::

    job:<id>        HASH    the job's fields (see codec.py)
    history:<id>    LIST    its ended attempts, JSON, oldest first
    ready           ZSET    queued jobs: score -priority, member <run_at µs:16><seq:16><id>,
                            so ZRANGE 0 n-1 is the claim order (priority, run_at, seq)
    scheduled       ZSET    scheduled job ids by run_at
    leases          ZSET    active at-least-once job ids by lease expiry (Redis TIME)
    state:<state>   ZSET    job ids in that state by seq (listing, counts)
    all             ZSET    every job id by seq (listing)
    retained:completed  ZSET  completed and cancelled job ids by finished_at
    retained:dead   ZSET    dead job ids by finished_at (retention: prune.lua)
    retained:backfill  HASH  how far prune.lua indexed jobs finished before those
    seq             STRING  the last seq: max(now in µs, last + 1), insertion order
    keys            HASH    key= -> id of the unfinished job that holds it
    ukeys           HASH    key= -> id of the finished job enqueued with unique_for
                            that held it last (its window: enqueue.lua)
    held:<worker>   SET     ids of the active jobs a worker holds
    holders         SET     workers whose held set is not empty
    signal          LIST    wake-up tokens for idle workers (BLPOP)
    policy          STRING  the queue's QueuePolicy, JSON
    ticks           HASH    schedule name -> "<tick> <job id>": its last tick's job
    events          STREAM  lifecycle events {k kind, j job ids, d their data}: events.py

Concurrency keys (_keys.lua, which documents them), per queue ``q`` too::

    kq:<key>        ZSET    the queued jobs of a concurrency key, as in ready
    kact            HASH    concurrency key -> its active jobs
    kload           ZSET    concurrency key -> -(queued + active): the keys in use
    krate           HASH    concurrency key -> its rate bucket, "<tokens> <at>"
    kfull           ZSET    concurrency key with no job -> when its bucket is full
                            (prune.lua drops the bucket then)
    knone, kopen, khead, kwait, kturn   while the policy is keyed: the claim's
                            view of the keys that may start a job

Workflows (flows.py, _flow.lua, relay.py), per queue ``q`` too::

    in:<id>         HASH    a step's (or a workflow's, id wf-...) edges from the steps it
                            waits on: source id -> "<state> <version applied> <ord>"
    spawns:<id>     HASH    a step's spawns: seq -> JSON array of the job ids made
    outbox          LIST    messages (JSON) to other slots, written with the transition
                            that sent them, deleted once applied there (relay.py)
    wf:<wf id>      HASH    the record of a workflow homed here (the queue of its first
                            step): id, key, state (pending | running | completed |
                            failed | cancelled; dropped: abandoned while pending),
                            created_at, finished_at, many, pending, blocked, sinks
                            (JSON ids), starts (JSON [[prefix, [ids]]...]: its steps
                            without upstream, by queue)
    wfjobs:<wf id>  ZSET    its job ids, in the order written (spawned ones after)
    wfgone:<wf id>  SET     its job ids pruned: the record goes with the last
    wfkeys          HASH    key= -> id of the running (or pending) workflow that holds it
    wfpending       ZSET    workflows homed here still pending, by created_at: the
                            sweeper drops those older than a minute (a producer died)
    wfcount         HASH    state -> how many workflows homed here are in it (the
                            scripts that set a record's state keep it)
    wfended         HASH    outcome -> how many workflows homed here ended so, ever

A step's job hash also has wf, home (its workflow's home prefix), up (JSON
upstream ids), out (its edges to its dependents, JSON [[dependent id, its
prefix, ord, state (absent: open)]...]), may_fail, cancel_reason, pending,
blocked, wdelay and wat (its delay and run_at, applied at its release) and fv
(its flow version: +1 at each transition that moves its edges, so that
messages apply in order).

Fleet-wide, under ``<prefix>:{@}:``::

    queues          SET     names of queues that have jobs or a policy
    jobs            HASH    job id -> queue: verbs given only an id find the slot
    workflows       HASH    workflow id -> its home queue
    workers         SET     registered worker ids
    worker:<id>     HASH    info (JSON), started_at, last_seen (Redis TIME)
    sweep-guard     STRING  Redis TIME of the last sweep, for the sweeper's interval (guard.py)

A registered worker's liveness is a connection named ``<prefix>:worker:<id>``
(``CLIENT SETNAME``): not a key, it lives only as long as the connection.
"""

from __future__ import annotations

import re

from tenure.errors import InvalidInput

DEFAULT_PREFIX = "tenure"
PREFIX_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,50}")


GLOB_SPECIAL = re.compile(r"([\\*?\[\]])")


def glob_escaped(text: str) -> str:
    """``text`` as a ``MATCH`` pattern that matches only itself."""
    return GLOB_SPECIAL.sub(r"\\\1", text)


class Keys:
    """Key names for one prefix."""

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        if PREFIX_PATTERN.fullmatch(prefix) is None:
            raise InvalidInput(
                f"invalid Redis key prefix {prefix!r}: use 1 to 50 characters from "
                "letters, digits, '_', '.', ':' and '-'"
            )
        self.prefix = prefix
        fleet = f"{prefix}:{{@}}:"
        self.fleet = fleet  # KEYS[1] of the fleet-wide scripts
        self.queues = fleet + "queues"
        self.jobs = fleet + "jobs"
        self.workflows = fleet + "workflows"
        self.sweep_guard = fleet + "sweep-guard"

    def queue(self, queue: str) -> str:
        """The prefix of every key of ``queue`` (``KEYS[1]`` of the per-queue scripts)."""
        return f"{self.prefix}:{{{queue}}}:"

    def policy(self, queue: str) -> str:
        return self.queue(queue) + "policy"

    def signal(self, queue: str) -> str:
        return self.queue(queue) + "signal"

    def connection_name(self, worker_id: str) -> str:
        """The name of a registered worker's liveness connection."""
        return f"{self.prefix}:worker:{worker_id}"

    def worker_of(self, connection_name: str) -> str | None:
        """The worker id a liveness connection's name carries, if it is one of ours."""
        head = f"{self.prefix}:worker:"
        return connection_name[len(head) :] if connection_name.startswith(head) else None
