"""The frames between the supervisor and its executor processes: every frame
crosses the pipe as it was sent, enums included, and a frame that is not ours
is refused with WireError, never half-read."""

from __future__ import annotations

import os

import pytest

from tenure.worker.executors.base import Raise, Raised, Returned, Settled
from tenure.worker.executors.wire import (
    Abort,
    Cancel,
    Done,
    Exit,
    Fatal,
    Frame,
    Heartbeat,
    Progress,
    Ready,
    Refusal,
    Reply,
    Run,
    Started,
    WireError,
    frame,
    parse,
    read_frame,
    write_all,
)

FRAMES: list[Frame] = [
    Run("j", 3, "t", "q", 2, {"a": [1, None]}, "k", "00-ab-cd-01", is_async=True, timed=False),
    Cancel("j", 3),
    Abort("j", 3),
    Reply(7),
    Reply(8, Refusal.LEASE_LOST, "gone"),
    Exit(),
    Ready(1234),
    Fatal("cannot import"),
    Started("j", 3),
    Progress(9, "j", 3, {"done": 0.5}),
    Heartbeat(10, "j", 3),
    Done("j", 3, {"ok": True}),
    Done("j", 3, settled=True, error="raised after"),
    Done("j", 3, raised=Raise.RETRY, error="tb", retry_in=2.5, reason="later"),
]


@pytest.mark.parametrize("message", FRAMES, ids=lambda f: type(f).__name__)
def test_every_frame__crosses_a_pipe_as_sent(message: Frame) -> None:
    read, write = os.pipe()
    try:
        write_all(write, frame(message))
        assert read_frame(read) == message
    finally:
        os.close(read)
        os.close(write)


def test_enums__come_back_as_enums() -> None:
    reply = parse(frame(Reply(1, Refusal.FAILED, "x"))[4:])
    assert isinstance(reply, Reply) and reply.error is Refusal.FAILED
    done = parse(frame(Done("j", 1, raised=Raise.FAIL, error="tb"))[4:])
    assert isinstance(done, Done) and done.raised is Raise.FAIL


@pytest.mark.parametrize(
    "result",
    [Returned([1, "two"]), Settled(None), Settled("tb"), Raised(Raise.RETRY, "tb", 1.0, "why")],
)
def test_a_handlers_end__survives_its_done_frame(result: Returned | Settled | Raised) -> None:
    done = parse(frame(Done.of("j", 1, result))[4:])
    assert isinstance(done, Done) and done.result() == result


@pytest.mark.parametrize(
    "body", [b"not json", b"{}", b'["nope", {}]', b'["run", {"id": "j"}]', b'["exit", {"x": 1}]']
)
def test_a_frame_not_ours__is_refused(body: bytes) -> None:
    with pytest.raises(WireError):
        parse(body)


def test_a_closed_pipe__reads_as_none() -> None:
    read, write = os.pipe()
    os.close(write)
    try:
        assert read_frame(read) is None
    finally:
        os.close(read)
