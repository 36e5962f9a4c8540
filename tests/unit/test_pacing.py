"""The pacing maths of a worker: claims ahead, fuller cycles, gather times and
moving averages, as pure functions of what the worker measured."""

from __future__ import annotations

import math

import pytest

from tenure.backends.base import Capabilities
from tenure.worker.pacing import (
    AVERAGING,
    BATCH_HORIZON,
    MAX_AHEAD_PER_SLOT,
    MAX_AHEAD_PER_SLOT_COSTLY,
    MAX_AHEAD_PER_SLOT_FAIR,
    Pace,
    claims_ahead,
    full_cycle,
    gather_time,
    gathers,
    moving_average,
)

SERVER = Capabilities(remote=True, costly_cycles=False)  # Redis
COSTLY = Capabilities(remote=True, costly_cycles=True)  # PostgreSQL
IN_PROCESS = Capabilities(remote=False, costly_cycles=False)  # SQLite


def ahead(pace: Pace, capabilities: Capabilities, *, slots: int, kept: int, limited: bool) -> int:
    return claims_ahead(pace, capabilities, slots=slots, limited=lambda: limited, kept=lambda: kept)


def test_a_moving_average__starts_at_its_first_sample_and_moves_by_its_weight():
    assert moving_average(None, 2.0) == 2.0
    assert moving_average(1.0, 2.0) == pytest.approx(1.0 + AVERAGING)
    assert moving_average(1.0, 1.0) == 1.0


def test_a_pace__ignores_attempts_that_never_started():
    pace = Pace()
    pace.ran(0.0)
    assert pace.run_time is None
    pace.ran(0.01)
    pace.cycled(0.002)
    assert pace.run_time == 0.01 and pace.cycle_time == pytest.approx(0.002 * AVERAGING)


def test_no_claims_ahead__before_a_pace_or_for_limited_queues():
    assert ahead(Pace(), SERVER, slots=4, kept=0, limited=False) == 0
    short = Pace(run_time=1e-5, cycle_time=1e-3)
    assert ahead(short, SERVER, slots=4, kept=0, limited=True) == 0


def test_on_a_server__claims_ahead_cover_one_round_trip_of_work():
    # 4 slots, jobs of 1 ms, cycles of 2 ms: 8 jobs start within a round trip
    pace = Pace(run_time=0.001, cycle_time=0.002)
    assert ahead(pace, SERVER, slots=4, kept=0, limited=False) == 8
    assert ahead(pace, SERVER, slots=4, kept=12, limited=False) == 20  # the executor's own


def test_in_process__claims_ahead_cover_the_batch_horizon():
    pace = Pace(run_time=BATCH_HORIZON / 2, cycle_time=1.0)  # a slow cycle does not count here
    assert ahead(pace, IN_PROCESS, slots=3, kept=0, limited=False) == 6


def test_long_jobs__get_no_claims_ahead_nor_the_executors_own():
    pace = Pace(run_time=0.1, cycle_time=0.001)
    assert ahead(pace, SERVER, slots=2, kept=6, limited=False) == 0


@pytest.mark.parametrize(
    ("capabilities", "cap"), [(SERVER, MAX_AHEAD_PER_SLOT), (COSTLY, MAX_AHEAD_PER_SLOT_COSTLY)]
)
def test_claims_ahead__are_capped_per_slot(capabilities: Capabilities, cap: int):
    pace = Pace(run_time=1e-7, cycle_time=0.01)
    assert ahead(pace, capabilities, slots=2, kept=0, limited=False) == 2 * cap


@pytest.mark.parametrize("capabilities", [SERVER, COSTLY, IN_PROCESS])
def test_claims_ahead_of_a_fair_queue__are_capped_lower(capabilities: Capabilities):
    """A key's jobs claimed ahead start before those of a key that comes after
    them: serving a fair queue, few wait (issue 39's fairness)."""
    pace = Pace(run_time=1e-7, cycle_time=0.01)
    fair = claims_ahead(pace, capabilities, slots=4, limited=lambda: False, kept=lambda: 40,
                        fair=lambda: True)  # fmt: skip
    assert fair == 4 * MAX_AHEAD_PER_SLOT_FAIR < ahead(pace, capabilities, slots=4, kept=40,
                                                       limited=False)  # fmt: skip


def test_a_full_cycle__is_the_slots_or_with_costly_cycles_a_full_claim():
    assert full_cycle(SERVER, slots=4, ahead=10) == 4
    assert full_cycle(COSTLY, slots=4, ahead=10) == 14


def test_only_cheap_round_trips__never_gather():
    assert not gathers(SERVER)
    assert gathers(COSTLY) and gathers(IN_PROCESS)


def test_a_cycle_gathers__only_while_more_wait_for_a_slot_than_there_are_slots():
    assert gather_time(slots=4, unbegun=4, held_since=None, now=10.0) == 0.0
    assert gather_time(slots=4, unbegun=5, held_since=None, now=10.0) == math.inf
    held = gather_time(slots=4, unbegun=5, held_since=10.0, now=10.001)
    assert held == pytest.approx(BATCH_HORIZON - 0.001)
    assert gather_time(slots=4, unbegun=5, held_since=10.0, now=11.0) < 0  # overdue: go now
