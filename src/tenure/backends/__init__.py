"""Storage backends behind one protocol (``base.Backend``)."""

from tenure.backends.base import Backend, Page, RescueReport, WorkerInfo
from tenure.backends.factory import from_url

__all__ = ["Backend", "Page", "RescueReport", "WorkerInfo", "from_url"]
