"""The async twins: every App, Queue and Task method from a running event loop."""

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tenure import App, JobNotFound, State


def portal_threads() -> int:
    return sum(t.name == "tenure-portal" for t in threading.enumerate())


def test_the_async_api__runs_on_the_callers_loop_on_every_backend(backend_url):
    app = App(backend_url)

    @app.task(queue="mail")
    def send(to: str, subject: str = "") -> None: ...

    before = portal_threads()

    async def main() -> None:
        async with app:
            first = await send.aenqueue("a@x", subject="hi")
            later = await send.with_options(delay=60).aenqueue(to="b@x")
            many = await send.aenqueue_many([{"to": "c@x"}, {"to": "d@x"}])
            by_name = await app.aenqueue("send", {"to": "e@x"}, key="k")
            assert first.args == {"to": "a@x", "subject": "hi"} and later.state is State.SCHEDULED
            assert (await app.aget_job(first.id)).state is State.QUEUED
            assert (await app.acancel(by_name.id)).state is State.CANCELLED
            assert len(many) == 2 and await app.aqueues() == ["mail"]
            mail = app.queue("mail")
            assert (await mail.acounts())[State.QUEUED] == 3
            assert (await mail.aset_policy(max_attempts=7)).max_attempts == 7
            assert (await mail.apolicy()).max_attempts == 7
            assert len((await mail.ajobs(State.QUEUED)).jobs) == 3
            assert len((await app.ajobs("mail")).jobs) == 5
            assert (await mail.adead()).jobs == []
            assert await mail.aretry_dead() == 0 and await mail.apurge_dead() == 0
            with pytest.raises(JobNotFound):
                await app.aget_job("0190d9b5-0000-7000-8000-000000000000")
            # Its own backend, opened once however many ask at first: no portal thread.
            opened = await asyncio.gather(*(app.abackend() for _ in range(5)))
            assert len({id(b) for b in opened}) == 1
            assert portal_threads() == before

    asyncio.run(main())
    with app:  # the sync facade, alongside
        assert app.queue("mail").counts()[State.QUEUED] == 3
        assert portal_threads() == before + 1
    assert portal_threads() == before


def test_each_event_loop__gets_a_backend_of_its_own(tmp_path):
    app = App(f"sqlite:///{tmp_path / 'a.db'}")
    seen = []

    async def use() -> None:
        async with app:
            seen.append(await app.abackend())
            await app.aenqueue("anything", {})

    asyncio.run(use())
    asyncio.run(use())
    assert seen[0] is not seen[1]
    with app:
        assert app.queue().counts()[State.QUEUED] == 2


def test_first_uses_cancelled_while_opening__do_not_break_the_next_one(tmp_path):
    app = App(f"sqlite:///{tmp_path / 'c.db'}")

    async def main() -> None:
        async with app:
            first = asyncio.ensure_future(app.aqueues())
            await asyncio.sleep(0)
            first.cancel()
            assert await app.aqueues() == []

    asyncio.run(main())


UNCLOSED_APP = Path(__file__).with_name("unclosed_app.py")


def test_asyncio_run__exits_at_once_after_an_app_it_never_closed(backend_url):
    # 50 runs, 5 at a time, each a process forked once tenure is imported; each
    # must be out of asyncio.run within 2 s of its main() returning, with
    # nothing on stderr (no stack dumped by the watchdog, no ResourceWarning).
    done = subprocess.run([sys.executable, str(UNCLOSED_APP), backend_url, "50", "5", "2"],
                          capture_output=True, text=True, timeout=100, check=False)  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["failed"] == 0 and report["runs"] == 50, report
