"""``GET /api/events``: lifecycle events as a server-sent event stream.

Each event is one message: ``id:`` its event id, ``data:`` the event as JSON
(``Event.to_dict``). A client that reconnects sends the last id it saw as
``Last-Event-ID`` (an ``EventSource`` does it by itself) and the stream resumes
right after it: no event kept by the retention is missed. ``?after=now``
starts at the present instead of the oldest kept event, ``?since=S`` with the
events of the last S seconds (a fresh dashboard: its recent past); the stream
then first sends the id of that position, without data, which an
``EventSource`` keeps as its ``Last-Event-ID``. While nothing
happens, a comment line every KEEPALIVE seconds keeps proxies from closing
the connection, and tells a server that the client is gone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from tenure.app import App
from tenure.backends.base import Backend
from tenure.config import check_seconds
from tenure.core.events import Event
from tenure.events import BATCH
from tenure.web.responses import dumps, error_response

KEEPALIVE = 15.0  # seconds between two keep-alive comments of an idle stream
RETRY_MS = 1000  # how soon a client reconnects
# Streams open at once: on Redis, a waiting stream holds one of the pool's
# connections (32 by default), and the API needs the others.
MAX_STREAMS = 16
NOW = "now"  # ?after=now: only events recorded from the request on


def _seconds(name: str, text: str) -> float:
    """A query parameter's number of seconds, within [0, ten years]."""
    try:
        value: float | str = float(text)
    except ValueError:
        value = text  # refused just below, as a value out of range is
    check_seconds(name, value)
    return float(value)


def message(event: Event) -> bytes:
    return b"id: %s\ndata: %s\n\n" % (event.id.encode(), dumps(event.to_dict()))


class EventStream:
    """The endpoint, over one App's backend on the server's loop."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.open = 0  # streams open or being opened: at most MAX_STREAMS

    async def respond(self, request: Request) -> Response:
        # The slot is taken before the first await, or requests opened at
        # once would all see a free one; each exit below gives it back.
        if self.open >= MAX_STREAMS:
            return error_response(
                503, "TooManyStreams", f"{MAX_STREAMS} event streams are open; try again later"
            )
        self.open += 1
        try:
            return await self._respond(request)
        except BaseException:
            self.open -= 1
            raise

    def _release(self) -> None:
        self.open -= 1

    async def _respond(self, request: Request) -> Response:
        queue = request.query_params.get("queue") or None
        after = request.headers.get("last-event-id") or request.query_params.get("after") or None
        since = request.query_params.get("since") or None
        backend = await self.app.abackend()
        start = None
        if after == NOW:
            after = start = await backend.events_now(queue)
        elif after is None and since is not None:
            after = start = await backend.events_now(queue, _seconds("since", since))
        # Read once before the response starts: a bad queue or id is a 400, not a broken stream.
        first = await backend.read_events(queue, after, BATCH, 0.0)
        return _Stream(
            self.stream(backend, queue, after, first, start),
            self._release,
            media_type="text/event-stream",
            headers={"x-accel-buffering": "no"},  # nginx: pass each message on at once
        )

    async def stream(
        self,
        backend: Backend,
        queue: str | None,
        after: str | None,
        events: list[Event],
        start: str | None,
    ) -> AsyncIterator[bytes]:
        yield b"retry: %d\n\n" % RETRY_MS
        if start is not None:
            # An id without data: the client's Last-Event-ID from here on,
            # so a reconnect before the first event resumes here, not at "now".
            yield b"id: %s\n\n" % start.encode()
        while True:
            if events:
                yield b"".join(message(e) for e in events)
                after = events[-1].id
            else:
                yield b": keep-alive\n\n"
            events = await backend.read_events(queue, after, BATCH, KEEPALIVE)


class _Stream(StreamingResponse):
    """A stream that gives its slot back however it ends: its client gone,
    the server stopping, or never started at all."""

    def __init__(self, content: AsyncIterator[bytes], release: Callable[[], None],
                 **options: Any) -> None:  # fmt: skip
        super().__init__(content, **options)
        self.release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.release()
