"""The worker runtime: supervisor, executors, lease keeper, sweeper, drain."""

from tenure.worker.supervisor import Supervisor, run_worker

__all__ = ["Supervisor", "run_worker"]
