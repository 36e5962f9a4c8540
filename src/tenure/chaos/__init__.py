"""``tenure chaos``: the experiments a user needs to trust tenure, on their backend."""

from tenure.chaos.experiments import EXPERIMENTS, Figure, Report

__all__ = ["EXPERIMENTS", "Figure", "Report"]
