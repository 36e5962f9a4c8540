"""The tasks of ``workflows.py``, imported by its ``tenure worker``."""

import os
import time

import tenure

app = tenure.App(os.environ["BENCH_URL"])


@app.task(queue="flows")
def noop() -> None:
    return None


@app.task(queue="flows")
def stamp() -> float:
    """When the step started, by the machine's clock (storage's, on this host)."""
    return time.time()
