"""``GET /api/events``: lifecycle events as server-sent events, on every backend."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import orjson
import pytest

from tenure import App
from tenure.web import sse
from tests.conformance.helpers import wait_for


def messages(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    """The stream's messages (``id``, ``data``) and comments (``comment``), as they come."""
    message: dict[str, str] = {}
    for line in lines:
        if line.startswith(":"):
            yield {"comment": line[1:].strip()}
        elif line:
            field, _, value = line.partition(":")
            message[field] = value.removeprefix(" ")
        elif message:
            yield message
            message = {}


def next_event(stream: Iterator[dict[str, str]]) -> tuple[str, dict[str, object]]:
    """The next event's id and data, past comments and the retry hint."""
    for message in stream:
        if "data" in message:
            data = orjson.loads(message["data"])
            assert data["id"] == message["id"]
            return message["id"], data
    raise AssertionError("the stream ended")


def test_events__stream_live_and_resume_after_last_event_id(
    api: httpx.Client, web_app: App
) -> None:
    first = web_app.enqueue("t", {"n": 1})
    with api.stream("GET", "/api/events", params={"queue": "default"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        stream = messages(response.iter_lines())
        assert next(stream) == {"retry": str(sse.RETRY_MS)}
        _, data = next_event(stream)
        assert (data["kind"], data["job_id"]) == ("enqueued", first.id)
        live = web_app.enqueue("t", {"n": 2})  # while the stream waits
        last_seen, data = next_event(stream)
        assert data["job_id"] == live.id

    missed = [web_app.enqueue("t", {"n": i}).id for i in range(3)]
    web_app.enqueue("t", {}, queue="other")  # not this stream's queue
    missed.append(web_app.cancel(missed[0]).id)
    headers = {"last-event-id": last_seen}
    with api.stream("GET", "/api/events?queue=default", headers=headers) as response:
        stream = messages(response.iter_lines())
        got = [next_event(stream)[1] for _ in missed]
    assert [(d["kind"], d["job_id"]) for d in got] == [
        *(("enqueued", job_id) for job_id in missed[:3]),
        ("cancelled", missed[0]),
    ]
    event = api.get("/api/openapi.json").json()["components"]["schemas"]["Event"]
    assert {d["kind"] for d in got} < set(event["properties"]["kind"]["enum"])


def test_events__idle_stream_sends_keep_alive_comments(
    api: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sse, "KEEPALIVE", 0.05)
    with api.stream("GET", "/api/events") as response:
        stream = messages(response.iter_lines())
        assert next(stream) == {"retry": str(sse.RETRY_MS)}
        assert [next(stream) for _ in range(2)] == [{"comment": "keep-alive"}] * 2


def test_events__streams_beyond_the_limit_get_503_until_one_ends(
    api: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sse, "MAX_STREAMS", 1)
    with api.stream("GET", "/api/events") as first:
        stream = messages(first.iter_lines())  # kept: once collected, it closes the response
        assert next(stream) == {"retry": str(sse.RETRY_MS)}
        refused = api.get("/api/events", timeout=5)
        assert refused.status_code == 503 and refused.json()["error"] == "TooManyStreams"

    def a_stream_opens() -> bool:
        with api.stream("GET", "/api/events") as again:
            return again.status_code == 200

    wait_for(a_stream_opens)  # the server notices the first one's end


def test_events_after_now__start_live_and_resume_exactly_from_the_first_id(
    api: httpx.Client, web_app: App
) -> None:
    web_app.enqueue("t", {"n": 0})  # before the stream: not replayed
    with api.stream("GET", "/api/events", params={"queue": "default", "after": "now"}) as r:
        stream = messages(r.iter_lines())
        assert next(stream) == {"retry": str(sse.RETRY_MS)}
        start = next(stream)  # the position, without data: an EventSource's Last-Event-ID
        assert list(start) == ["id"]
        live = web_app.enqueue("t", {"n": 1})
        assert next_event(stream)[1]["job_id"] == live.id

    # A client that lost the stream before any event came resumes at that
    # position (its Last-Event-ID wins over ?after=now): what came since is not lost.
    missed = web_app.enqueue("t", {"n": 2})
    headers = {"last-event-id": start["id"]}
    with api.stream("GET", "/api/events?after=now&queue=default", headers=headers) as r:
        stream = messages(r.iter_lines())
        got = [next_event(stream)[1]["job_id"] for _ in range(2)]
    assert got == [live.id, missed.id]
    assert api.get("/api/events?after=now&queue=no%20spaces").status_code == 400


def test_events_since__start_with_the_recent_past(api: httpx.Client, web_app: App) -> None:
    earlier = web_app.enqueue("t", {"n": 1})
    with api.stream("GET", "/api/events?since=900") as response:
        stream = messages(response.iter_lines())
        assert next(stream) == {"retry": str(sse.RETRY_MS)}
        assert "data" not in next(stream)  # the position it starts from, for a reconnect
        assert next_event(stream)[1]["job_id"] == earlier.id
    for bad in ("soon", "-1", "nan"):
        refused = api.get(f"/api/events?since={bad}")
        assert refused.status_code == 400 and "since" in refused.json()["message"]
