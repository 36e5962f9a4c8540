"""The detectors as components: one run_once() each, driven by an injected clock."""

import asyncio
import os

import pytest

from tenure.backends.base import WorkerInfo
from tenure.backends.sqlite import SQLiteBackend
from tenure.core.clock import FakeClock
from tenure.core.states import Outcome, State
from tenure.job import JobSpec
from tenure.worker.identity import Identity
from tenure.worker.leases import LeaseKeeper
from tenure.worker.sweeper import RETRY_PAST_GUARD, Sweeper


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def make_backend(tmp_path, clock):
    opened = []

    async def make():
        b = SQLiteBackend(str(tmp_path / "d.db"), clock=clock)
        await b.open()
        opened.append(b)
        return b

    yield make
    for b in opened:
        asyncio.run(b.close())


def run(coro):
    return asyncio.run(coro)


async def claimed(backend, worker="w1"):
    await backend.register_worker(WorkerInfo(worker, "host", os.getpid(), ("default",)))
    await backend.enqueue([JobSpec.create("t", {})])
    [job] = await backend.claim(worker, ["default"], 1)
    return job


def test_the_sweeper_recovers_an_expired_lease_without_anyone_sleeping(make_backend, clock):
    async def scenario():
        backend = await make_backend()
        job = await claimed(backend)
        sweeper = Sweeper(backend, interval=1.0)
        assert (await sweeper.run_once()).rescued == ()
        clock.advance(15.0)  # the default lease runs out, judged by storage's clock
        report = await sweeper.run_once()
        assert [(r.job_id, r.outcome) for r in report.rescued] == [(job.id, Outcome.STALLED)]
        return await backend.get(job.id)

    got = run(scenario())
    assert got.state is State.QUEUED and got.stalls == 1


def test_one_sweep_per_interval_across_sweepers(make_backend, clock):
    async def scenario():
        a, b = await make_backend(), await make_backend()
        first, second = Sweeper(a, interval=1.0), Sweeper(b, interval=1.0)
        swept = [(await first.run_once()).swept, (await second.run_once()).swept]
        clock.advance(1.0)
        swept.append((await second.run_once()).swept)
        return swept

    assert run(scenario()) == [True, False, True]


def test_a_refused_sweeper__tries_again_as_soon_as_a_sweep_is_allowed(make_backend, clock):
    """Not a whole interval later: if the last sweep was that of a worker that
    died just after, its jobs would wait up to two intervals."""

    async def scenario():
        a, b = await make_backend(), await make_backend()
        first, second = Sweeper(a, interval=1.0), Sweeper(b, interval=1.0)
        waits = [first._wait_after(await first.run_once())]
        clock.advance(0.6)
        refused = await second.run_once()
        waits.append(second._wait_after(refused))
        clock.advance(waits[-1])
        waits.append(second._wait_after(await second.run_once()))
        return refused.swept, waits

    swept, waits = run(scenario())
    assert not swept
    assert waits[0] == 1.0 and waits[2] == 1.0  # after a sweep: an interval
    assert waits[1] == pytest.approx(0.9 - 0.6 + RETRY_PAST_GUARD)  # the guard's 0.9 x interval


class Held:
    """The attempts a keeper renews the leases of: one each, until its lease is lost."""

    def __init__(self, on_lost):
        self.leases = {}

        def lease_lost(lease):
            if self.leases.pop(lease, None) is not None:
                on_lost()

        self.lease_lost = lease_lost

    def held(self):
        return set(self.leases)

    def cancel_requested(self, lease):
        pass


def test_the_lease_keeper_renews_and_reports_a_lost_lease_to_its_attempt(make_backend, clock):
    async def scenario():
        backend = await make_backend()
        job = await claimed(backend)
        lost = []
        holder = Held(lambda: lost.append(job.id))
        keeper = LeaseKeeper(backend, Identity("w1"), holder, interval=2.0)
        holder.leases[job.id, job.fence] = job
        clock.advance(10.0)
        assert await keeper.run_once() == set()  # renewed: expires 15 s from now
        renewed = (await backend.get(job.id)).lease_expires_at
        clock.advance(14.0)
        assert (await backend.rescue()).rescued == ()  # still held
        clock.advance(2.0)  # frozen past expiry: the sweeper recovers it
        assert (await backend.rescue()).rescued
        assert await keeper.run_once() == {(job.id, job.fence)}
        return renewed, lost, keeper.held

    renewed, lost, held = run(scenario())
    assert renewed == FakeClock().now() + 10.0 + 15.0
    assert lost and held == set()


def test_a_sweep_that_dead_letters_a_job__tells_on_dead(make_backend, clock):
    async def scenario():
        backend = await make_backend()
        await backend.change_policy("default", {"max_stalls": 1})
        job = await claimed(backend)
        told: list[str] = []

        sweeper = Sweeper(backend, interval=1.0, on_dead=told.append)
        clock.advance(15.0)
        await sweeper.run_once()
        return job, told, await backend.get(job.id)

    job, told, got = run(scenario())
    assert got.state is State.DEAD and told == [job.id]


def test_a_sweep_logs_each_recovery__with_its_detector_worker_and_silence(
    make_backend, clock, caplog
):
    async def scenario():
        backend = await make_backend()
        job = await claimed(backend)
        clock.advance(16.0)  # the default 15 s lease ran out a second ago
        await Sweeper(backend, interval=1.0).run_once()
        return job

    with caplog.at_level("WARNING", logger="tenure.sweeper"):
        job = run(scenario())
    [record] = caplog.records
    assert record.getMessage() == (
        f"recovered job {job.id} (t) of worker w1: lease_expired, 16.0 s after its last "
        "lease renewal; now queued"
    )
    assert (record.job_id, record.worker, record.queue, record.task) == (
        job.id,
        "w1",
        "default",
        "t",
    )
    assert (record.detector, record.silent_for) == ("lease_expired", 16.0)
