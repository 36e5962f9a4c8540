"""The Django app ``tenure.contrib.django``: at Django's start, its system
checks of ``settings.TENURE``, and each installed app's ``tasks`` module; at
``migrate``, tenure's own tables."""

from __future__ import annotations

import logging
from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate
from django.utils.module_loading import autodiscover_modules

from tenure.app import App
from tenure.contrib.django import conf
from tenure.errors import TenureError

log = logging.getLogger("tenure")


class TenureConfig(AppConfig):  # type: ignore[misc]  # Django is unannotated
    """tenure in INSTALLED_APPS (label ``tenure``)."""

    name = "tenure.contrib.django"
    label = "tenure"
    verbose_name = "tenure"

    def ready(self) -> None:
        checks.register(check_settings, "tenure")
        post_migrate.connect(migrate_tenure, sender=self)
        connection_created.connect(open_beside, dispatch_uid="tenure.open_beside")
        # As Celery's autodiscover_tasks: every process that sets Django up
        # (a web server, a worker, its executors) has every task registered.
        autodiscover_modules("tasks")


def migrate_tenure(using: str = "default", **kwargs: Any) -> None:
    """At ``manage.py migrate`` (and a test run's database creation), create or
    migrate tenure's tables in the database it shares, if it is that one: an
    enqueue in a transaction needs them there already."""
    from django.db import connections

    from tenure.contrib.django.transactions import project_app

    app = project_app()
    if using == conf.alias() and conf.same_database(app.url, connections[using].settings_dict):
        app.queues()  # the App's first use migrates its storage
        _close_before_dropped(connections[using].creation, app)


def _close_before_dropped(creation: Any, app: App) -> None:
    """A test run's database is dropped at its end, which PostgreSQL refuses
    while a connection of tenure's is open to it: close them first. (Django
    has no signal there; this migrate may be the test run's own.)"""
    destroy = creation.destroy_test_db
    if getattr(destroy, "closes_tenure", False):
        return

    def destroy_test_db(*args: Any, **kwargs: Any) -> Any:
        app.close()
        return destroy(*args, **kwargs)

    destroy_test_db.closes_tenure = True  # type: ignore[attr-defined]
    creation.destroy_test_db = destroy_test_db


def open_beside(sender: Any, connection: Any, **kwargs: Any) -> None:
    """With Django's first connection to the SQLite file tenure shares, open
    tenure's own in this process: opened later, from inside a transaction of
    Django's that holds the file's write lock, it would wait for that lock
    (opening writes), which that very transaction holds until it ends."""
    if connection.vendor != "sqlite" or connection.alias != conf.alias():
        return
    from tenure.contrib.django.transactions import project_app

    app = project_app()
    try:
        if conf.same_database(app.url, connection.settings_dict):
            app.queues()  # the App's first use opens it
    except TenureError as exc:  # the first enqueue will say it, where it belongs
        log.warning("tenure could not open its storage beside Django's: %s", exc)


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``manage.py check``: an error (tenure.E001) for each problem of
    ``settings.TENURE``, a warning (tenure.W001) for each key it does not read."""
    said: list[checks.CheckMessage] = [checks.Error(m, id="tenure.E001") for m in conf.problems()]
    return said + [checks.Warning(m, id="tenure.W001") for m in conf.unknown_keys()]
