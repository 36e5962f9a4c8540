"""PostgreSQL failover under load, and what it costs the acknowledged.

Real ``tenure worker`` processes and a producer use one URL naming a primary
and its streaming standby (``tests/servers_standby.py``). While they work,
the primary is killed (kill -9) and the standby promoted (``pg_ctl promote``);
for more than one failover, a new standby is made of the new primary, on the
old one's port, and the load goes on. Or the primary's host vanishes first
(``vanish``: its end of the cable down, then the kill), and the promotion
comes ``detect`` seconds later. The jobs complete in their handler's own
transaction (``soak.settle``), so what was acknowledged is known outside
tenure on both sides:

- an enqueue, when ``enqueue_many`` returned its jobs (the producer writes
  the time down);
- a completion, when the handler's ``transaction()`` committed (the handler
  writes ``settled`` in its side channel, ``soak_tasks.py``).

:func:`run` judges the run against what the promoted server holds: the
acknowledged enqueues it lost, the acknowledged completions it lost (the job
ran again, or is not completed by that attempt), each with how long before
the kill it was acknowledged; how long each worker took, from the
promotion, to claim a job there; the fences claimed twice.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from tenure.app import App
from tenure.core.states import State
from tenure.errors import TenureError
from tenure.job import Job
from tests.fault import history
from tests.fault.nemesis import Fleet, Netns, Slot, wait_until
from tests.servers_standby import ReplicatedPostgres


@dataclass
class FailoverConfig:
    synchronous: bool
    failovers: int = 1
    workers: int = 2
    concurrency: int = 4
    load: float = 1.5  # seconds of load before each kill, and after each promotion
    lag: float = 0.0  # seconds the standby is behind at the kill (the primary's walsender frozen)
    vanish: bool = False  # the primary's host vanishes (its connections left half-open)
    detect: float = 0.0  # seconds from the death to the promotion (a failover manager's)
    options: str = ""  # libpq's, for the URL
    handler: float = 0.01  # seconds each job runs
    batch: int = 5  # jobs per enqueue_many
    backlog: int = 100  # queued jobs the producer keeps at most
    settle: float = 60.0  # the cap on waiting for every job to finish


@dataclass
class Failover:
    """One kill and promotion, wall-clock times, and what it cost."""

    stopped: float  # when the standby stopped receiving (the lag began, or the kill)
    killed: float  # when every process of the primary was dead
    promoted: float
    promotion: float  # seconds from the death to the end of pg_ctl promote
    resumed: dict[int, float] = field(default_factory=dict)  # worker pid -> s to its first claim
    lost_enqueues: list[float] = field(default_factory=list)  # s acknowledged before the kill
    lost_completions: list[float] = field(default_factory=list)  # idem


@dataclass
class FailoverReport:
    config: FailoverConfig
    failovers: list[Failover]
    workers: list[int]  # the pids of the workers that ran throughout
    acked: int  # acknowledged enqueues
    settled: int  # acknowledged completions
    executions: int  # handler starts
    reused_fences: list[str]  # (job, fence) started by two executions
    stale_settles: list[str]  # (job, fence) settled by the first of two, after the second began
    unfinished: list[str]  # acknowledged jobs the promoted server holds unfinished at the end

    def table(self) -> str:
        mode = "synchronous" if self.config.synchronous else "asynchronous"
        lag = f", standby {self.config.lag * 1000:.0f} ms behind" if self.config.lag else ""
        lines = [f"{mode} replication{lag}: {self.acked} acknowledged enqueues, {self.settled} "
                 f"acknowledged completions, {self.executions} executions, "
                 f"{len(self.reused_fences)} fences claimed twice "
                 f"({len(self.stale_settles)} settled by the older attempt meanwhile), "
                 f"{len(self.unfinished)} unfinished",
                 "failover  promote  resume max  lost enqueues (oldest)  "
                 "lost completions (oldest)"]  # fmt: skip
        for i, f in enumerate(self.failovers, 1):
            resumed = max(f.resumed.values()) if len(f.resumed) == len(self.workers) else None
            shown = "never" if resumed is None else f"{resumed:.2f}s"
            enqueues, completions = _lost(f.lost_enqueues), _lost(f.lost_completions)
            lines.append(f"{i:>8}  {f.promotion:>6.2f}s  {shown:>10}  {enqueues:>22}  "
                         f"{completions:>25}")  # fmt: skip
        return "\n".join(lines)


def _lost(ages: list[float]) -> str:
    return f"{len(ages)} ({max(ages) * 1000:.0f} ms)" if ages else "0"


class Producer(threading.Thread):
    """Enqueues batches of ``soak.settle`` jobs, keeping the backlog bounded;
    writes down when each batch was acknowledged."""

    def __init__(self, url: str, queue: str, config: FailoverConfig) -> None:
        super().__init__(name="failover-producer", daemon=True)
        self.url, self.queue, self.config = url, queue, config
        self.acked: list[tuple[float, list[str]]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        args = {"tag": "", "kind": "ok", "seconds": self.config.handler}
        with App(self.url) as app:
            while not self.halt.is_set():
                try:
                    if app.queue(self.queue).counts()[State.QUEUED] >= self.config.backlog:
                        self.halt.wait(0.02)
                        continue
                    jobs = app.enqueue_many("soak.settle", [args] * self.config.batch,
                                            queue=self.queue)  # fmt: skip
                except TenureError:  # no primary for the moment: not acknowledged
                    self.halt.wait(0.02)
                    continue
                self.acked.append((time.time(), [j.id for j in jobs]))


def run(config: FailoverConfig, directory: Path) -> FailoverReport:
    """Run ``config.failovers`` failovers under load, in ``directory``, and judge them."""
    netns = Netns() if config.vanish else None
    pair = fleet = producer = None
    try:
        pair = ReplicatedPostgres(synchronous=config.synchronous, netns=netns)
        url = pair.new_database() + (f"?{config.options}" if config.options else "")
        queue = f"failover.{uuid.uuid4().hex[:8]}"
        with App(url) as app:
            app.queue(queue).set_policy(lease_ttl=2.0, heartbeat_interval=0.5,
                                        sweep_interval=0.25, max_attempts=20,
                                        max_stalls=20)  # fmt: skip
        fleet = Fleet(directory, url, [queue], process_only=[], concurrency=config.concurrency,
                      slots=[Slot("process")] * config.workers,
                      record=lambda *a, **k: None)  # fmt: skip
        producer = Producer(url, queue, config)
        producer.start()
        times = []
        for i in range(config.failovers):
            if i:
                pair.rebuild()
            time.sleep(config.load)  # the load's cadence, not a wait for a condition
            times.append(pair.failover(config.lag, vanish=config.vanish, detect=config.detect))
            time.sleep(config.load)
        producer.halt.set()
        producer.join(30)
        workers = [p.pid for p in fleet.live if p.poll() is None]
        with App(url) as app:
            wait_until(lambda: _quiet(app, queue), config.settle, "every job to finish")
            fleet.stop()
            jobs = history.stored_jobs(app, [queue])
        return judge(config, times=times, acked=producer.acked, jobs=jobs,
                     signs=_events(directory), workers=workers)  # fmt: skip
    finally:
        if producer is not None:
            producer.halt.set()
        if fleet is not None:
            fleet.close()
        if pair is not None:
            pair.close()
        if netns is not None:
            netns.close()


def _quiet(app: App, queue: str) -> bool:
    with contextlib.suppress(TenureError):
        counts = app.queue(queue).counts()
        return counts[State.QUEUED] + counts[State.ACTIVE] + counts[State.SCHEDULED] == 0
    return False


@dataclass(frozen=True)
class Sign:
    """One side-channel line: ``ev`` start | end | settled."""

    ev: str
    job: str
    fence: int
    pid: int
    wall: float


def _events(directory: Path) -> list[Sign]:
    signs = []
    for path in sorted(directory.glob("events.*.jsonl")):
        for raw in path.read_bytes().splitlines():
            with contextlib.suppress(orjson.JSONDecodeError):  # a line cut short by a kill
                e = orjson.loads(raw)
                signs.append(Sign(e["ev"], e["job"], e["fence"], e["pid"], e["wall"]))
    return signs


def judge(config: FailoverConfig, *, times: list[tuple[float, float, float]],
          acked: list[tuple[float, list[str]]], jobs: dict[str, Job], signs: list[Sign],
          workers: list[int]) -> FailoverReport:  # fmt: skip
    """What the promoted servers hold, against what was acknowledged."""
    failovers = [Failover(s, k, p, p - k) for s, k, p in times]

    def failover_after(at: float) -> tuple[Failover, float] | None:
        """The first failover killed at or after ``at``, and how long after."""
        return next(((f, f.killed - at) for f in failovers if f.killed >= at), None)

    for at, ids in acked:
        for job_id in ids:
            if job_id not in jobs and (hit := failover_after(at)) is not None:
                hit[0].lost_enqueues.append(hit[1])
    starts: dict[str, list[Sign]] = defaultdict(list)
    for s in signs:
        if s.ev == "start":
            starts[s.job].append(s)
    settled = [s for s in signs if s.ev == "settled"]
    for s in settled:
        if not _kept(s, jobs.get(s.job), starts[s.job]):
            hit = failover_after(s.wall)
            if hit is not None:
                hit[0].lost_completions.append(hit[1])
    _resumed(failovers, jobs, workers)
    fences: dict[tuple[str, int], list[Sign]] = defaultdict(list)
    for s in signs:
        if s.ev == "start":
            fences[(s.job, s.fence)].append(s)
    acked_ids = {job_id for _, ids in acked for job_id in ids}
    stale = [s for s in settled if _stale(s, fences[(s.job, s.fence)])]
    return FailoverReport(
        config, failovers, workers, len(acked_ids), len(settled), len(fences),
        reused_fences=[f"{j}:{f}" for (j, f), x in fences.items() if len(x) > 1],
        stale_settles=[f"{s.job}:{s.fence}" for s in stale],
        unfinished=[i for i in acked_ids if i in jobs and jobs[i].state is not State.COMPLETED],
    )  # fmt: skip


def _stale(settled: Sign, starts: list[Sign]) -> bool:
    """Whether this settle came from an attempt whose fence was claimed again
    (its claim lost with the old primary) and after that second claim."""
    mine = [s for s in starts if s.pid == settled.pid and s.wall <= settled.wall]
    if not mine:
        return False
    began = max(s.wall for s in mine)
    return any(began < s.wall < settled.wall and s.pid != settled.pid for s in starts)


def _kept(settled: Sign, job: Job | None, starts: list[Sign]) -> bool:
    """Whether the promoted server kept this acknowledged completion: the job
    completed by that attempt, and never started again."""
    return (
        job is not None
        and job.state is State.COMPLETED
        and job.result == {"fence": settled.fence, "pid": settled.pid}
        and not any(s.wall > settled.wall for s in starts)
    )


def _resumed(failovers: list[Failover], jobs: dict[str, Job], workers: list[int]) -> None:
    """For each failover, each worker's first claim on the promoted server, from the
    promotion (the server's clock, which is this machine's)."""
    claims = sorted(
        (a.started_at, history.worker_pid(a.worker)) for j in jobs.values() for a in j.history
    )
    for i, f in enumerate(failovers):
        until = failovers[i + 1].killed if i + 1 < len(failovers) else float("inf")
        for at, pid in claims:
            if pid in workers and f.promoted <= at < until and pid not in f.resumed:
                f.resumed[pid] = at - f.promoted
