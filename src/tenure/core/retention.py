"""Retention: how long each queue keeps its finished jobs, decided once.

Completed and cancelled jobs are kept for the queue's ``keep_completed``
seconds after they finished, dead ones for its ``keep_dead``; None keeps them
forever. The sweeper prunes the others (``Backend.prune``), in bounded
batches, by storage's clock, and records no event for them: a pruned job is
one nobody needed any more, and an event each would make pruning a million
jobs write a million events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tenure.core.states import State

if TYPE_CHECKING:
    from tenure.config import QueuePolicy

# The finished states, each with the policy field that says how long it is kept.
KEPT_BY = {State.COMPLETED: "keep_completed", State.CANCELLED: "keep_completed",
           State.DEAD: "keep_dead"}  # fmt: skip

Rule = tuple[str, State, float]  # (queue, finished state, seconds kept)


def rules(policies: Mapping[str, QueuePolicy]) -> list[Rule]:
    """For each queue and finished state that its policy prunes, how many
    seconds after it finished a job in that state goes."""
    found: list[Rule] = []
    for queue, policy in sorted(policies.items()):
        for state, field in KEPT_BY.items():
            keep = getattr(policy, field)
            if keep is not None:
                found.append((queue, state, float(keep)))
    return found
