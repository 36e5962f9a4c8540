"""The parts of one worker that its attempts and its cycles share, made once.

The supervisor builds them; the table of attempts (``attempts.py``) and the
claim/complete cycle (``cycles.py``) take this one object rather than each
part as an argument of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

    from tenure.app import App
    from tenure.backends.base import Backend
    from tenure.config import WorkerConfig
    from tenure.metrics import WorkerMetrics
    from tenure.worker.completer import Completer
    from tenure.worker.drain import Stop
    from tenure.worker.executors.base import Executor
    from tenure.worker.faults import StorageFaults
    from tenure.worker.identity import Identity
    from tenure.worker.pacing import Pace
    from tenure.worker.policies import Policies


@dataclass(frozen=True, slots=True, eq=False)
class Parts:
    """What a worker is made of, as its attempts and cycles see it."""

    app: App
    config: WorkerConfig
    backend: Backend
    executor: Executor
    identity: Identity  # the worker id, and whether it is registered
    completer: Completer  # successes waiting for the next cycle
    policies: Policies
    faults: StorageFaults  # storage faults, said once per episode
    pace: Pace  # how long attempts and cycles take (moving averages)
    stop: Stop  # whether, and how hard, the worker is asked to stop
    # Set when there is something to look at: a cycle ended, a slot freed, a
    # completion waits, a stop, a tick.
    wake: asyncio.Event
    metrics: WorkerMetrics | None = None
