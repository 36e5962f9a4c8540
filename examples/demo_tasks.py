"""The demo's tasks: what a user's ``tasks.py`` looks like."""

import os
import time

import tenure

app = tenure.App(os.environ.get("TENURE_URL", "sqlite:///demo.db"))


@app.task(queue="images", max_attempts=3)
def resize(image: str, width: int) -> dict[str, object]:
    """A slow, healthy handler: it reports progress and returns a JSON result."""
    job = tenure.current_job()
    for step in range(4):
        time.sleep(0.25)
        job.progress({"step": step + 1, "of": 4})
    return {"image": image, "width": width, "worker_pid": os.getpid()}
