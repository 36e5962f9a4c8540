"""tenure: a job queue for Python in which a job is never silently lost."""

from tenure.app import App, Queue, Task
from tenure.config import QueuePolicy, WorkerConfig
from tenure.context import JobContext, current_job
from tenure.core.events import Event
from tenure.core.states import DeadReason, Outcome, State
from tenure.core.workflows import Failed, Workflow, WorkflowState, chain, group
from tenure.errors import (
    AmbiguousJobId,
    BackendUnavailable,
    InvalidInput,
    InvalidTransition,
    JobCancelled,
    JobFailed,
    JobNotFound,
    LeaseLost,
    TenureError,
)
from tenure.job import Attempt, Job
from tenure.signals import Fail, Retry

__all__ = [
    "AmbiguousJobId",
    "App",
    "Attempt",
    "BackendUnavailable",
    "DeadReason",
    "Event",
    "Fail",
    "Failed",
    "InvalidInput",
    "InvalidTransition",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobFailed",
    "JobNotFound",
    "LeaseLost",
    "Outcome",
    "Queue",
    "QueuePolicy",
    "Retry",
    "State",
    "Task",
    "TenureError",
    "WorkerConfig",
    "Workflow",
    "WorkflowState",
    "chain",
    "current_job",
    "group",
]
