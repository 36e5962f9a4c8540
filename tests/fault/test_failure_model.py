"""The failure model, row by row, with real worker processes and real signals.

Each test runs one ``tenure chaos`` experiment with short leases and handlers,
then asserts on what storage holds: nothing lost, no stale settle accepted, no
start beyond the interrupted attempts, and each recovery within its target.
"""

import pytest

from tenure.chaos.experiments import Report, child, drain, freeze, kill9, slow


def assert_held(report: Report) -> None:
    figures = "\n".join(f"  {f.name}: {f.value:.3f} (target {f.target})" for f in report.figures)
    assert report.ok, f"{report.experiment}: {report.violations}\n{figures}"


def test_a_dead_executor__is_recorded_crashed_and_recovered_at_once(backend_url):
    assert_held(child(backend_url, handler=1.0))


def test_a_killed_worker__is_recovered_from_its_liveness_and_leaves_no_orphan(backend_url):
    assert_held(kill9(backend_url, runs=3, handler=1.5, kill_after=0.3))


def test_a_frozen_worker__is_recovered_at_lease_expiry_and_settles_nothing_on_waking(
    backend_url,
):
    assert_held(freeze(backend_url, lease_ttl=1.0))


def test_slow_healthy_handlers_holding_the_gil__are_never_taken_for_stalled(backend_url):
    assert_held(slow(backend_url, lease_ttl=0.5, factor=5))


def test_a_drain_shorter_than_the_handler__hands_back_one_copy(backend_url):
    assert_held(drain(backend_url, handler=3.0, budget=0.5))


@pytest.mark.soak
def test_the_published_kill9_methodology(backend_url):
    assert_held(kill9(backend_url, runs=3, handler=8.0, kill_after=2.0))
