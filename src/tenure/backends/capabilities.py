"""What a backend is like, as the worker paces its cycles by it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend is like, as the worker paces its cycles by it (see
    ``tenure.worker.pacing``); storage itself never acts on it."""

    # Storage is a server: a worker's cycle waits for a round trip, which the
    # worker hides by claiming ahead of its free slots. False: the cycle is the
    # worker's own work (SQLite), which claims ahead make fewer and fuller.
    remote: bool
    # A cycle costs storage much more than each job in it (PostgreSQL: one
    # statement of many parts): while a cycle is out, the worker lets the next
    # gather a full claim (its slots plus claims ahead), not just its slots;
    # while jobs claimed ahead keep its slots busy, it holds completions back
    # for a moment, as it does without round trips.
    costly_cycles: bool
    # An idle worker's safety poll (s), unless its idle_poll_max says: long
    # where wait_for_jobs returns when a job comes due (Redis).
    idle_poll: float = 1.0
