"""Following lifecycle events through the App and the CLI; events kept across
a restart of the storage server."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import threading
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tenure import App, Event, InvalidInput, QueuePolicy
from tenure.chaos.lab import Lab
from tenure.cli import cli
from tests.conformance.helpers import enqueue_one
from tests.conftest import fresh_storage_url
from tests.servers import RedisServer


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    with App(fresh_storage_url(request.param, request, tmp_path)) as a:
        yield a


def test_events__end_after_timeout_without_one_and_resume_after_an_id(app: App) -> None:
    first = app.enqueue("t", {"n": 1})
    [enqueued] = list(app.events(timeout=0))
    assert isinstance(enqueued, Event)
    assert (enqueued.kind, enqueued.job_id, enqueued.queue) == ("enqueued", first.id, "default")
    assert list(app.events(after=enqueued.id, timeout=0.05)) == []
    second = app.enqueue("t", {"n": 2}, queue="other")
    assert [e.job_id for e in app.events(after=enqueued.id, timeout=0)] == [second.id]
    assert [e.job_id for e in app.events(queue="default", timeout=0)] == [first.id]


def test_events__wait_for_the_next_one_while_another_thread_enqueues(app: App) -> None:
    timer = threading.Timer(0.2, lambda: app.enqueue("t", {}))
    timer.start()
    try:
        found = next(iter(app.events(timeout=10)))
    finally:
        timer.join()
    assert found.kind == "enqueued"


def test_aevents__follows_the_same_events(app: App) -> None:
    jobs = app.enqueue_many("t", [{"n": i} for i in range(3)])

    async def read() -> list[Event]:
        try:
            return [e async for e in app.aevents(timeout=0)]
        finally:
            await app.aclose()  # this loop's backend: it ends with asyncio.run

    assert [e.job_id for e in asyncio.run(read())] == [j.id for j in jobs]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"timeout": -1}, "timeout"), ({"after": 5}, "after"), ({"queue": "a b"}, "queue")],
)
def test_bad_arguments_to_events__are_invalid_input(app: App, kwargs: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        app.events(**kwargs)


def test_events_off_for_a_queue__only_that_queue_is_silent(app: App) -> None:
    app.queue("quiet").set_policy(events=False)
    app.enqueue("t", {}, queue="quiet")
    loud = app.enqueue("t", {}, queue="loud")
    assert [e.job_id for e in app.events(timeout=0)] == [loud.id]
    assert app.queue("quiet").policy().events is False


def test_the_lua_default_of_events_kept__is_the_policy_default() -> None:
    lib = resources.files("tenure.backends.redis").joinpath("scripts/_lib.lua").read_text()
    match = re.search(r"local EVENTS_MAX_COUNT = (\d+)", lib)
    assert match and int(match.group(1)) == QueuePolicy().events_max_count


def test_events_held_back_by_another_databases_transaction__are_read_without_a_timeout(
    postgres_server: Any,
) -> None:
    import psycopg

    from tenure.backends import from_url

    other = psycopg.connect(from_url(postgres_server.new_database()).conninfo)  # type: ignore[attr-defined]
    url = postgres_server.new_database()
    with App(url) as app, other:
        other.execute("SELECT pg_current_xact_id()")  # older than the enqueue's, still running
        job = app.enqueue("t", {})
        ending = threading.Timer(0.3, other.commit)
        ending.start()
        try:
            assert [e.job_id for e in app.events(timeout=0)] == [job.id]
        finally:
            ending.join()


def held_open(postgres_server: Any) -> Any:
    """A transaction of another database, running until committed: it holds back
    the server's horizon, as any client's transaction can."""
    import psycopg

    from tenure.backends import from_url

    other = psycopg.connect(from_url(postgres_server.new_database()).conninfo)  # type: ignore[attr-defined]
    other.execute("SELECT pg_current_xact_id()")
    return other


def test_a_read__returns_every_event_recorded_before_it_though_some_are_held_back(
    postgres_server: Any, open_backend: Any
) -> None:
    backend = open_backend(postgres_server.new_database())
    first = enqueue_one(backend)  # below the horizon: readable at once
    with held_open(postgres_server) as other:
        second = enqueue_one(backend)  # above it, until `other` ends
        ending = threading.Timer(0.3, other.commit)
        ending.start()
        try:
            assert [e.job_id for e in backend.read_events(None, None, 10)] == [first.id, second.id]
        finally:
            ending.join()


def test_events_now__while_an_older_transaction_runs__is_after_what_was_recorded_before(
    postgres_server: Any, open_backend: Any
) -> None:
    backend = open_backend(postgres_server.new_database())
    with held_open(postgres_server) as other:
        job = enqueue_one(backend)
        ending = threading.Timer(0.3, other.commit)
        ending.start()
        try:
            now = backend.events_now("default")
        finally:
            ending.join()
    later = enqueue_one(backend)
    assert [e.job_id for e in backend.read_events(None, None, 10)] == [job.id, later.id]
    assert [e.job_id for e in backend.read_events("default", now, 10)] == [later.id]


# -- after a restart of the storage server ---------------------------------------


def test_a_postgres_restart__keeps_the_events_and_a_reader_resumes(
    postgres_server: Any,
) -> None:
    url = postgres_server.new_database()
    with App(url) as app:
        jobs = app.enqueue_many("t", [{"n": i} for i in range(5)])
        kept = list(app.events(timeout=0))
        postgres_server.restart()
        after = app.enqueue("t", {"n": 5})
        assert [e.job_id for e in app.events(after=kept[2].id, timeout=0)] == [
            *(j.id for j in jobs[3:]),
            after.id,
        ]
    with App(url) as reader:  # a reader that restarted too
        assert list(reader.events(timeout=0))[:5] == kept


def test_a_redis_restart__keeps_what_its_append_only_file_kept() -> None:
    server = RedisServer(appendonly=True)
    try:
        with App(server.url) as app:
            jobs = app.enqueue_many("t", [{"n": i} for i in range(5)])
            kept = list(app.events(timeout=0))
            server.restart()
            after = app.enqueue("t", {"n": 5})
            assert [e.job_id for e in app.events(after=kept[2].id, timeout=0)] == [
                *(j.id for j in jobs[3:]),
                after.id,
            ]
            assert list(app.events(timeout=0))[:5] == kept
    finally:
        server.close()


# -- the CLI ------------------------------------------------------------------------


def test_tenure_events__prints_them_one_a_line_and_as_json(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    with App(url) as app:
        job = app.enqueue("send", {"to": "a"})
    runner = CliRunner()
    text = runner.invoke(cli, ["--url", url, "events"])
    assert text.exit_code == 0, text.output
    assert re.fullmatch(
        rf"\S+ 1 default enqueued {job.id} {{\"task\":\"send\",\"state\":\"queued\"}}\n",
        text.output,
    )
    as_json = runner.invoke(cli, ["--url", url, "events", "--json", "--queue", "default"])
    [line] = as_json.output.splitlines()
    assert json.loads(line) | {"at": 0} == {
        "id": "1", "kind": "enqueued", "job_id": job.id, "queue": "default", "at": 0,
        "data": {"task": "send", "state": "queued"},
    }  # fmt: skip


def test_tenure_events_with_a_bad_id__is_one_error_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    with App(url) as app:
        app.enqueue("t", {})
    result = CliRunner().invoke(cli, ["--url", url, "events", "--after", "nope"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "error: bad event id 'nope': pass back an event's id"
    ]


# -- each detector, from a real fault of a real worker --------------------------------


def _stalled(lab: Lab, job_id: str) -> list[Event]:
    return [e for e in lab.app.events(queue=lab.queue, timeout=0)
            if e.job_id == job_id and e.kind == "stalled"]  # fmt: skip


@pytest.mark.parametrize("backend_kind", ["sqlite", "postgres", "redis"])
@pytest.mark.parametrize("detector", ["executor_died", "deadline", "worker_gone", "lease_expired"])
def test_a_real_fault__records_stalled_with_the_detector_that_saw_it(
    request: pytest.FixtureRequest, tmp_path: Path, backend_kind: str, detector: str
) -> None:
    url = fresh_storage_url(backend_kind, request, tmp_path)
    policy: dict[str, Any] = {"lease_ttl": 1.0, "heartbeat_interval": 0.2, "sweep_interval": 0.1}
    if detector == "deadline":
        policy["timeout"] = 0.5
    with Lab(url, "events", **policy) as lab:
        doomed = lab.worker("--concurrency", "1")
        job = lab.enqueue("chaos.sleep", seconds=30)
        _, executor = lab.wait("the handler to start", lambda: lab.running_on(job.id))
        if detector == "executor_died":
            os.kill(executor, signal.SIGKILL)
        elif detector == "worker_gone":
            os.killpg(doomed.pid, signal.SIGKILL)
            lab.worker("--concurrency", "1")  # its sweeper recovers the job
        elif detector == "lease_expired":
            os.killpg(doomed.pid, signal.SIGSTOP)  # alive to storage, silent: the lease runs out
            lab.worker("--concurrency", "1")
        [stalled] = lab.wait("the stall's event", lambda: _stalled(lab, job.id) or None, timeout=30)
        if detector in ("executor_died", "deadline"):  # the supervisor saw it
            assert stalled.data == {"detector": detector}
        else:  # a sweep: whose attempt, silent for how long since its last proof of life
            assert stalled.data.keys() == {"detector", "worker", "silent_for"}
            assert stalled.data["detector"] == detector
            assert stalled.data["worker"] == lab.job(job.id).history[0].worker
            silent_for = stalled.data["silent_for"]
            assert silent_for >= (1.0 if detector == "lease_expired" else 0.0)
        if detector == "lease_expired":
            os.killpg(doomed.pid, signal.SIGCONT)
