"""Workflows on Redis: storing them, spawning, reading and cancelling them.

Each step is a job of its own queue (its hash slot); the workflow's record
lives in its home queue, the queue of its first step, and the fleet's map
``workflows`` (keys.py) finds it. Edges and the messages that move them across
slots: ``_flow.lua`` and ``relay.py``.

Storing is all or nothing. A workflow whose steps are all in its home queue,
and at most FLOW_CHUNK, is one script (``flow_enqueue.lua``). Otherwise: the
home queue's script writes the record ``pending`` (and checks its key) with
its first steps, one script per other queue and piece of FLOW_CHUNK steps
writes the others (all waiting), then ``flow_commit.lua`` makes it
``running`` and releases the steps without upstream, by messages (one per
queue and 500 of them) relayed a batch at a time. A producer that dies
midway leaves a pending workflow, which readers take for absent and the
sweeper deletes after ``rescue.PENDING_MAX`` seconds (:meth:`Flows.drop`). A
workflow's ``key`` is held in its home queue, as a job's is in its queue.
Every call stores with the home queue's call's clock, and the sources are
released as of it: the answer is what a read would find (``stored_workflow``),
without reading it.

A spawn writes the steps of the spawner's queue in its script and sends those
of other queues a message each (``spawn.lua``).
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from tenure.backends.redis import codec
from tenure.backends.redis.index import Index
from tenure.backends.redis.keys import Keys
from tenure.backends.redis.relay import Relay
from tenure.backends.redis.scripts import INVALID_TRANSITION, Call, Runner, check
from tenure.core.workflows import StepSpec, Workflow, WorkflowSpec, WorkflowState, edge_ord
from tenure.errors import BackendUnavailable, InvalidInput, JobNotFound
from tenure.job import Job, stored_steps, stored_workflow

FLOW_CHUNK = 500  # steps per flow_enqueue.lua call: bounds how long one call holds Redis
KEY_WAITS = (0.01, 0.02, 0.05, *(0.1,) * 30)  # polls of a key's holder while it is stored
ABSENT = {"pending", "dropped"}  # a record's states that readers take for no workflow


class Flows:
    """The workflow verbs of the Redis backend, given specs already checked."""

    def __init__(self, runner: Runner, keys: Keys, index: Index, relay: Relay) -> None:
        self.runner = runner
        self.keys = keys
        self.index = index
        self.relay = relay

    async def enqueue_workflow(self, spec: WorkflowSpec) -> Workflow:
        staged = Staged.of(spec, self.keys)
        for wait in KEY_WAITS:
            holder, at = await self.write_home(staged)
            if holder is None:
                break
            try:
                return await self.get_workflow(holder)
            except JobNotFound:  # held by one still pending: wait until it is stored
                await asyncio.sleep(wait)
        else:
            raise BackendUnavailable(f"the workflow holding key {spec.key!r} stays pending")
        # The answer is made while Redis stores the rest: a slice at a time,
        # so that each call goes out as soon as the one before has answered.
        answer = asyncio.ensure_future(_answer(spec, float(at)))
        try:
            await self.write_rest(staged, at)
            if not staged.commit:
                await self.commit(staged)
        except BaseException:
            answer.cancel()
            raise
        self.index.remember({s.spec.id: s.spec.queue for s in spec.steps})
        return await answer

    async def write(self, staged: Staged) -> tuple[str | None, float]:
        """Store the record and the steps of its home queue, and, when that
        commits it, those of the other queues; (None, Redis's clock at the
        home queue's call, the steps' created_at), or (the id of the
        workflow that holds its key, 0.0): then nothing is stored."""
        holder, at = await self.write_home(staged)
        if holder is not None:
            return holder, 0.0
        await self.write_rest(staged, at)
        return None, float(at)

    async def write_home(self, staged: Staged) -> tuple[str | None, str]:
        """The fleet's indexes, then the record and the first steps of its
        home queue: (None, Redis's clock then, as text), or (the id of the
        workflow that holds its key, ''): then nothing is stored."""
        spec, home, prefix = staged.spec, staged.home, self.keys.queue
        await self.refuse_taken(spec)
        await self.runner.pipeline([  # the indexes first: a reader finds the steps
            Call.command("SADD", self.keys.queues, *staged.by_queue),
            Call.command("HSET", self.keys.jobs, *[x for s in spec.steps
                                                   for x in (s.spec.id, s.spec.queue)]),
            Call.command("HSET", self.keys.workflows, spec.id, home),
        ])  # fmt: skip
        first = staged.parts()[0][1]
        reply = await self.relay.after(await self.runner.call(
            "flow_enqueue", [prefix(home)], [home, staged.payload(first, record=True)]
        ))  # fmt: skip
        if reply[1]:  # its key is held: nothing stored
            await self.runner.pipeline([
                Call.command("HDEL", self.keys.jobs, *[s.spec.id for s in spec.steps]),
                Call.command("HDEL", self.keys.workflows, spec.id),
            ])  # fmt: skip
            return str(reply[1].decode()), ""
        return None, str(reply[2].decode())

    async def write_rest(self, staged: Staged, at: str) -> None:
        """The steps of the other calls, stored at the home queue's clock ``at``."""
        for q, steps in staged.parts()[1:]:  # one call a round trip: each holds Redis a moment
            await self.runner.call(
                "flow_enqueue", [self.keys.queue(q)], [q, staged.payload(steps, at=at)]
            )

    async def refuse_taken(self, spec: WorkflowSpec) -> None:
        """InvalidInput if the workflow's id, or a step's, is one stored already
        (a spec made by hand: compile_flow's ids are new), before any write."""
        ids = [s.spec.id for s in spec.steps]
        jobs, workflow = await self.runner.pipeline([
            Call.command("HMGET", self.keys.jobs, *ids),
            Call.command("HEXISTS", self.keys.workflows, spec.id),
        ])  # fmt: skip
        taken = [i for i, queue in zip(ids, jobs, strict=True) if queue is not None]
        if taken or workflow:
            raise InvalidInput(
                f"workflow {spec.id}: {'its id' if workflow else 'a step id'} is taken "
                f"by one stored already{f' ({taken[0]})' if taken else ''}"
            )

    async def commit(self, staged: Staged) -> None:
        """A workflow stored in several queues runs (flow_commit.lua)."""
        workflow_id = staged.spec.id
        reply = await self.runner.call("flow_commit", [self.keys.queue(staged.home)], [workflow_id])
        if not await self.relay.after(reply):
            raise BackendUnavailable(f"workflow {workflow_id} was abandoned while it was stored")

    async def spawn(self, job_id: str, fence: int, seq: int, spec: WorkflowSpec) -> list[Job]:
        call, sources = await self.prepare_spawn(job_id, fence, seq, spec)
        code, *made = await self.relay.after((await self.runner.pipeline([call]))[0])
        if code != 0 or [i.decode() for i in made] != sources:
            # made before (its seq), or refused: these ids made no job
            await self.runner.command("HDEL", self.keys.jobs, *[s.spec.id for s in spec.steps])
        if code == INVALID_TRANSITION:
            raise InvalidInput(f"job {job_id} is no workflow's step: it cannot spawn")
        check(code, job_id, fence)
        return await self.get_many([i.decode() for i in made])  # those that run at once

    async def prepare_spawn(
        self, job_id: str, fence: int, seq: int, spec: WorkflowSpec
    ) -> tuple[Call, list[str]]:
        """spawn.lua's call, once the fleet's indexes know the new steps; the
        ids of those without upstream."""
        queue = await self.index.queue_of(job_id)
        prefix = self.keys.queue
        parts: dict[str, list[Encoded]] = {}
        for step, encoded in zip(spec.steps, _encoded(spec, prefix, "", sinks=False), strict=True):
            parts.setdefault(step.spec.queue, []).append(encoded)
        sources = [s.spec.id for s in spec.steps if not s.upstream]
        await self.runner.pipeline([
            Call.command("SADD", self.keys.queues, *parts),
            Call.command("HSET", self.keys.jobs, *[x for s in spec.steps
                                                   for x in (s.spec.id, s.spec.queue)]),
        ])  # fmt: skip
        payload = orjson.dumps({
            "parts": [{"queue": q, "prefix": prefix(q), **_part(p)} for q, p in parts.items()],
            "sinks": [spec.steps[k].spec.id for k in spec.sinks], "sources": sources,
        })  # fmt: skip
        return Call.script("spawn", [prefix(queue)], [job_id, fence, seq, payload]), sources

    async def get_workflow(self, workflow_id: str) -> Workflow:
        _, flat, ids = await self._record(workflow_id)
        f = codec.fields(flat)
        if not f or f["state"].decode() in ABSENT:
            raise JobNotFound(f"no workflow with id {workflow_id!r}")
        finished = f.get("finished_at")
        return Workflow(
            id=workflow_id,
            state=WorkflowState(f["state"].decode()),
            created_at=float(f["created_at"]),
            finished_at=None if finished is None else float(finished),
            key=None if (key := f.get("key")) is None else key.decode(),
            many=f["many"] == b"1",
            sinks=tuple(orjson.loads(f["sinks"])),
            jobs=tuple(await self.get_many([i.decode() for i in ids])),
        )

    async def cancel_workflow(self, workflow_id: str) -> Workflow:
        home = await self._home(workflow_id)
        state, ids = await self.runner.call("flow_cancel", [self.keys.queue(home)], [workflow_id])
        if not state:
            raise JobNotFound(f"no workflow with id {workflow_id!r}")
        queue_of = await self.index.queues_of([i.decode() for i in ids])
        replies = await self.runner.pipeline(
            [Call.script("cancel", [self.keys.queue(q)], [i, "1"]) for i, q in queue_of.items()]
        )
        await self.relay.relay([p for _, relays, _ in replies for p in relays])
        return await self.get_workflow(workflow_id)

    async def get_many(self, job_ids: Sequence[str]) -> builtins.list[Job]:
        queue_of = await self.index.queues_of(job_ids)
        found = [i for i in job_ids if i in queue_of]
        read = codec.READ_FIELDS
        replies = await self.runner.pipeline(
            [Call.command("HMGET", self.keys.queue(queue_of[i]) + "job:" + i, *read)
             for i in found],
            repeatable=True,
        )  # fmt: skip
        return self.index.known([codec.job_of_fields(r) for r in replies if r[0] is not None])

    async def drop(self, home: str, workflow_id: str) -> None:
        """Delete a workflow abandoned while pending, with its steps (flow_drop.lua)."""
        _, _, ids = await self._record(workflow_id, home)
        queue_of = await self.index.queues_of([i.decode() for i in ids])
        others: dict[str, list[str]] = {}
        for job_id, queue in queue_of.items():
            others.setdefault(queue, []).append(job_id)
        mine = others.pop(home, [])
        prefix = self.keys.queue
        # First the record (dropped: a late commit is refused), and only then the rest.
        marked, *gone = await self.runner.call(
            "flow_drop", [prefix(home)], [workflow_id, "1", *mine]
        )
        if not marked:  # committed meanwhile: not abandoned after all
            return
        calls = [Call.script("flow_drop", [prefix(q)], [workflow_id, "0", *batch])
                 for q, batch in others.items()]  # fmt: skip
        calls.append(Call.script("flow_drop", [prefix(home)], [workflow_id, "2"]))
        gone += [i for _, *ids in await self.runner.pipeline(calls) for i in ids]
        await self.runner.pipeline([
            *([Call.command("HDEL", self.keys.jobs, *gone)] if gone else []),
            Call.command("HDEL", self.keys.workflows, workflow_id),
        ])  # fmt: skip
        self.index.forget(gone)

    async def _home(self, workflow_id: str) -> str:
        home = await self.runner.command("HGET", self.keys.workflows, workflow_id, repeatable=True)
        if home is None:
            raise JobNotFound(f"no workflow with id {workflow_id!r}")
        return str(home.decode())

    async def _record(self, workflow_id: str, home: str | None = None) -> tuple[str, Any, Any]:
        home = home or await self._home(workflow_id)
        flat, ids = await self.runner.call(
            "flow_get", [self.keys.queue(home)], [workflow_id], repeatable=True
        )
        return home, flat, ids


@dataclass(frozen=True)
class Staged:
    """A workflow's steps by queue, as flow_enqueue.lua reads them."""

    spec: WorkflowSpec
    home: str  # the queue of its first step: its record's
    home_prefix: str
    by_queue: dict[str, list[Encoded]]
    record: dict[str, Any]

    @property
    def commit(self) -> bool:
        """Stored in one script: every step is in the home queue, and few."""
        return len(self.by_queue) == 1 and len(self.spec.steps) <= FLOW_CHUNK

    def parts(self) -> list[tuple[str, list[Encoded]]]:
        """The steps of each queue, home first, in pieces of at most FLOW_CHUNK
        (the first with the record: it may be empty)."""
        return [(q, steps[i : i + FLOW_CHUNK]) for q, steps in self.by_queue.items()
                for i in range(0, max(len(steps), 1), FLOW_CHUNK)]  # fmt: skip

    @classmethod
    def of(cls, spec: WorkflowSpec, keys: Keys) -> Staged:
        prefix = keys.queue
        home = spec.steps[0].spec.queue
        ids = [s.spec.id for s in spec.steps]
        by_queue: dict[str, list[Encoded]] = {home: []}
        for step, encoded in zip(spec.steps, _encoded(spec, prefix, prefix(home)), strict=True):
            by_queue.setdefault(step.spec.queue, []).append(encoded)
        starts: dict[str, list[str]] = {}
        for s in spec.steps:
            if not s.upstream:
                starts.setdefault(prefix(s.spec.queue), []).append(s.spec.id)
        record = {
            "key": spec.key or "", "many": spec.many, "jobs": ids,
            "sinks": [[ids[k], edge_ord(n)] for n, k in enumerate(spec.sinks)],
            "starts": list(starts.items()),
        }  # fmt: skip
        return cls(spec, home, prefix(home), by_queue, record)

    def payload(
        self, steps: list[Encoded], *, record: bool = False, at: str | None = None
    ) -> bytes:
        """flow_enqueue.lua's ARGV[2] for these steps (of one queue): the
        first call's with the record, the others' ``at`` its clock."""
        head = {"wf": self.spec.id, "home": self.home_prefix, "commit": self.commit,
                **_part(steps)}  # fmt: skip
        return orjson.dumps({**head, "record": self.record} if record else {**head, "at": at})


# A step's options that steps commonly share (a group of one task): sent once
# per part of a queue's steps, as a kind, not with each step (_flow.lua's
# flow_kinds makes their fields once).
KIND = ("task", "priority", "delay", "wat", "max_attempts", "timeout", "traceparent", "ck",
        "may_fail")  # fmt: skip
Kind = tuple[Any, ...]  # the values of KIND, as the step has them
Encoded = tuple[Kind, list[Any]]  # a step's kind, and [id, args, edges in, edges out]


ANSWER_SLICE = 500  # steps of an answer made between two looks at the replies


async def _answer(spec: WorkflowSpec, now: float) -> Workflow:
    """``stored_workflow(spec, now)``, letting the event loop run every slice."""
    jobs = []
    for job in stored_steps(spec, now):
        jobs.append(job)
        if len(jobs) % ANSWER_SLICE == 0:
            await asyncio.sleep(0)
    return stored_workflow(spec, now, jobs)


def _encoded(spec: WorkflowSpec, prefix: Any, home: str, *, sinks: bool = True) -> list[Encoded]:
    """Each step's kind and the rest of it as flow_enqueue.lua and spawn.lua
    read it: its edges in (source id, ord) and out (dependent id, its prefix,
    ord)."""
    ids = [s.spec.id for s in spec.steps]
    ords = [edge_ord(n) for n in range(max((len(s.upstream) for s in spec.steps), default=0))]
    prefixes = {q: prefix(q) for q in {s.spec.queue for s in spec.steps}}
    outs: list[list[list[str]]] = [[] for _ in spec.steps]
    for j, step in enumerate(spec.steps):
        for n, u in enumerate(step.upstream):
            outs[u].append([ids[j], prefixes[step.spec.queue], ords[n]])
    if sinks:
        for n, k in enumerate(spec.sinks):
            outs[k].append([spec.id, home, edge_ord(n)])

    def encoded(step: StepSpec, out: list[list[str]]) -> Encoded:
        s = step.spec
        kind = (s.task, s.priority, s.delay, s.run_at, s.max_attempts, s.timeout,
                s.traceparent, s.concurrency_key, step.may_fail)  # fmt: skip
        edges_in = [[ids[u], ords[n]] for n, u in enumerate(step.upstream)]
        return kind, [s.id, s.args.decode(), edges_in, out]

    return [encoded(s, out) for s, out in zip(spec.steps, outs, strict=True)]


def _kind(kind: Kind) -> dict[str, Any]:
    """A kind's options as the scripts read them ('' for none)."""
    task, priority, delay, run_at, max_attempts, timeout, traceparent, ck, may_fail = kind
    return dict(zip(KIND, (
        task, str(priority), repr(float(delay)) if delay else "", codec.number(run_at),
        codec.number(max_attempts), codec.number(timeout), traceparent or "", ck or "", may_fail,
    ), strict=True))  # fmt: skip


def _part(steps: list[Encoded]) -> dict[str, Any]:
    """Steps of one queue, as the scripts read them: {kinds: [each kind's
    options], steps: [[id, args, edges in, edges out, its kind's index]...]}."""
    kinds: dict[Kind, int] = {}
    return {
        "steps": [[*rest, kinds.setdefault(kind, len(kinds))] for kind, rest in steps],
        "kinds": [_kind(kind) for kind in kinds],
    }
