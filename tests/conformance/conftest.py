"""Fixtures of the conformance suite, on top of tests/conftest.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tenure.backends import from_url
from tenure.portal import Portal
from tests.conformance.helpers import register
from tests.conftest import BACKENDS, VARIANTS, SyncBackend, fresh_storage_url

# Every backend, and the variants of those this tenure has.
CONFORMING = BACKENDS + [v for v, kind in VARIANTS.items() if kind in BACKENDS]


@pytest.fixture(params=CONFORMING)
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return fresh_storage_url(request.param, request, tmp_path)


@pytest.fixture
def worker(backend: Any) -> str:
    """A worker registered on ``backend`` (alive for as long as it stays open)."""
    return register(backend, "worker-1")


@pytest.fixture
def open_killable(portal: Portal) -> Iterator[Callable[[str], SyncBackend]]:
    """Open a backend that the test closes itself, e.g. to simulate a kill -9 of
    a worker (closed without deregistering). Closed at teardown if still open."""
    opened: list[tuple[SyncBackend, list[bool]]] = []

    def open_(url: str) -> SyncBackend:
        b = SyncBackend(from_url(url), portal)
        b.open()
        closed = [False]
        original_close = b.close

        def close() -> None:
            if not closed[0]:
                closed[0] = True
                original_close()

        b.__dict__["close"] = close
        opened.append((b, closed))
        return b

    yield open_
    for b, closed in reversed(opened):
        if not closed[0]:
            b.close()
