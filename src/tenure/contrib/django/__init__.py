"""tenure in a Django project: ``pip install 'tenure[django]'``, then
``INSTALLED_APPS += ["tenure.contrib.django"]``.

- ``app``: the project's tenure App (``from tenure.contrib.django import app``),
  made at first use from ``settings.TENURE`` (``URL``, ``DATABASE``, ``QUEUES``).
  Without a URL, tenure keeps its tables in the project's default database.
  Each installed app's ``tasks`` module is imported when Django is ready, so
  ``@app.task`` there registers its tasks in every process, workers included.
- Enqueues follow Django's transactions (``tenure.contrib.django.transactions``):
  inside ``transaction.atomic()``, written in the transaction itself when
  tenure shares Django's database, else stored at the commit.
- ``python manage.py tenure ...``: every ``tenure`` command, on this App.
- ``asgi(django_asgi_app)``: the dashboard under ``/tenure/`` of the
  project's ASGI application, for its staff (``tenure.contrib.django.dashboard``).

Importing this package reads no setting and imports nothing of Django's:
``app`` and ``asgi`` are made when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tenure.contrib.django.dashboard import asgi
    from tenure.contrib.django.transactions import DjangoApp

    app: DjangoApp

__all__ = ["app", "asgi"]


def __getattr__(name: str) -> Any:  # PEP 562: made on first use
    if name == "asgi":
        from tenure.contrib.django.dashboard import asgi as router

        return router
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from tenure.contrib.django.transactions import project_app

    made = globals()["app"] = project_app()  # an attribute now: loader.path_of finds it
    return made
