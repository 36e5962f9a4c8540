"""The tasks of ``keys.py``, imported by its ``tenure worker``."""

import os
import time

import tenure

app = tenure.App(os.environ["BENCH_URL"])
_starts = os.environ.get("BENCH_STARTS")


@app.task(queue="keys")
def noop() -> None:
    return None


@app.task(queue="keys")
def stamp(key: str, i: int) -> None:
    """Write down when it started (the machine's clock) and its key: one
    append of one short line, atomic on an O_APPEND file across processes."""
    assert _starts is not None
    fd = os.open(_starts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{time.time():.6f} {key} {i}\n".encode())
    finally:
        os.close(fd)
