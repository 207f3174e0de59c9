"""``manage.py awa_worker``: run the Django tasks of an Awa task backend."""

from __future__ import annotations

from typing import Any

import anyio
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, task_backends
from django.tasks.exceptions import InvalidTaskBackend

from awa.contrib.django.backend import AwaBackend
from awa.contrib.django.worker import run_worker

#: Handlers per queue when ``--queue NAME`` gives no count.
DEFAULT_WORKERS = 10


def parse_queue(spec: str) -> tuple[str, int]:
    """``NAME`` or ``NAME:WORKERS`` (WORKERS >= 1, default :data:`DEFAULT_WORKERS`)."""
    name, sep, count = spec.rpartition(":")
    if not sep:
        return spec, DEFAULT_WORKERS
    try:
        workers = int(count)
    except ValueError:
        raise CommandError(f"--queue {spec!r}: expected NAME or NAME:WORKERS") from None
    if not name or workers < 1:
        raise CommandError(f"--queue {spec!r}: a name and a worker count >= 1 are needed")
    return name, workers


class Command(BaseCommand):  # type: ignore[misc]
    help = (
        "Run the Django tasks enqueued through an Awa task backend (TASKS[...]['BACKEND'] = "
        "'awa.contrib.django.AwaBackend'). SIGINT or SIGTERM stops claiming and lets "
        "running tasks finish for up to --shutdown-timeout-ms."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--backend",
            default=DEFAULT_TASK_BACKEND_ALIAS,
            help="the TASKS alias to serve (default: %(default)s)",
        )
        parser.add_argument(
            "--queue",
            action="append",
            default=[],
            metavar="NAME[:WORKERS]",
            help=(
                "a queue to serve, with its number of concurrent tasks (default "
                f"{DEFAULT_WORKERS}); repeatable. Default: the backend's QUEUES"
            ),
        )
        parser.add_argument(
            "--shutdown-timeout-ms",
            type=int,
            default=30_000,
            help="how long running tasks may finish at shutdown (default: %(default)s)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = options["backend"]
        try:
            backend = task_backends[alias]
        except InvalidTaskBackend as exc:
            raise CommandError(f"--backend {alias!r}: {exc}") from None
        if not isinstance(backend, AwaBackend):
            raise CommandError(
                f"--backend {alias!r} is {type(backend).__module__}.{type(backend).__name__}, "
                "not awa.contrib.django.AwaBackend"
            )
        queues = [parse_queue(spec) for spec in options["queue"]]
        if not queues:
            if not backend.queues:
                raise CommandError(
                    f"TASKS[{alias!r}] allows any queue (QUEUES is empty): name the queues "
                    "to serve with --queue"
                )
            queues = [(name, DEFAULT_WORKERS) for name in sorted(backend.queues)]
        unknown = sorted(
            name for name, _ in queues if backend.queues and name not in backend.queues
        )
        if unknown:
            raise CommandError(
                f"--queue {', '.join(unknown)}: not in TASKS[{alias!r}]['QUEUES'] "
                f"({', '.join(sorted(backend.queues))})"
            )
        if options["shutdown_timeout_ms"] < 0:
            raise CommandError("--shutdown-timeout-ms must be >= 0")
        anyio.run(
            lambda: run_worker(backend, queues, shutdown_timeout_ms=options["shutdown_timeout_ms"])
        )
