"""Concurrency keys, measured (issue #39's figures), on any storage:

* fairness: one ``tenure worker`` at its defaults; key A has ``--backlog``
  (100,000) jobs queued and running, then key B enqueues 10. With
  ``fair=True`` B's 10 must all start within the time of 50 of A's starts;
  B's wait (its enqueue to its last start) is shown as a multiple of its wait
  on an empty queue. With ``fair=False``, today's order: B's jobs wait behind
  A's (shown: how many of A's started while B waited, up to ``--patience``);
* debounce: 100 enqueues of one key over 2 s with ``debounce=1``: one job
  runs, once, with the last arguments, >= 1 s after the last enqueue;
* cost: drains of ``--jobs`` no-op jobs by one burst worker, alternating:
  no per-key field set (and, with ``--baseline-src``, the same under another
  checkout's ``src``, e.g. main's: "today's", on storage of its own:
  ``--baseline-url`` with ``--url``), jobs on 1,000 keys without a per-key
  limit, and with ``max_active_per_key=--per-key`` (1); jobs per second, median and
  spread of ``--rounds`` rounds (``--today-keys``: the keyed drains under
  ``--baseline-src`` too).

    .venv/bin/python benchmarks/keys.py [--backend sqlite | --url URL]
        [--only fairness,debounce,cost] [--backlog 100000] [--jobs 20000]
        [--rounds 3] [--baseline-src /path/to/main/src [--baseline-url URL] [--today-keys]]

Each measurement uses queues of its own (``keys.<random>``), so one storage
serves them all; ``--backend`` starts throwaway servers as the other
benchmarks do.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import tenure  # noqa: E402
from harness.stores import throwaway_url  # noqa: E402

BATCH = 1000  # jobs per enqueue_many
B_JOBS = 10
A_WARMUP = 500  # A's starts before B enqueues: the worker at its pace
FAIR_BOUND = 50  # A's starts within which B's 10 must all start (fair=True)
MODES = ("plain", "unlimited", "limited")  # the cost's drains


def _queue() -> str:
    return f"keys.{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def worker(url: str, queue: str, *, burst: bool = False,
           starts: Path | None = None) -> Iterator[subprocess.Popen[bytes]]:  # fmt: skip
    """One ``tenure worker keys_tasks:app`` at its defaults, serving ``queue``
    (under this process's tenure); stopped (SIGTERM, a drain) at the end."""
    path = [str(HERE), *sys.path]  # sys.path: a --baseline-src's first, as in this process
    env = {**os.environ, "BENCH_URL": url, "PYTHONPATH": os.pathsep.join(path)}
    if starts is not None:
        env["BENCH_STARTS"] = str(starts)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tenure.cli", "worker", "keys_tasks:app", "--queue", queue,
         *(["--burst"] if burst else [])], env=env, cwd=HERE,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(120)


def _starts(path: Path) -> list[tuple[float, str]]:
    """(time, key) of every start written so far, in time order."""
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines()]
    return sorted((float(r[0]), r[1]) for r in rows if len(r) == 3)


def _until(what: str, ready: Callable[[], bool], cap: float = 600.0) -> None:
    deadline = time.monotonic() + cap
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {cap:g} s for {what}")
        time.sleep(0.02)


def _enqueue(app: tenure.App, task: str, queue: str, n: int,
             **options: object) -> list[tenure.Job]:  # fmt: skip
    jobs = []
    for first in range(0, n, BATCH):
        count = min(BATCH, n - first)
        args = [{"key": str(options.get("concurrency_key")), "i": first + i}
                for i in range(count)] if task == "stamp" else [{}] * count  # fmt: skip
        jobs += app.enqueue_many(task, args, queue=queue, **options)
    return jobs


def b_wait(url: str, app: tenure.App, *, fair: bool, backlog: int, patience: int,
           tmp: Path) -> dict[str, float]:  # fmt: skip
    """B's wait behind A's ``backlog`` (0: an empty queue), and how many of A's
    jobs started from B's enqueue to B's last start (or to ``patience`` of them).
    From the moment storage stored B's jobs (their ``created_at``): on SQLite the
    enqueue may first wait for the busy worker's write lock, which is no claim's
    doing (``enqueue ms``: the call's time)."""
    queue, starts = _queue(), tmp / f"starts.{uuid.uuid4().hex[:6]}"
    app.queue(queue).set_policy(fair=fair)
    _enqueue(app, "stamp", queue, backlog, concurrency_key="A")
    with worker(url, queue, starts=starts):
        if backlog:
            _until("A's warm-up", lambda: len(_starts(starts)) >= A_WARMUP)
        else:  # the worker up (a first job ran) and idle: B's wait is the pickup alone
            _enqueue(app, "stamp", queue, 1, concurrency_key="W")
            _until("the worker's first job", lambda: bool(_starts(starts)))
            time.sleep(1.0)
        called = time.time()
        b_jobs = _enqueue(app, "stamp", queue, B_JOBS, concurrency_key="B")
        enqueue_ms = (time.time() - called) * 1000
        began = min(j.created_at for j in b_jobs)

        def b_done_or_patience_out() -> bool:
            seen = [(t, k) for t, k in _starts(starts) if t >= began]
            return sum(k == "B" for _, k in seen) == B_JOBS or (
                sum(k == "A" for _, k in seen) >= patience
            )

        _until("B's jobs", b_done_or_patience_out)
        seen = [(t, k) for t, k in _starts(starts) if t >= began]
    b_times = [t for t, k in seen if k == "B"]
    last_b = max(b_times) if len(b_times) == B_JOBS else None
    a_during = sum(k == "A" for t, k in seen if last_b is None or t <= last_b)
    with contextlib.suppress(tenure.TenureError):
        app.queue(queue).delete()
    return {"wait s": float("nan") if last_b is None else last_b - began,
            "A starts meanwhile": a_during, "B started": len(b_times),
            "enqueue ms": enqueue_ms}  # fmt: skip


def fairness(url: str, args: argparse.Namespace) -> None:
    with tenure.App(url) as app, tempfile.TemporaryDirectory() as tmp:
        empty = b_wait(url, app, fair=True, backlog=0, patience=args.patience, tmp=Path(tmp))
        print(f"  B's wait on an empty queue: {empty['wait s'] * 1000:.1f} ms", flush=True)
        for fair in (True, False):
            got = b_wait(url, app, fair=fair, backlog=args.backlog, patience=args.patience,
                         tmp=Path(tmp))  # fmt: skip
            if got["B started"] == B_JOBS:
                verdict = "within" if got["A starts meanwhile"] <= FAIR_BOUND else "NOT within"
                print(f"  fair={fair}: B's 10 started in {got['wait s'] * 1000:.1f} ms "
                      f"({got['wait s'] / empty['wait s']:.1f}x its wait on an empty queue), "
                      f"while {got['A starts meanwhile']:.0f} of A's started ({verdict} "
                      f"{FAIR_BOUND}); the enqueue call took {got['enqueue ms']:.0f} ms",
                      flush=True)  # fmt: skip
            else:
                print(f"  fair={fair}: {got['B started']:.0f} of B's 10 started while "
                      f"{got['A starts meanwhile']:.0f} of A's did (A's backlog first: "
                      "today's order)", flush=True)  # fmt: skip


def debounce(url: str, args: argparse.Namespace) -> None:
    with tenure.App(url) as app, tempfile.TemporaryDirectory() as tmp:
        queue, starts = _queue(), Path(tmp) / "starts"
        with worker(url, queue, starts=starts):
            ids, began = set(), time.monotonic()
            for i in range(100):  # over 2 s
                time.sleep(max(0.0, began + i * 0.02 - time.monotonic()))
                ids.add(app.enqueue_many("stamp", [{"key": "D", "i": i}], queue=queue,
                                         key="debounced", debounce=1.0)[0].id)  # fmt: skip
            last = time.time()
            _until("the debounced job", lambda: bool(_starts(starts)), cap=60)
            time.sleep(1.5)  # a second run, if any, would start by now
            ran = [line.split() for line in starts.read_text().splitlines()]
        [job_id] = ids
        job = app.get_job(job_id)
        assert len(ran) == 1, f"ran {len(ran)} times: {ran}"
        after = float(ran[0][0]) - last
        print(f"  100 enqueues over 2 s: {len(ids)} job, ran {len(ran)} time(s) with i="
              f"{ran[0][2]} (the last: 99), {after:.3f} s after the last enqueue "
              f"(>= 1 s), {job.state}", flush=True)  # fmt: skip
        assert ran[0][2] == "99" and after >= 1.0


def drain_rate(url: str, app: tenure.App, mode: str, jobs: int, src: str | None, *,
               per_key: int = 1) -> float:  # fmt: skip
    """Jobs per second of one burst worker draining ``jobs`` no-op jobs; under
    ``src``'s tenure (today's), enqueued and drained by a process of its own,
    on storage of its own (``url``): a newer schema is refused by older code."""
    if src is not None:
        path = os.pathsep.join([src, str(HERE), *sys.path])
        done = subprocess.run(
            [sys.executable, __file__, "--url", url, "--drain-once", mode, "--jobs", str(jobs)],
            env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, check=True,
        )  # fmt: skip
        return float(done.stdout.split()[-1])
    queue = _queue()
    if mode == "limited":
        app.queue(queue).set_policy(max_active_per_key=per_key)
    if mode in ("limited", "unlimited"):
        for k in range(1000):  # 1,000 keys, the jobs spread evenly
            app.enqueue_many("noop", [{}] * (jobs // 1000), queue=queue,
                             concurrency_key=f"k{k}")  # fmt: skip
    else:
        _enqueue(app, "noop", queue, jobs)
    began = time.perf_counter()
    for burst in range(3):
        with worker(url, queue, burst=True) as proc:
            proc.wait(1800)
        counts = app.queue(queue).counts()
        if counts[tenure.State.QUEUED] == 0:
            break
        # A burst worker that stops with jobs queued is a finding: said, not hidden.
        print(f"  ({mode}: burst worker {burst + 1} exited with {counts[tenure.State.QUEUED]} "
              "jobs queued; another one drains them)", file=sys.stderr, flush=True)  # fmt: skip
    took = time.perf_counter() - began
    assert counts[tenure.State.COMPLETED] == jobs, counts
    app.queue(queue).delete()
    return jobs / took


def cost(url: str, args: argparse.Namespace, today_url: str | None = None) -> None:
    """The drains, by label: (mode, src); with --baseline-src, today's too
    (its 1,000 keys, unlimited and limited, with --today-keys)."""
    modes: dict[str, tuple[str, str | None]] = {m: (m, None) for m in MODES}
    if args.baseline_src and today_url:
        today = {"today": ("today", args.baseline_src)}
        if args.today_keys:
            today |= {f"today {m}": (m, args.baseline_src) for m in MODES[1:]}
        modes = today | modes
    rates: dict[str, list[float]] = {m: [] for m in modes}
    with tenure.App(url) as app:
        for _ in range(args.rounds):
            for label, (mode, src) in modes.items():  # alternating: the load hits all
                where = url if src is None else today_url
                assert where is not None
                rates[label].append(
                    drain_rate(where, app, mode, args.jobs, src, per_key=args.per_key)
                )
    for label, got in rates.items():
        print(f"  {label}: {statistics.median(got):,.0f} jobs/s (rounds "
              f"{', '.join(f'{r:,.0f}' for r in got)})", flush=True)  # fmt: skip
    for prefix in ("", "today ") if args.today_keys else ("",):
        limited, unlimited = rates[prefix + "limited"], rates[prefix + "unlimited"]
        ratio = statistics.median(limited) / statistics.median(unlimited)
        rounds = ", ".join(f"{a / b:.2f}" for a, b in zip(limited, unlimited, strict=True))
        print(f"  {prefix}max_active_per_key={args.per_key} on 1,000 keys: {ratio:.2f}x of "
              f"unlimited (>= 0.7; rounds {rounds})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--backend", action="append", choices=["sqlite", "postgres", "redis"])
    where.add_argument("--url", help="storage to use (queues keys.* are made and deleted)")
    parser.add_argument("--only", default="fairness,debounce,cost")
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--patience", type=int, default=2_000,
                        help="fair=False: stop after this many of A's starts")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-key", type=int, default=1, help="cost: max_active_per_key")
    parser.add_argument("--baseline-src", help="another checkout's src/, for today's drain")
    parser.add_argument("--baseline-url", help="with --url: storage for today's drain")
    parser.add_argument("--today-keys", action="store_true",
                        help="with --baseline-src: today's keyed drains too")  # fmt: skip
    parser.add_argument("--drain-once", help=argparse.SUPPRESS)  # cost's own subprocess
    args = parser.parse_args()
    if args.drain_once:
        with tenure.App(args.url) as app:
            print(drain_rate(args.url, app, args.drain_once, args.jobs, None))
        return
    wanted = [p.strip() for p in args.only.split(",")]
    places = [(args.url, args.url)] if args.url else [
        (b, None) for b in args.backend or ["sqlite", "postgres", "redis"]]  # fmt: skip
    for name, given in places:
        with contextlib.ExitStack() as stack:
            url = given or stack.enter_context(throwaway_url(name, "keys"))
            for part in wanted:
                print(f"{name} {part}:", flush=True)
                if part == "cost":
                    today = args.baseline_url if given else (
                        stack.enter_context(throwaway_url(name, "keys-today"))
                        if args.baseline_src else None)  # fmt: skip
                    cost(url, args, today)
                else:
                    {"fairness": fairness, "debounce": debounce}[part](url, args)


if __name__ == "__main__":
    main()
