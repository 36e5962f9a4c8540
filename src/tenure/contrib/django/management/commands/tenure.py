"""``python manage.py tenure ...``: every ``tenure`` command, on the project's
App (``tenure.contrib.django:app``) and its storage: ``manage.py tenure
worker``, ``status``, ``jobs``, ``dlq list``, ``serve``..."""

from __future__ import annotations

import argparse
import sys
from typing import Any, ClassVar

from django.core.management.base import BaseCommand, CommandError, CommandParser

APP_PATH = "tenure.contrib.django:app"


def tenure_args(args: list[str]) -> list[str]:
    """The ``tenure`` command line of ``manage.py tenure ARGS``: the App and
    its URL, given before the user's own options; CommandError for a
    ``settings.TENURE`` that ``manage.py check`` finds wrong (a worker would
    only log a queue's bad policy)."""
    from tenure.contrib.django import app, conf

    problems = conf.problems()
    if problems:
        raise CommandError("; ".join(problems))
    return ["--app", APP_PATH, "--url", app.url, *args]


class Command(BaseCommand):  # type: ignore[misc]  # Django is unannotated
    help = "tenure's commands (worker, status, jobs, dlq, serve...) on this project's App."
    requires_system_checks: ClassVar[list[str]] = []  # tenure's own commands check what they use
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER, help="tenure's command and options")

    def run_from_argv(self, argv: list[str]) -> None:
        """``tenure``'s own parsing, help and exit codes, not Django's."""
        from tenure.cli import cli

        try:
            args = tenure_args(argv[2:])
        except CommandError as exc:
            sys.exit(f"error: {exc}")  # as tenure's own errors: one line, exit code 1
        cli.main(args, prog_name=f"{argv[0]} {argv[1]}")

    def handle(self, *args: str, **options: Any) -> None:
        """``call_command("tenure", "status")``: its errors are raised."""
        from tenure.cli import cli

        cli.main(tenure_args(list(args)), prog_name="tenure", standalone_mode=False)
