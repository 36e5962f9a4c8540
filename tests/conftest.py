"""Fixtures shared by every test: real backends, each test on clean storage.

``backend_url`` names fresh, empty storage for one test, for every backend
that exists (only SQLite so far). ``backend`` is an opened backend on it,
driven synchronously through a portal; ``open_backend(url)`` opens more
(each one is what a separate worker process would hold).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tenure.backends import Backend, from_url
from tenure.portal import Portal

BACKENDS = ["sqlite"]


def required_backends() -> set[str]:
    return {b for b in os.environ.get("TENURE_REQUIRE_BACKENDS", "").split(",") if b}


class SyncBackend:
    """A backend's async verbs, called synchronously (tests only)."""

    def __init__(self, backend: Backend, portal: Portal) -> None:
        self.inner = backend
        self._portal = portal

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._portal.run(attr(*args, **kwargs))

        return call


@pytest.fixture(scope="session")
def portal() -> Iterator[Portal]:
    p = Portal("tenure-test-portal")
    yield p
    p.close()


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    kind = request.param
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'tenure.db'}"
    raise AssertionError(kind)


@pytest.fixture
def open_backend(portal: Portal) -> Iterator[Callable[[str], SyncBackend]]:
    opened: list[SyncBackend] = []

    def open_(url: str) -> SyncBackend:
        b = SyncBackend(from_url(url), portal)
        b.open()
        opened.append(b)
        return b

    yield open_
    for b in reversed(opened):
        b.close()


@pytest.fixture
def backend(backend_url: str, open_backend: Callable[[str], SyncBackend]) -> SyncBackend:
    return open_backend(backend_url)
