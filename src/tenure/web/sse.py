"""``GET /api/events``: lifecycle events as a server-sent event stream.

Each event is one message: ``id:`` its event id, ``data:`` the event as JSON
(``Event.to_dict``). A client that reconnects sends the last id it saw as
``Last-Event-ID`` (an ``EventSource`` does it by itself) and the stream resumes
right after it: no event kept by the retention is missed. While nothing
happens, a comment line every KEEPALIVE seconds keeps proxies from closing
the connection, and tells a server that the client is gone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import StreamingResponse

from tenure.app import App
from tenure.backends.base import Backend
from tenure.core.events import Event
from tenure.events import BATCH
from tenure.web.responses import dumps

KEEPALIVE = 15.0  # seconds between two keep-alive comments of an idle stream
RETRY_MS = 1000  # how soon a client reconnects


def message(event: Event) -> bytes:
    return b"id: %s\ndata: %s\n\n" % (event.id.encode(), dumps(event.to_dict()))


class EventStream:
    """The endpoint, over one App's backend on the server's loop."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def respond(self, request: Request) -> StreamingResponse:
        queue = request.query_params.get("queue") or None
        after = request.headers.get("last-event-id") or request.query_params.get("after") or None
        backend = await self.app.abackend()
        # Read once before the response starts: a bad queue or id is a 400, not a broken stream.
        first = await backend.read_events(queue, after, BATCH, 0.0)
        return StreamingResponse(
            self.stream(backend, queue, after, first),
            media_type="text/event-stream",
            headers={"x-accel-buffering": "no"},  # nginx: pass each message on at once
        )

    async def stream(
        self, backend: Backend, queue: str | None, after: str | None, events: list[Event]
    ) -> AsyncIterator[bytes]:
        yield b"retry: %d\n\n" % RETRY_MS
        while True:
            if events:
                yield b"".join(message(e) for e in events)
                after = events[-1].id
            else:
                yield b": keep-alive\n\n"
            events = await backend.read_events(queue, after, BATCH, KEEPALIVE)
