"""Concurrency keys on the command line (issue 39): ``tenure enqueue
--concurrency-key/--debounce/--unique-for``, the per-key fields of ``tenure
policy`` and ``tenure queue keys``, on a temporary SQLite database; in-process,
and one run of the console script."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tenure.app import App
from tenure.backends.base import WorkerInfo
from tests.integration.test_cli import (
    TENURE,
    as_json,
    assert_one_line_error,
    enqueue,
    ok,
    tenure,
    url,
)

__all__ = ["tenure", "url"]  # fixtures

LIMITS = {"max_active_per_key": None, "rate_limit_per_key": None, "rate_interval_per_key": 1.0,
          "fair": False}  # fmt: skip


def test_enqueue_with_a_concurrency_key__stores_it_on_the_job(tenure: Any) -> None:
    job_id = enqueue(tenure, "report", "--concurrency-key", "customer-42", "--queue", "q")
    assert as_json(tenure("job", job_id, "--json"))["concurrency_key"] == "customer-42"
    assert "concurrency key  customer-42" in ok(tenure("job", job_id)).stdout
    plain = enqueue(tenure, "report", "--queue", "q")
    assert as_json(tenure("job", plain, "--json"))["concurrency_key"] is None


def test_enqueue_with_debounce__replaces_the_waiting_jobs_arguments(tenure: Any) -> None:
    first = enqueue(tenure, "reindex", "--key", "tenant-7", "--debounce", "60",
                    "--args", '{"n": 1}')  # fmt: skip
    again = enqueue(tenure, "reindex", "--key", "tenant-7", "--debounce", "60",
                    "--args", '{"n": 2}')  # fmt: skip
    assert again == first
    job = as_json(tenure("job", first, "--json"))
    assert (job["state"], job["args"]) == ("scheduled", {"n": 2})


def test_enqueue_with_unique_for__returns_the_keys_job(tenure: Any) -> None:
    first = enqueue(tenure, "sync", "--key", "nightly", "--unique-for", "3600")
    assert enqueue(tenure, "sync", "--key", "nightly", "--unique-for", "3600") == first


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--debounce", "5"], "debounce needs a key"),
        (["--unique-for", "5"], "unique_for needs a key"),
        (["--key", "k", "--debounce", "-1"], "debounce must be"),
        (["--key", "k", "--debounce", "1", "--delay", "2"], "give debounce or delay/run_at"),
        (["--concurrency-key", "x" * 129], "invalid concurrency_key"),
        (["--concurrency-key", "a\tb"], "invalid concurrency_key"),
    ],
)
def test_enqueue_with_a_bad_key_option__is_one_clear_error_and_stores_nothing(
    tenure: Any, args: list[str], fragment: str
) -> None:
    assert_one_line_error(tenure("enqueue", "t", *args), fragment)
    assert as_json(tenure("status", "--json")) == {}


def test_policy__sets_and_shows_the_per_key_fields(tenure: Any) -> None:
    assert {k: as_json(tenure("policy", "get", "--json"))[k] for k in LIMITS} == LIMITS
    ok(tenure("policy", "set", "-q", "q", "max_active_per_key=2", "rate_limit_per_key=5",
              "rate_interval_per_key=0.5", "fair=true"))  # fmt: skip
    got = as_json(tenure("policy", "get", "-q", "q", "--json"))
    assert {k: got[k] for k in LIMITS} == {"max_active_per_key": 2, "rate_limit_per_key": 5,
                                           "rate_interval_per_key": 0.5, "fair": True}  # fmt: skip
    assert "max_active_per_key" in ok(tenure("policy", "get", "-q", "q")).stdout


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ("max_active_per_key=0", "max_active_per_key"),
        ("rate_limit_per_key=1.5", "rate_limit_per_key"),
        ("rate_interval_per_key=0", "rate_interval_per_key"),
        ("fair=maybe", "fair"),
    ],
)
def test_policy_set_with_a_per_key_field_out_of_bounds__is_refused(
    tenure: Any, change: str, fragment: str
) -> None:
    assert_one_line_error(tenure("policy", "set", "-q", "q", change), fragment)
    got = as_json(tenure("policy", "get", "-q", "q", "--json"))
    assert {k: got[k] for k in LIMITS} == LIMITS


def test_queue_keys__lists_queued_and_active_jobs_per_key_with_the_limits(
    tenure: Any, url: str
) -> None:
    for key in ("a", "a", "a", "b"):
        enqueue(tenure, "t", "--queue", "q", "--concurrency-key", key)
    enqueue(tenure, "t", "--queue", "q")
    with App(url) as app:
        assert app.backend is not None
        app.call(app.backend.register_worker(WorkerInfo("w-1", "host", 4242, ("q",))))
        [claimed] = app.call(app.backend.claim("w-1", ["q"], 1))
    assert claimed.concurrency_key == "a"  # the first enqueued
    ok(tenure("policy", "set", "-q", "q", "max_active_per_key=2", "fair=true"))
    found = as_json(tenure("queue", "keys", "q", "--json"))
    assert found["queue"] == "q"
    assert found["limits"] == {**LIMITS, "max_active_per_key": 2, "fair": True}
    assert found["keys"][0] == {"key": "a", "queued": 2, "active": 1}
    assert sorted(found["keys"][1:], key=str) == sorted(
        [{"key": "b", "queued": 1, "active": 0}, {"key": None, "queued": 1, "active": 0}], key=str
    )
    assert as_json(tenure("queue", "keys", "q", "--json", "--limit", "1"))["keys"] == [
        {"key": "a", "queued": 2, "active": 1}
    ]
    table = ok(tenure("queue", "keys", "q")).stdout
    assert "max_active_per_key=2" in table
    assert "fair=True" in table
    for cell in ("key", "queued", "active", "(no key)", " b "):
        assert cell in table


def test_queue_keys_of_an_empty_queue__says_so(tenure: Any) -> None:
    out = ok(tenure("queue", "keys", "nothing")).stdout
    assert "max_active_per_key=none" in out
    assert "no queued or active jobs" in out
    assert_one_line_error(tenure("queue", "keys", "bad queue!"), "invalid queue name")
    assert_one_line_error(tenure("queue", "keys", "q", "--limit", "0"), "0", code=2)


def test_console_script__enqueues_with_a_concurrency_key_and_lists_it(url: str) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(TENURE), "--url", url, *args], check=False,
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    for _ in range(2):
        enqueued = run("enqueue", "t", "-q", "q", "--concurrency-key", "customer-42")
        assert enqueued.returncode == 0, enqueued.stderr
    listed = run("queue", "keys", "q", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["keys"] == [{"key": "customer-42", "queued": 2, "active": 0}]
