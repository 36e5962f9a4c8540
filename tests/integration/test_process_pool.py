"""Executor processes: reuse, recycling, async slots, deadlines, crashes."""

import asyncio
import dataclasses
import itertools
import os
import signal
import sys
import textwrap

import pytest

from tenure import App, DeadReason, InvalidInput, Outcome, State, TenureError, WorkerConfig
from tenure.job import Job
from tenure.loader import path_of
from tenure.worker import Supervisor
from tenure.worker.executors.base import Crashed, Returned, Stopped, TimedOut
from tenure.worker.executors.process import ProcessPool

MODULE = """
import asyncio, os, time, tenure

app = tenure.App({url!r})

@app.task
def pid() -> int:
    return os.getpid()

@app.task
def scheduling() -> int:
    return os.sched_getscheduler(0)

@app.task
async def apid(seconds: float) -> int:
    await asyncio.sleep(seconds)
    return os.getpid()

@app.task(timeout=0.3, max_attempts=1)
def wedged() -> None:
    while True:
        pass

@app.task(max_attempts=3)
def dies() -> None:
    os._exit(7)

@app.task
def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds

@app.task
def reports() -> str:
    job = tenure.current_job()
    job.progress({{"attempt": job.attempt, "fence": job.fence, "tick": job.tick}})
    job.heartbeat()
    return "ok"
"""


@pytest.fixture
def pool_app(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'pool.db'}"
    name = f"pool_app_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE.format(url=url)))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    yield module.app
    module.app.close()
    sys.modules.pop(name, None)


def work(app: App, **config):
    options = {"burst": True, "idle_poll_max": 0.05, "concurrency": 1, **config}
    asyncio.run(Supervisor(app, WorkerConfig(**options)).run())


def results(app, jobs):
    return [app.get_job(j.id).result for j in jobs]


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policy")
def test_handlers_run_as_batch_processes__their_wake_ups_do_not_preempt_the_supervisor(
    pool_app,
):
    job = pool_app.enqueue("scheduling", {})
    work(pool_app)
    assert pool_app.get_job(job.id).result == os.SCHED_BATCH
    assert os.sched_getscheduler(0) != os.SCHED_BATCH  # the supervisor's own is left alone


def test_an_executor_process_is_reused_between_jobs(pool_app):
    jobs = pool_app.enqueue_many("pid", [{}] * 4)
    work(pool_app)
    pids = results(pool_app, jobs)
    assert len(set(pids)) == 1 and pids[0] != __import__("os").getpid()


def test_an_executor_is_recycled_after_max_jobs(pool_app):
    jobs = pool_app.enqueue_many("pid", [{}] * 6)
    work(pool_app, max_jobs_per_executor=2)
    pids = results(pool_app, jobs)
    assert len(set(pids)) == 3
    assert all(pool_app.get_job(j.id).attempts == 1 for j in jobs)


def test_async_handlers_share_an_executor_up_to_its_slots(pool_app):
    jobs = pool_app.enqueue_many("apid", [{"seconds": 0.5}] * 4)
    work(pool_app, async_slots=4)
    done = [pool_app.get_job(j.id) for j in jobs]
    assert len({j.result for j in done}) == 1
    first_end = min(j.history[0].ended_at for j in done)
    assert all(j.history[0].started_at < first_end for j in done), "they did not overlap"


def test_a_handler_holding_the_gil_is_killed_at_its_deadline(pool_app):
    wedged = pool_app.enqueue("wedged", {})
    after = pool_app.enqueue("pid", {})
    work(pool_app)
    dead = pool_app.get_job(wedged.id)
    assert dead.dead_reason is DeadReason.TIMEOUT
    attempt = dead.history[0]
    assert attempt.outcome is Outcome.TIMEOUT
    assert 0.3 <= attempt.ended_at - attempt.started_at < 5
    assert pool_app.get_job(after.id).state is State.COMPLETED  # a new executor took over


def test_an_executor_that_dies__crashes_the_attempt_and_is_replaced(pool_app):
    pool_app.queue().set_policy(max_stalls=2)
    job = pool_app.enqueue("dies", {})
    after = pool_app.enqueue("pid", {})
    work(pool_app)
    dead = pool_app.get_job(job.id)
    assert dead.dead_reason is DeadReason.CRASHED and dead.stalls == 2
    assert [a.outcome for a in dead.history] == [Outcome.CRASHED, Outcome.CRASHED]
    assert "exited with status 7" in dead.error
    assert pool_app.get_job(after.id).state is State.COMPLETED


def test_progress_and_heartbeat_reach_storage_from_an_executor(pool_app):
    job = pool_app.enqueue("reports", {}, key="nightly@2026-12-01T00:00:00+00:00")  # a tick's
    work(pool_app)
    got = pool_app.get_job(job.id)
    assert got.result == "ok" and got.progress == {"attempt": 1, "fence": 1, "tick": 1796083200.0}


def test_an_app_that_is_not_importable__is_refused_with_a_way_out(tmp_path):
    with (
        App(f"sqlite:///{tmp_path / 'x.db'}") as app,
        pytest.raises(InvalidInput, match="pool='thread'"),
    ):
        Supervisor(app, WorkerConfig())


@pytest.mark.parametrize("task", ["nap", "apid"])
def test_two_attempts_of_one_job__each_is_stopped_by_its_fence(pool_app, task):
    # A worker can hold two attempts of one job: the first recovered from under
    # it (it went on running), the second claimed since. Stopping one names it by
    # its fence; each must end at once, not run to its end.
    async def main():
        ends = {}
        pool = ProcessPool(path_of(pool_app), lambda name: pool_app.tasks[name].is_async,
                           _NoRequests(), concurrency=2, async_slots=2)  # fmt: skip
        await pool.start()
        try:
            first = Job(
                id="j", task=task, queue="default", args={"seconds": 5.0},
                state=State.ACTIVE, priority=0, run_at=0.0, created_at=0.0, fence=1,
            )  # fmt: skip
            second = dataclasses.replace(first, fence=2)
            for attempt in (first, second):
                pool.begin(attempt, None, lambda r, _, f=attempt.fence: ends.__setitem__(f, r))
            async with asyncio.timeout(3):
                while sum(len(c.jobs) for c in pool.children) < 2:
                    await asyncio.sleep(0.01)
                pool.stop(("j", 1))
                pool.stop(("j", 2))
                while len(ends) < 2:  # well before either handler returns
                    await asyncio.sleep(0.01)
        finally:
            await pool.close()
        assert ends == {1: Stopped(), 2: Stopped()}

    asyncio.run(main())


@pytest.mark.parametrize("how", ["deadline", "segfault"])
def test_a_job_sent_ahead_to_an_executor_that_dies__runs_on_another(pool_app, how):
    # A busy executor is sent its next job ahead. When the one it runs is
    # killed (its deadline) or crashes, only that one ends so: the job sent
    # ahead never started there, and runs on the replacement.
    async def main():
        ends = {}
        pool = ProcessPool(path_of(pool_app), lambda name: pool_app.tasks[name].is_async,
                           _NoRequests(), concurrency=1)  # fmt: skip
        await pool.start()
        first = pool.children[0]
        try:
            nap = _job("nap", {"seconds": 30.0})
            after = _job("pid", {}, id="after")
            pool.begin(nap, 0.3 if how == "deadline" else None,
                       lambda r, _: ends.__setitem__("nap", r))  # fmt: skip
            pool.begin(after, None, lambda r, _: ends.__setitem__("after", r))
            assert [r.job.id for r in first.line] == ["j", "after"], "not sent ahead"
            if how == "segfault":
                os.kill(first.pid, signal.SIGSEGV)
            async with asyncio.timeout(10):
                while len(ends) < 2:
                    await asyncio.sleep(0.01)
        finally:
            await pool.close()
        crashed = Crashed(f"executor process {first.pid} killed by signal 11")
        assert ends["nap"] == (TimedOut(0.3) if how == "deadline" else crashed)
        assert isinstance(ends["after"], Returned) and ends["after"].value != first.pid

    asyncio.run(main())


def _job(task, args, id="j"):
    return Job(id=id, task=task, queue="default", args=args, state=State.ACTIVE, priority=0,
               run_at=0.0, created_at=0.0, fence=1)  # fmt: skip


class _NoRequests:
    async def progress(self, job, data):
        raise AssertionError("no handler here asks the supervisor anything")

    async def heartbeat(self, job):
        raise AssertionError("no handler here asks the supervisor anything")


def test_a_worker_whose_executors_cannot_start__fails_and_leaves_no_worker_registered(
    tmp_path, monkeypatch
):
    # Its executors start while it registers: a failure to start them comes after.
    url = f"sqlite:///{tmp_path / 'broken.db'}"
    name = f"broken_app_{tmp_path.name.replace('-', '_')}"
    code = f"""
        import os, tenure

        if os.getpid() != {os.getpid()}:
            raise RuntimeError("this module imports in its test only")
        app = tenure.App({url!r})

        @app.task
        def never() -> None: ...
    """
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(code))
    monkeypatch.syspath_prepend(str(tmp_path))
    app = __import__(name).app
    try:
        with pytest.raises(TenureError, match="imports in its test only"):
            asyncio.run(Supervisor(app, WorkerConfig(concurrency=2)).run())
        assert app.workers() == []
    finally:
        app.close()
        sys.modules.pop(name, None)


def test_executors_that_cannot_start__are_forked_again_slower_and_slower(tmp_path, monkeypatch):
    # Every executor forked while the flag file exists dies before it is ready
    # (an at-fork hook of the App's module, in the zygote). The pool forks a
    # replacement after a pause that doubles with each failure, not in a loop
    # that takes a core, and forks a working one once the cause is gone.
    flag, forks = tmp_path / "broken", tmp_path / "forks"
    name = f"refork_app_{tmp_path.name.replace('-', '_')}"
    code = f"""
        import os, time, tenure

        def _fail_if_flagged():
            if os.path.exists({str(flag)!r}):
                with open({str(forks)!r}, "a") as f:
                    f.write(f"{{time.monotonic()}}\\n")
                os._exit(3)

        os.register_at_fork(after_in_child=_fail_if_flagged)
        app = tenure.App({f"sqlite:///{tmp_path / 'refork.db'}"!r})

        @app.task
        def pid() -> int:
            return os.getpid()
    """
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(code))
    monkeypatch.syspath_prepend(str(tmp_path))

    async def main():
        pool = ProcessPool(f"{name}:app", lambda name: False, _NoRequests(), concurrency=1)
        await pool.start()
        try:
            first = pool.children[0]
            flag.touch()
            first.kill()
            failed: list[str] = []
            async with asyncio.timeout(20):
                while len(failed) < 4:
                    await asyncio.sleep(0.02)
                    failed = forks.read_text().split() if forks.exists() else []
            flag.unlink()
            at = [float(t) for t in failed[:4]]
            # after the first failure, pauses of 0.1, 0.2, 0.4 s at least (a
            # loaded machine only makes them longer), not a fork loop
            gaps = [b - a for a, b in itertools.pairwise(at)]
            assert all(g >= 0.9 * p for g, p in zip(gaps, (0.1, 0.2, 0.4), strict=True)), gaps
            async with asyncio.timeout(10):
                while not any(c.ready.done() and not c.ready.exception()
                              for c in pool.children if c is not first):  # fmt: skip
                    await asyncio.sleep(0.02)
        finally:
            await pool.close()

    asyncio.run(main())
