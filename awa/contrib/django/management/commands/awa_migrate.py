"""``manage.py awa_migrate``: create or upgrade Awa's schema in the task backend's
database (what ``awa migrate`` does, with the URL taken from the Django settings)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, task_backends

from awa.contrib.django.backend import AwaBackend
from awa.entrypoints.client import Client


class Command(BaseCommand):  # type: ignore[misc]
    help = "Create or upgrade Awa's schema in the database of an Awa task backend."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default=DEFAULT_TASK_BACKEND_ALIAS)

    def handle(self, *args: Any, **options: Any) -> None:
        backend = task_backends[options["backend"]]
        if not isinstance(backend, AwaBackend):
            raise CommandError(f"--backend {options['backend']!r} is not an Awa task backend")
        with Client(backend.database_url, max_connections=1) as client:
            client.migrate()
        self.stdout.write("Awa's schema is up to date.")
