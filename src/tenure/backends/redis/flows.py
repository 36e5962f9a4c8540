"""Workflows on Redis: storing them, spawning, reading and cancelling them.

Each step is a job of its own queue (its hash slot); the workflow's record
lives in its home queue, the queue of its first step, and the fleet's map
``workflows`` (keys.py) finds it. Edges and the messages that move them across
slots: ``_flow.lua`` and ``relay.py``.

Storing is all or nothing. A workflow whose steps are all in its home queue is
one script (``flow_enqueue.lua``). Otherwise: the home queue's script writes
the record ``pending`` (and checks its key) with its steps, one script per
other queue writes theirs (all waiting), then ``flow_commit.lua`` makes it
``running`` and releases the steps without upstream, by messages. A producer
that dies midway leaves a pending workflow, which readers take for absent and
the sweeper deletes after ``rescue.PENDING_MAX`` seconds (:meth:`Flows.drop`).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import orjson

from tenure.backends.redis import codec
from tenure.backends.redis.index import Index
from tenure.backends.redis.keys import Keys
from tenure.backends.redis.relay import Relay
from tenure.backends.redis.scripts import INVALID_TRANSITION, Arg, Call, Runner, check
from tenure.core.workflows import StepSpec, Workflow, WorkflowSpec, WorkflowState, edge_ord
from tenure.errors import BackendUnavailable, InvalidInput, JobNotFound
from tenure.job import Job

ABSENT = {"pending", "dropped"}  # a record's states that readers take for no workflow


class Flows:
    """The workflow verbs of the Redis backend, given specs already checked."""

    def __init__(self, runner: Runner, keys: Keys, index: Index, relay: Relay) -> None:
        self.runner = runner
        self.keys = keys
        self.index = index
        self.relay = relay

    async def enqueue_workflow(self, spec: WorkflowSpec) -> Workflow:
        prefix = self.keys.queue
        home = spec.steps[0].spec.queue
        ids = [s.spec.id for s in spec.steps]
        by_queue: dict[str, list[dict[str, Any]]] = {home: []}
        for step, encoded in zip(spec.steps, _encoded(spec, prefix, prefix(home)), strict=True):
            by_queue.setdefault(step.spec.queue, []).append(encoded)
        commit = len(by_queue) == 1
        record = {
            "key": spec.key or "", "many": spec.many, "jobs": ids,
            "sinks": [[ids[k], edge_ord(n)] for n, k in enumerate(spec.sinks)],
            "starts": [[prefix(s.spec.queue), s.spec.id] for s in spec.steps if not s.upstream],
        }  # fmt: skip
        await self.runner.pipeline([  # the indexes first: a rerun finds them
            Call.command("SADD", self.keys.queues, *by_queue),
            Call.command("HSET", self.keys.jobs, *[x for s in spec.steps
                                                   for x in (s.spec.id, s.spec.queue)]),
            Call.command("HSET", self.keys.workflows, spec.id, home),
        ])  # fmt: skip
        head = {"wf": spec.id, "home": prefix(home), "commit": commit}
        reply = await self.relay.after(await self.runner.call(
            "flow_enqueue", [prefix(home)],
            [home, orjson.dumps({**head, "record": record, "steps": by_queue[home]})],
        ))  # fmt: skip
        if len(reply) > 1:  # its key is held: nothing stored
            await self.runner.pipeline(
                [
                    Call.command("HDEL", self.keys.jobs, *ids),
                    Call.command("HDEL", self.keys.workflows, spec.id),
                ]
            )
            return await self.get_workflow(reply[1].decode())
        if not commit:
            await self.runner.pipeline([
                Call.script("flow_enqueue", [prefix(q)], [q, orjson.dumps({**head, "steps": part})])
                for q, part in by_queue.items() if q != home
            ])  # fmt: skip
            if not await self.relay.after(
                await self.runner.call("flow_commit", [prefix(home)], [spec.id])
            ):
                raise BackendUnavailable(f"workflow {spec.id} was abandoned while it was stored")
        self.index.remember({s.spec.id: s.spec.queue for s in spec.steps})
        return await self.get_workflow(spec.id)

    async def spawn(self, job_id: str, fence: int, seq: int, spec: WorkflowSpec) -> list[Job]:
        queue = await self.index.queue_of(job_id)
        if any(s.spec.queue != queue for s in spec.steps):
            raise InvalidInput(
                f"on Redis, a step spawns steps of its own queue ({queue!r}) only: "
                "give the others a step of theirs that enqueues them"
            )
        prefix = self.keys.queue(queue)
        steps = _encoded(spec, lambda _: prefix, prefix, sinks=False)
        sinks = [spec.steps[k].spec.id for k in spec.sinks]
        await self.runner.command(
            "HSET", self.keys.jobs, *[x for s in spec.steps for x in (s.spec.id, queue)]
        )
        args: list[Arg] = [job_id, fence, seq, queue,
                           orjson.dumps({"steps": steps, "sinks": sinks})]  # fmt: skip
        code, *made = await self.relay.after(await self.runner.call("spawn", [prefix], args))
        jobs = [codec.job(flat) for flat in made]
        if code != 0 or [j.id for j in jobs] != [s.spec.id for s in spec.steps]:
            # made before (its seq), or refused: these ids made no job
            await self.runner.command("HDEL", self.keys.jobs, *[s.spec.id for s in spec.steps])
        if code == INVALID_TRANSITION:
            raise InvalidInput(f"job {job_id} is no workflow's step: it cannot spawn")
        check(code, job_id, fence)
        return self.index.known([j for j in jobs if not j.upstream])  # those that run at once

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
            [Call.script("cancel", [self.keys.queue(q)], [i]) for i, q in queue_of.items()]
        )
        await self.relay.relay([p for _, relays in replies for p in relays])
        return await self.get_workflow(workflow_id)

    async def get_many(self, job_ids: Sequence[str]) -> builtins.list[Job]:
        queue_of = await self.index.queues_of(job_ids)
        found = [i for i in job_ids if i in queue_of]
        replies = await self.runner.pipeline(
            [Call.command("HGETALL", self.keys.queue(queue_of[i]) + "job:" + i) for i in found],
            repeatable=True,
        )
        return self.index.known([codec.job(_flat(r)) for r in replies if r])

    async def drop(self, home: str, workflow_id: str) -> None:
        """Delete a workflow abandoned while pending, with its steps (flow_drop.lua)."""
        _, _, ids = await self._record(workflow_id, home)
        queue_of = await self.index.queues_of([i.decode() for i in ids])
        others: dict[str, list[str]] = {}
        for job_id, queue in queue_of.items():
            others.setdefault(queue, []).append(job_id)
        mine = others.pop(home, [])
        calls = [Call.script("flow_drop", [self.keys.queue(home)], [workflow_id, "1", *mine])]
        calls += [Call.script("flow_drop", [self.keys.queue(q)], [workflow_id, "0", *batch])
                  for q, batch in others.items()]  # fmt: skip
        calls.append(Call.script("flow_drop", [self.keys.queue(home)], [workflow_id, "2"]))
        gone = [i for reply in await self.runner.pipeline(calls) for i in reply]
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


def _flat(reply: Any) -> Any:
    """An HGETALL reply as a flat list (redis-py may parse it as a dict)."""
    if isinstance(reply, dict):
        return [x for pair in reply.items() for x in pair]
    return reply


def _encoded(
    spec: WorkflowSpec, prefix: Any, home: str, *, sinks: bool = True
) -> list[dict[str, Any]]:
    """Each step as flow_enqueue.lua and spawn.lua read it: its fields, its
    edges in (source id, ord) and out (dependent id, its prefix, ord)."""
    ids = [s.spec.id for s in spec.steps]
    outs: list[list[list[str]]] = [[] for _ in spec.steps]
    for j, step in enumerate(spec.steps):
        for n, u in enumerate(step.upstream):
            outs[u].append([ids[j], prefix(step.spec.queue), edge_ord(n)])
    if sinks:
        for n, k in enumerate(spec.sinks):
            outs[k].append([spec.id, home, edge_ord(n)])
    return [_step(s, [[ids[u], edge_ord(n)] for n, u in enumerate(s.upstream)], out)
            for s, out in zip(spec.steps, outs, strict=True)]  # fmt: skip


def _step(step: StepSpec, edges_in: list[list[str]], edges_out: list[list[str]]) -> dict[str, Any]:
    s = step.spec
    return {
        "id": s.id, "task": s.task, "args": s.args.decode(), "priority": str(s.priority),
        "delay": repr(float(s.delay)), "wat": codec.number(s.run_at),
        "max_attempts": codec.number(s.max_attempts), "timeout": codec.number(s.timeout),
        "traceparent": s.traceparent or "", "may_fail": step.may_fail,
        "in": edges_in, "out": edges_out,
    }  # fmt: skip
