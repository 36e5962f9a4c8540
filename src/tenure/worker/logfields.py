"""The structured fields of a worker's log records about one attempt.

Every record about an attempt carries ``job_id``, ``task``, ``queue``,
``attempt``, ``fence`` and ``worker`` as attributes (logging's ``extra``), so
that a JSON log (``tenure worker --log-format json``) can be searched by any of
them; the text log shows the message. A handler's traceback rides along as
``traceback`` (it was raised in another thread or process: there is no
exception to attach).
"""

from __future__ import annotations

from typing import Any

from tenure.job import Job


def attempt_fields(job: Job, worker: str | None = None, **more: Any) -> dict[str, Any]:
    """``extra=`` for a record about ``job``'s current attempt."""
    return {
        "job_id": job.id,
        "task": job.task,
        "queue": job.queue,
        "attempt": job.attempts,
        "fence": job.fence,
        "worker": worker or job.worker,
        **more,
    }
