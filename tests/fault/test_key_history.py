"""The per-key rule of the history checker (``key_history.py``) on small
made-up histories: it fires when one key's handlers run above the limit, and
stays zero when they take turns, when a killed or recovered attempt gave its
slot up before the next start, and for keys of a queue without a limit."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.fault import history as h
from tests.fault import key_history as kh
from tests.fault.test_history import T0, W1, W2, attempt, failed, job, run_of

LIMIT = {"q": 2}


def keyed(run: h.Run, keys: dict[str, str], limits: dict[str, int] = LIMIT) -> h.Run:
    """``run`` with each request's concurrency key as ``keys`` says, and the limits."""
    requests = [dataclasses.replace(r, concurrency_key=keys.get(r.tag)) for r in run.requests]
    return dataclasses.replace(run, requests=requests, key_limits=limits)


def jobs_of(*specs: tuple[str, float, float], key: Any = "c-1", **kw: Any) -> dict[str, Any]:
    """Completed jobs ``(id, start, end)`` with one attempt each, of ``key``."""
    return {
        i: job(i, attempt(1, W1, s, e + 0.05, "completed"), concurrency_key=key, **kw)
        for i, s, e in specs
    }


def test_one_keys_handlers_taking_turns__are_within_the_limit() -> None:
    run = run_of(("a", 1, 11, 0.0, 1.0), ("b", 1, 11, 0.1, 1.0), ("c", 1, 22, 1.0, 2.0))
    jobs = jobs_of(("a", 0.0, 1.0), ("b", 0.1, 1.0), ("c", 1.0, 2.0))
    report = h.check(keyed(run, dict.fromkeys("abc", "c-1")), jobs)
    assert failed(report) == {}
    assert report.as_dict()["  most of one key running at once"] == 2


def test_three_handlers_of_one_key_at_once__fire_the_rule() -> None:
    run = run_of(("a", 1, 11, 0.0, 1.0), ("b", 1, 11, 0.1, 1.0), ("c", 1, 22, 0.5, 2.0))
    jobs = jobs_of(("a", 0.0, 1.0), ("b", 0.1, 1.0), ("c", 0.5, 2.0))
    report = h.check(keyed(run, dict.fromkeys("abc", "c-1")), jobs)
    assert failed(report) == {kh.KEY_OVER: 1}
    [example] = report.violations()[0].examples
    assert "key 'c-1' of q: 3 handlers ran" in example


def test_other_keys_and_unkeyed_jobs__do_not_count_against_a_key() -> None:
    run = run_of(("a", 1, 11, 0.0, 1.0), ("b", 1, 11, 0.1, 1.0), ("c", 1, 22, 0.2, 1.0),
                 ("d", 1, 22, 0.3, 1.0))  # fmt: skip
    jobs = {**jobs_of(("a", 0.0, 1.0), ("b", 0.1, 1.0)), **jobs_of(("c", 0.2, 1.0), key="c-2"),
            **jobs_of(("d", 0.3, 1.0), key=None)}  # fmt: skip
    assert failed(h.check(keyed(run, {"a": "c-1", "b": "c-1", "c": "c-2"}), jobs)) == {}


def test_a_queue_without_a_per_key_limit__is_not_judged() -> None:
    run = run_of(*[(t, 1, 11, 0.0, 1.0) for t in "abc"])
    jobs = jobs_of(*[(t, 0.0, 1.0) for t in "abc"])
    assert failed(h.check(keyed(run, dict.fromkeys("abc", "c-1"), {}), jobs)) == {}


def test_a_killed_attempts_slot__is_free_from_its_kill_and_recovery() -> None:
    """``a``'s worker is killed at 0.5 (its handler's last tick at 0.4) and
    recovered at 0.9; ``c`` starts at 1.0: two at most, never three."""
    kill = h.Fault("kill-worker", T0 + 0.5, T0 + 0.6, worker_pid=101, pids=(11,))
    run = run_of(("a", 1, 11, 0.0, None), ("b", 1, 22, 0.1, 2.0), ("c", 1, 22, 1.0, 2.0),
                 ("a", 2, 22, 1.1, 1.5), faults=[kill], wall_minus_mono=T0)  # fmt: skip
    first, second = attempt(1, W1, 0.0, 0.9, "crashed"), attempt(2, W2, 1.1, 1.6, "completed")
    jobs = {"a": job("a", first, second, concurrency_key="c-1"),
            **jobs_of(("b", 0.1, 2.0), ("c", 1.0, 2.0))}  # fmt: skip
    report = h.check(keyed(run, dict.fromkeys("abc", "c-1")), jobs)
    assert failed(report) == {kh.KEY_OVER: 1}  # a's second attempt is the third
    later = attempt(2, W2, 2.0, 2.6, "completed")
    jobs["a"] = dataclasses.replace(jobs["a"], history=(first, later), finished_at=T0 + 2.6)
    run = run_of(("a", 1, 11, 0.0, None), ("b", 1, 22, 0.1, 2.0), ("c", 1, 22, 1.0, 2.0),
                 ("a", 2, 22, 2.0, 2.5), faults=[kill], wall_minus_mono=T0)  # fmt: skip
    assert failed(h.check(keyed(run, dict.fromkeys("abc", "c-1")), jobs)) == {}


def test_a_frozen_handler_that_ran_on__gave_its_slot_up_at_its_recovery() -> None:
    """``a``'s worker is stopped from 0.2 to 3.0, recovered at 2.2; its handler
    returns at 3.1. ``c`` started at 2.5, within the limit of storage's count."""
    stop = h.Fault("stop-long", T0 + 0.2, T0 + 3.0, worker_pid=101, pids=(11,))
    run = run_of(("a", 1, 11, 0.0, 3.1), ("b", 1, 22, 0.1, 4.0), ("c", 1, 22, 2.5, 4.0),
                 faults=[stop], wall_minus_mono=T0)  # fmt: skip
    jobs = {"a": job("a", attempt(1, W1, 0.0, 2.2, "stalled"), concurrency_key="c-1"),
            **jobs_of(("b", 0.1, 4.0), ("c", 2.5, 4.0))}  # fmt: skip
    assert kh.KEY_OVER not in failed(h.check(keyed(run, dict.fromkeys("abc", "c-1")), jobs))
    unexplained = dataclasses.replace(run, faults=[])
    assert failed(h.check(keyed(unexplained, dict.fromkeys("abc", "c-1")), jobs))[kh.KEY_OVER]


def test_a_job_stored_without_its_concurrency_key__fires_the_rule() -> None:
    run = run_of(("a", 1, 11, 0.0, 1.0))
    jobs = jobs_of(("a", 0.0, 1.0), key=None)
    assert failed(h.check(keyed(run, {"a": "c-1"}), jobs)) == {kh.KEY_LOST: 1}
