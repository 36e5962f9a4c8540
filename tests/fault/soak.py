"""A soak: thousands of mixed jobs through real workers while the nemesis
does one fault every few seconds; then everything settles and the history
checker judges the run.

:func:`soak` runs one, in a directory that keeps every record (requests,
handler side channel, faults, worker logs); ``python -m tests.fault.history
DIR`` judges it again while its storage still exists.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tenure.app import App
from tenure.chaos.gil import regex_size_for
from tenure.core.states import UNFINISHED
from tenure.core.workflows import Step, WorkflowState, chain, group
from tenure.errors import JobNotFound
from tenure.job import JobSpec
from tests.fault import flow_history, history
from tests.fault.flow_history import CancelRequest, StepRequest, WorkflowRequest
from tests.fault.nemesis import Fleet, Nemesis, Netns, Slot, can_skew, server_for, wait_until

WORKFLOW_SHARE = 1 / 15  # of the producer's requests
CANCEL_SHARE = 0.1  # of the workflows acknowledged, cancelled within 2 s
# Most jobs carry one of a few concurrency keys, and every queue limits each key:
# with 3 workers of 3 slots and long jobs among them, the limit binds
# (key_history.py judges it).
KEYS = ("customer-0", "customer-1", "customer-2", "customer-3")
KEY_SHARE = 0.7
MAX_ACTIVE_PER_KEY = 2


@dataclass
class SoakConfig:
    backend: str  # sqlite | postgres | redis
    seconds: float
    delivery: str = "at-least-once"  # the main queue's; a fifth of the jobs go to the other
    appendfsync: str = "always"  # Redis
    interval: float = 3.0  # between two faults
    server_kills: int = 8  # at least, on a server backend
    workers: int = 3
    concurrency: int = 3
    lease_ttl: float = 2.0
    heartbeat_interval: float = 0.5
    sweep_interval: float = 0.25
    backlog: int = 50  # unfinished jobs the producer keeps at most
    settle: float = 180.0  # the cap on waiting for every job to finish
    seed: int = field(default_factory=lambda: random.randrange(1 << 30))


@dataclass
class SoakResult:
    report: history.Report
    directory: Path
    skipped: list[str]  # faults this run could not do, and why

    def table(self) -> str:
        skipped = "".join(f"\nnot done: {s}" for s in self.skipped)
        return self.report.table() + skipped


class Producer(threading.Thread):
    """Enqueues a mix of jobs, single and bulk, keyed and delayed, and
    workflows (cancelling a few), keeping the backlog bounded, and writes
    every request down (acknowledged or not)."""

    def __init__(self, url: str, queues: dict[str, str], main: str, *, rng: random.Random,
                 directory: Path, backlog: int) -> None:  # fmt: skip
        super().__init__(name="soak-producer", daemon=True)
        self.app = App(url)
        self.queues, self.main, self.rng, self.backlog = queues, main, rng, backlog
        self.file = (directory / "requests.jsonl").open("ab")
        self.flows = (directory / "workflows.jsonl").open("ab")
        self.workflows: list[str] = []  # those acknowledged
        self.cancels = (directory / "cancels.jsonl").open("ab")
        self.to_cancel: list[tuple[float, str]] = []  # (when, workflow id)
        self.serial = 0
        self.halt = threading.Event()
        self.gil = regex_size_for(0.1)

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                self._cancel_due()
                try:
                    unfinished = sum(
                        self.app.queue(q).counts()[s]
                        for q in self.queues.values()
                        for s in UNFINISHED
                    )
                except Exception:  # the server is down: try again in a moment
                    self.halt.wait(0.1)
                    continue
                if unfinished >= self.backlog:
                    self.halt.wait(0.05)
                    continue
                self.one()
        finally:
            self.app.close()
            self.file.close()
            self.flows.close()
            self.cancels.close()

    def _plan(self) -> tuple[str, str, dict[str, Any], float]:
        r, rng = self.rng.random(), self.rng
        short = round(rng.uniform(0.005, 0.05), 3)
        long_ = round(rng.uniform(1.0, 3.0), 2)
        plans: list[tuple[float, tuple[str, str, dict[str, Any], float]]] = [
            (0.30, ("soak.run", "ok", {"seconds": short}, 0.0)),
            (0.12, ("soak.arun", "ok", {"seconds": short}, 0.0)),
            (0.07, ("soak.run", "ok", {"seconds": long_}, 0.0)),
            (0.04, ("soak.arun", "ok", {"seconds": long_}, 0.0)),
            (0.06, ("soak.run", "ok", {"seconds": long_ / 2, "gil": self.gil}, 0.0)),
            (0.09, ("soak.flaky", "flaky", {"raises": 1}, 0.0)),
            (0.04, ("soak.flaky", "raise", {"raises": 99}, 0.0)),
            (0.05, ("soak.fail", "fail", {}, 0.0)),
            (1.00, ("soak.run", "ok", {"seconds": short}, round(rng.uniform(0.3, 3.0), 2))),
        ]
        for weight, plan in plans:
            if r < weight:
                return plan
            r -= weight
        raise AssertionError("unreachable")

    def one(self) -> None:
        if self.rng.random() < WORKFLOW_SHARE:
            self._workflow()
            return
        task, kind, args, delay = self._plan()
        delivery = self.main if self.rng.random() < 0.8 else _other(self.main)
        # A handler that holds the GIL delays a thread-pool worker's heartbeats (README):
        # such jobs go to a queue that only process-pool workers serve.
        queue = self.queues["gil" if "gil" in args else delivery]
        choice = self.rng.random()
        if choice < 0.05:  # keyed: the second enqueue must return the first job
            key, ckey = f"k{self.serial}", self._key()
            first = self._enqueue(task, kind, args, queue, delay=0.5, key=key, ckey=ckey)
            self._enqueue(task, kind, args, queue, delay=0.5, key=key, ckey=ckey, dedup=first)
        elif choice < 0.25:
            self._bulk(task, kind, args, queue, delay=delay, n=self.rng.randint(5, 20))
        else:
            self._enqueue(task, kind, args, queue, delay=delay, key=None, ckey=self._key())

    def _tag(self) -> str:
        self.serial += 1
        return f"t{self.serial}"

    def _key(self) -> str | None:
        return self.rng.choice(KEYS) if self.rng.random() < KEY_SHARE else None

    def _write(self, request: history.Request) -> None:
        self.file.write(orjson.dumps(asdict(request)) + b"\n")
        self.file.flush()

    def _enqueue(self, task: str, kind: str, args: dict[str, Any], queue: str, *, delay: float,
                 key: str | None, ckey: str | None, dedup: str | None = None,
                 ) -> str | None:  # fmt: skip
        tag, called = self._tag(), time.monotonic()
        job_id = None
        with contextlib.suppress(Exception):  # not acknowledged: the checker knows
            # enqueue_many: App.enqueue does not name concurrency_key.
            [job] = self.app.enqueue_many(task, [{"tag": tag, "kind": kind, **args}], queue=queue,
                                          delay=delay, key=key, concurrency_key=ckey)  # fmt: skip
            job_id = job.id
        # A keyed enqueue answered with the first job created nothing: no delay of its own.
        own_delay = 0.0 if dedup is not None else delay
        self._write(history.Request(tag, kind, queue, job_id, called, _acked(job_id), own_delay,
                                    key, concurrency_key=ckey))  # fmt: skip
        return job_id

    def _bulk(self, task: str, kind: str, args: dict[str, Any], queue: str, *, delay: float,
              n: int) -> None:  # fmt: skip
        tags, called, ckey = [self._tag() for _ in range(n)], time.monotonic(), self._key()
        ids: list[str | None] = [None] * n
        with contextlib.suppress(Exception):
            jobs = self.app.enqueue_many(task, [{"tag": t, "kind": kind, **args} for t in tags],
                                         queue=queue, delay=delay,
                                         concurrency_key=ckey)  # fmt: skip
            ids = [j.id for j in jobs]
        for tag, job_id in zip(tags, ids, strict=True):
            self._write(history.Request(tag, kind, queue, job_id, called, _acked(job_id), delay,
                                        None, bulk=True, concurrency_key=ckey))  # fmt: skip

    def _workflow(self) -> None:
        """One workflow (see ``_flow_plan``), each step on the main queue or the other."""
        plans = self._flow_plan()
        n, tags = len(plans), [self._tag() for _ in plans]
        ups = [(), *[(tags[0],)] * (n - 2), tuple(tags[1:-1])]
        asked = tuple(StepRequest(tag, kind, up, may_fail, fanin=i == n - 1)
                      for i, ((_, kind, _, may_fail), tag, up)
                      in enumerate(zip(plans, tags, ups, strict=True)))  # fmt: skip
        queues = [self.queues[self.main if self.rng.random() < 0.8 else _other(self.main)]
                  for _ in plans]  # fmt: skip
        ckeys = [self._key() for _ in plans]
        steps = [Step(JobSpec.create(task, {"tag": tag, "kind": kind, **args}, queue=queue,
                                     concurrency_key=ckey), may_fail)
                 for (task, kind, args, may_fail), tag, queue, ckey
                 in zip(plans, tags, queues, ckeys, strict=True)]  # fmt: skip
        called, wf_id, ids = time.monotonic(), None, [None] * n
        with contextlib.suppress(Exception):  # not acknowledged: the checker knows
            workflow = self.app.workflow(chain(steps[0], group(*steps[1:-1]), steps[-1]))
            wf_id, ids = workflow.id, [j.id for j in workflow.jobs]
            self.workflows.append(wf_id)
            if self.rng.random() < CANCEL_SHARE:
                self.to_cancel.append((called + self.rng.uniform(0.0, 2.0), wf_id))
        for step, queue, job_id, ckey in zip(asked, queues, ids, ckeys, strict=True):
            self._write(history.Request(step.tag, step.kind, queue, job_id, called,
                                        _acked(job_id), concurrency_key=ckey))  # fmt: skip
        request = WorkflowRequest(wf_id, called, asked, _acked(wf_id))
        self.flows.write(orjson.dumps(asdict(request)) + b"\n")
        self.flows.flush()

    def _cancel_due(self) -> None:
        now = time.monotonic()
        due = [wf_id for when, wf_id in self.to_cancel if when <= now]
        self.to_cancel = [(when, wf_id) for when, wf_id in self.to_cancel if when > now]
        for wf_id in due:
            called, state = time.monotonic(), None
            with contextlib.suppress(Exception):  # no answer: the checker knows
                state = str(self.app.cancel(wf_id).state)
            self.cancels.write(orjson.dumps(asdict(CancelRequest(wf_id, called, state))) + b"\n")
            self.cancels.flush()

    def _flow_plan(self) -> list[tuple[str, str, dict[str, Any], bool]]:
        """(task, kind, args, may_fail) of each step of chain(a step, group(2-4
        steps, maybe a flaky one that may fail, maybe one that fails for good,
        or may), a fan-in callback)."""
        rng = self.rng

        def seconds() -> float:
            return round(rng.uniform(1.0, 2.0) if rng.random() < 0.25
                         else rng.uniform(0.005, 0.05), 3)  # fmt: skip

        middle = [(rng.choice(["soak.run", "soak.arun"]), "ok", {"seconds": seconds()}, False)
                  for _ in range(rng.randint(2, 4))]  # fmt: skip
        if rng.random() < 0.3:
            middle.append(("soak.flaky", "flaky", {"raises": 1}, True))
        if rng.random() < 0.2:
            middle.append(("soak.fail", "fail", {}, rng.random() < 0.5))
        return [("soak.run", "ok", {"seconds": 0.01}, False), *middle,
                ("soak.fanin", "ok", {"seconds": 0.02}, False)]  # fmt: skip


def _acked(job_id: str | None) -> float | None:
    return None if job_id is None else time.time()


def _other(delivery: str) -> str:
    return "at-most-once" if delivery == "at-least-once" else "at-least-once"


def soak(config: SoakConfig, directory: Path) -> SoakResult:
    """Run one soak in ``directory`` and judge it."""
    rng = random.Random(config.seed)
    netns, skew, skipped = _where(config.backend)
    server = None
    fleet = nemesis = None
    try:
        server = server_for(config.backend, netns.host_ip if netns else None, config.appendfsync)
        url = _url(config.backend, server, directory)
        tag = uuid.uuid4().hex[:8]
        queues = {d: f"soak.{tag}.{d}" for d in ("at-least-once", "at-most-once", "gil")}
        deliveries = {queues[d]: d for d in ("at-least-once", "at-most-once")}
        deliveries[queues["gil"]] = config.delivery
        with App(url) as app:
            for queue, delivery in deliveries.items():
                app.queue(queue).set_policy(
                    lease_ttl=config.lease_ttl, heartbeat_interval=config.heartbeat_interval,
                    sweep_interval=config.sweep_interval, max_attempts=3, max_stalls=3,
                    backoff_base=0.2, backoff_max=1.0, delivery=delivery,
                    max_active_per_key=MAX_ACTIVE_PER_KEY)  # fmt: skip
        manifest = {"url": url, "deliveries": deliveries, "config": asdict(config),
                    "wall_minus_mono": time.time() - time.monotonic(),
                    "key_limits": dict.fromkeys(deliveries, MAX_ACTIVE_PER_KEY)}  # fmt: skip
        (directory / "manifest.json").write_bytes(orjson.dumps(manifest))
        nemesis = Nemesis(directory, rng, lease_ttl=config.lease_ttl,
                          sweep=config.sweep_interval, server=server)  # fmt: skip
        slots = [Slot("process", netns), Slot("thread"), Slot("process", skew=skew)]
        slots = (slots * config.workers)[: config.workers]
        fleet = Fleet(directory, url, list(queues.values()), process_only=[queues["gil"]],
                      slots=slots, concurrency=config.concurrency,
                      record=nemesis.record)  # fmt: skip
        nemesis.fleet = fleet
        producer = Producer(url, queues, config.delivery, rng=random.Random(config.seed + 1),
                            directory=directory,
                            backlog=config.backlog)  # fmt: skip
        producer.start()
        died = _under_fire(config, nemesis, fleet, rng)
        producer.halt.set()
        producer.join(60)
        settled = _settle(url, list(queues.values()), producer.workflows, config.settle)
        fleet.stop()
        run = history.load(directory)
        with App(url) as app:
            jobs = history.stored_jobs(app, queues.values())
            workflows = history.stored_workflows(app, history.workflow_ids(run, jobs))
        history.dump_jobs(jobs, directory / "jobs.jsonl")
        flow_history.dump_workflows(workflows, directory / "stored_workflows.jsonl")
        report = history.check(run, jobs, workflows)
        report.rows.append(history.Row("workers that died on their own", died, True))
        report.rows.append(history.Row("settled within the cap", int(not settled), True))
        return SoakResult(report, directory, skipped)
    finally:
        if fleet is not None:
            fleet.close()
        if nemesis is not None:
            nemesis.close()
        if server is not None:
            server.close()
        if netns is not None:
            netns.close()


def _where(backend: str) -> tuple[Netns | None, bool, list[str]]:
    """The namespace to partition a worker in, whether a worker's clock can be
    skewed, and the faults this run cannot do, with the reason."""
    if backend == "sqlite":
        return (
            None,
            False,
            [
                "partition: SQLite is a local file, there is no network to cut",
                "kill-server: SQLite has no server",
                "skew: SQLite's clock is each writer's own; one host, one clock",
            ],
        )
    skipped = []
    why = Netns.unavailable()
    if why:
        skipped.append(f"partition: {why}")
    if can_skew() is not None:
        skipped.append(f"skew: {can_skew()}")
    return (None if why else Netns()), can_skew() is None, skipped


def _url(backend: str, server: Any, directory: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{directory / 'soak.db'}"
    if backend == "postgres":
        return str(server.new_database())
    return str(server.url)


def _schedule(config: SoakConfig, kinds: list[str], rng: random.Random, server: bool) -> list[str]:
    """The faults in order: every kind in turn (shuffled rounds), and the server
    kills spread evenly among them."""
    n = max(1, int(config.seconds / config.interval))
    plan: list[str] = []
    while len(plan) < n:
        plan += rng.sample(kinds, len(kinds))
    plan = plan[:n]
    if server:
        kills = min(n, max(config.server_kills, n // 5))
        for i in range(kills):
            plan[(i * n) // kills] = "kill-server"
    return plan


def _under_fire(config: SoakConfig, nemesis: Nemesis, fleet: Fleet, rng: random.Random) -> int:
    """The nemesis's part of the run; returns how many workers exited on their own."""
    plan = _schedule(config, nemesis.kinds(), rng, nemesis.server is not None)
    began = time.monotonic()
    died = 0
    for i, kind in enumerate(plan):
        # The cadence of the faults, not a wait for a condition.
        time.sleep(max(0.0, began + (i + 1) * config.interval - time.monotonic()))
        for j, proc in enumerate(fleet.live):
            if proc.poll() is not None:  # no fault of ours ended it
                died += 1
                fleet.replace(j)
        nemesis.do(kind)
    return died


def _settle(url: str, queues: list[str], workflows: list[str], cap: float) -> bool:
    """Wait until no job of the run is unfinished (waiting steps are), and
    every workflow ended (or the cap passes)."""
    running = set(workflows)

    def quiet() -> bool:
        try:
            if any(sum(app.queue(q).counts()[s] for s in UNFINISHED) for q in queues):
                return False
            for wf_id in sorted(running):
                with contextlib.suppress(JobNotFound):  # lost: the checker says so
                    if app.get_workflow(wf_id).state is WorkflowState.RUNNING:
                        return False
                running.discard(wf_id)
            return True
        except Exception:
            return False

    with App(url) as app:
        try:
            wait_until(quiet, cap, "every job to finish")
        except AssertionError:
            return False
    return True
