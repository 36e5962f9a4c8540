"""The operator's commands (workers, queue pause|resume|delete, health) on a
temporary SQLite database, in-process."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from tenure.app import App
from tenure.backends.base import WorkerInfo
from tenure.chaos.lab import Lab
from tenure.cli import cli
from tests.conformance.helpers import wait_for
from tests.integration.test_cli import as_json, assert_one_line_error, enqueue, ok, tenure, url

__all__ = ["tenure", "url"]  # fixtures


@pytest.fixture
def worker_app(url: str) -> Iterator[App]:
    """An App with a worker registered on this host (alive while the App is open)."""
    app = App(url)
    assert app.backend is not None
    info = WorkerInfo("w-1", socket.gethostname(), 4242, ("default", "q"))
    app.call(app.backend.register_worker(info))
    yield app
    app.close()


def test_workers__lists_each_worker_with_the_leases_it_holds(tenure: Any, worker_app: App) -> None:
    enqueue(tenure, "t")
    enqueue(tenure, "t")
    assert worker_app.backend is not None
    worker_app.call(worker_app.backend.claim("w-1", ["default"], 1))
    [listed] = as_json(tenure("workers", "--json"))
    assert {k: listed[k] for k in ("id", "host", "pid", "queues", "leases")} == {
        "id": "w-1", "host": socket.gethostname(), "pid": 4242, "queues": ["default", "q"],
        "leases": 1,
    }  # fmt: skip
    table = ok(tenure("workers")).stdout
    for header in ("id", "host", "pid", "queues", "started", "leases", "last heartbeat"):
        assert header in table
    assert "w-1" in table


def test_workers_without_any__says_so(tenure: Any) -> None:
    assert ok(tenure("workers")).stdout.strip() == "no workers"


def test_queue_pause_then_resume__flips_the_policy_and_enqueues_still_land(tenure: Any) -> None:
    assert "paused" in ok(tenure("queue", "pause", "q")).stdout
    assert as_json(tenure("policy", "get", "-q", "q", "--json"))["paused"] is True
    enqueue(tenure, "t", "--queue", "q")
    assert as_json(tenure("status", "--json"))["q"]["queued"] == 1
    ok(tenure("queue", "resume", "q"))
    assert as_json(tenure("policy", "get", "-q", "q", "--json"))["paused"] is False


def test_queue_delete__needs_yes_then_deletes_the_queue_and_its_jobs(tenure: Any) -> None:
    enqueue(tenure, "t", "--queue", "q")
    enqueue(tenure, "t", "--queue", "q", "--delay", "60")
    enqueue(tenure, "t")
    assert_one_line_error(tenure("queue", "delete", "q"), "pass --yes")
    assert as_json(tenure("status", "--json"))["q"]["queued"] == 1
    assert ok(tenure("queue", "delete", "q", "--yes")).stdout.strip() == (
        "deleted queue 'q' and its 2 job(s)"
    )
    assert set(as_json(tenure("status", "--json"))) == {"default"}


def test_queue_delete_with_an_active_job__is_refused(tenure: Any, worker_app: App) -> None:
    enqueue(tenure, "t", "--queue", "q")
    assert worker_app.backend is not None
    worker_app.call(worker_app.backend.claim("w-1", ["q"], 1))
    assert_one_line_error(tenure("queue", "delete", "q", "--yes"), "1 active job(s)", "pause it")
    assert as_json(tenure("status", "--json"))["q"]["active"] == 1


def test_health_with_a_worker_heartbeating_here__exits_0(tenure: Any, worker_app: App) -> None:
    assert ok(tenure("health")).stdout.startswith("healthy: 1 worker(s) alive on")


def test_health_without_a_worker_here__exits_1_saying_why(tenure: Any, worker_app: App) -> None:
    assert_one_line_error(tenure("health", "--host", "elsewhere"), "no worker registered")
    assert ok(tenure("health", "--storage-only")).stdout.strip() == "healthy: storage answers"


def test_health_when_the_last_heartbeat_is_old__exits_1_saying_why(
    tenure: Any, worker_app: App
) -> None:
    stale = wait_for(lambda: (r := tenure("health", "--max-age", "0.1")).exit_code and r)
    assert_one_line_error(stale, "unhealthy: the last heartbeat", "more than 0.1 s")


def test_health_when_storage_does_not_answer__exits_1_saying_why() -> None:
    result = CliRunner().invoke(cli, ["--url", "redis://127.0.0.1:1/0", "health", "--storage-only"])
    assert_one_line_error(result, "unhealthy: storage does not answer")


def test_a_worker_killed_with_sigkill__is_gone_to_workers_and_health_within_its_lease_ttl(
    backend_url: str,
) -> None:
    """A real worker process, kill -9'd: nobody sweeps (it was the only one), so
    its registration stays; its liveness (the sweeper's test) says it is gone."""
    lease_ttl = 5.0
    policy = {"lease_ttl": lease_ttl, "heartbeat_interval": 0.5, "sweep_interval": 0.2}

    def tenure(*args: str) -> Any:
        return CliRunner().invoke(cli, ["--url", backend_url, *args])

    with Lab(backend_url, "health", **policy) as lab:
        worker = lab.worker("--concurrency", "1", "--pool", "thread")
        lab.wait("the worker to register", lambda: lab.ready(worker))
        lab.wait("a healthy probe", lambda: tenure("health").exit_code == 0)
        [listed] = as_json(tenure("workers", "--json"))
        assert listed["alive"] is True and f".{worker.pid}." in listed["id"]
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        unhealthy = lab.wait(
            "the probe to fail", lambda: (r := tenure("health")).exit_code and r, timeout=lease_ttl
        )
        assert_one_line_error(unhealthy, "unhealthy:", "are gone", listed["id"])
        [gone] = as_json(tenure("workers", "--json"))
        assert (gone["id"], gone["alive"]) == (listed["id"], False)
        assert "gone" in ok(tenure("workers")).stdout
