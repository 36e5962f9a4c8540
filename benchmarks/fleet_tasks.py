"""The no-op task of ``redis_fleet.py``'s workers (``fleet_tasks:app``): a job
that does nothing, so that what is measured is storage's work per job."""

from __future__ import annotations

import tenure

app = tenure.App()  # $TENURE_URL


@app.task(name="fleet.noop")
def noop() -> None:
    """Nothing."""
