"""How far ahead a worker claims, and how long a cycle waits to be fuller: pure maths.

A worker claims for its free slots, and, while its jobs are short, ahead of
them: as many more as its slots start within a horizon at the pace they run,
plus those the executor keeps to start itself as its slots free (the thread
executor: three per slot), at most MAX_AHEAD_PER_SLOT per slot
(MAX_AHEAD_PER_SLOT_COSTLY where cycles are costly, on PostgreSQL;
MAX_AHEAD_PER_SLOT_FAIR while a fair queue is served). On a
storage server the horizon is one cycle's round trip, so that a slot freed by
a short job need not wait for one; on storage in the worker's own process
(SQLite), where the cycle is the worker's own work, it is BATCH_HORIZON, so
that one transaction carries many jobs. A job claimed ahead waits for a slot
under its lease; its deadline counts from its start. Long jobs and queues
with ``max_active`` (a job waiting here holds one of the queue's places,
which a free slot elsewhere could use) get no claims ahead. At-most-once
queues do: a worker killed with jobs claimed ahead loses them as it loses
the ones it runs (dead, ``crashed``), and a drain hands them back unrun.

While a cycle is out, the next one waits until it has as much to do as the
worker has slots (slots to claim for plus completions to write), or, where a
cycle costs storage much more than a job (PostgreSQL), as a full claim (slots
plus claims ahead): fewer, fuller round trips, less CPU per job on both sides
(Redis's cheap cycles gain more from overlapping). Without round trips, or
where cycles are costly, while more jobs claimed ahead wait for a slot than
the worker has slots (so every slot stays busy meanwhile), a cycle with none
out waits for them to begin, for up to BATCH_HORIZON after the oldest
completion it would carry.

The figures behind these constants are in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tenure.backends.base import Capabilities

MAX_AHEAD_PER_SLOT = 6  # fewer (1 or 3) drained PostgreSQL slower
MAX_AHEAD_PER_SLOT_COSTLY = 12  # where cycles are costly: fuller cycles
MAX_AHEAD_PER_SLOT_FAIR = 2  # serving a fair queue: a new key's jobs wait behind these
BATCH_HORIZON = 0.005  # seconds of work claimed ahead, or completions held, without round trips
AVERAGING = 0.2  # weight of the newest sample in the moving averages of times


def moving_average(average: float | None, sample: float, weight: float = AVERAGING) -> float:
    """``average`` moved towards ``sample`` by ``weight``; the sample itself at first."""
    return sample if average is None else average + (sample - average) * weight


@dataclass
class Pace:
    """The pace a worker measured: its attempts' run time and its cycles' round
    trip, as moving averages (None: no attempt has ended yet)."""

    run_time: float | None = None
    cycle_time: float = 0.0

    def ran(self, seconds: float) -> None:
        """An attempt ran ``seconds`` (0: it never started, and says nothing)."""
        if seconds > 0:
            self.run_time = moving_average(self.run_time, seconds)

    def cycled(self, seconds: float) -> None:
        """A cycle's round trip took ``seconds``."""
        self.cycle_time = moving_average(self.cycle_time, seconds)


def claims_ahead(
    pace: Pace,
    capabilities: Capabilities,
    *,
    slots: int,
    limited: Callable[[], bool],
    kept: Callable[[], int],
    fair: Callable[[], bool] = lambda: False,
) -> int:
    """How many jobs to claim beyond the free slots. ``limited``: whether a
    queue served has ``max_active``; ``kept``: attempts the
    executor takes beyond its slots; ``fair``: whether a queue served takes
    turns across its keys, whose claims ahead are MAX_AHEAD_PER_SLOT_FAIR
    per slot at most (a key's jobs claimed ahead start before those of a
    key that comes after them). Each asked only when it matters: the cycle loop asks this often."""
    if pace.run_time is None or limited():
        return 0
    horizon = pace.cycle_time if capabilities.remote else BATCH_HORIZON
    if (within := int(slots * horizon / max(pace.run_time, 1e-6))) <= 0:
        return 0
    cap = MAX_AHEAD_PER_SLOT_COSTLY if capabilities.costly_cycles else MAX_AHEAD_PER_SLOT
    if fair():
        cap = MAX_AHEAD_PER_SLOT_FAIR
    return min(cap * slots, within + kept())


def full_cycle(capabilities: Capabilities, *, slots: int, ahead: int) -> int:
    """What a cycle sent while another is out should carry (slots to claim
    for plus completions)."""
    return slots + ahead if capabilities.costly_cycles else slots


def gathers(capabilities: Capabilities) -> bool:
    """Whether a cycle may wait for fuller work on this storage: without round
    trips, or where cycles are costly (Redis's cheap ones gain more from
    overlapping)."""
    return not capabilities.remote or capabilities.costly_cycles


def gather_time(*, slots: int, unbegun: int, held_since: float | None, now: float) -> float:
    """How long the next cycle may wait for fuller work, on storage that
    gathers and with no cycle out (0: not at all; ``math.inf``: until a slot
    frees). ``unbegun``: jobs claimed that wait for a slot; ``held_since``:
    when the oldest completion it would carry came (None: none waits)."""
    if unbegun <= slots:
        return 0.0
    if held_since is None:
        return math.inf  # nothing held back: wait for the slots
    return held_since + BATCH_HORIZON - now
