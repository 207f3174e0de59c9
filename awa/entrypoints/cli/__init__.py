"""The ``awa`` command line (console script ``awa`` and ``python -m awa``).

Command groups live one per module: ``migrate``, ``job``, ``queue``, ``dlq``, ``health`` /
``context``, ``storage``, ``worker`` (run a module's handlers) and ``dev`` (a worked
example on a real or embedded Postgres). Exit codes: 0 success, 1 refused or failed
action, 2 bad usage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from awa.entrypoints.cli._common import CliState, CommandFailed, first_line
from awa.entrypoints.cli.batch_ops import batch_ops
from awa.entrypoints.cli.dev import dev
from awa.entrypoints.cli.dlq import dlq
from awa.entrypoints.cli.jobs import job
from awa.entrypoints.cli.migrate import migrate
from awa.entrypoints.cli.queues import queue, queue_stats_hidden
from awa.entrypoints.cli.status import context, health, package_version
from awa.entrypoints.cli.storage import storage
from awa.entrypoints.cli.worker import worker

__all__ = ["cli", "main"]


class AwaGroup(click.Group):
    """The root group: turns unexpected exceptions into one stderr line and exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            if ctx.params.get("debug"):
                raise
            raise CommandFailed(first_line(exc)) from exc


@click.group(cls=AwaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--database-url",
    envvar="DATABASE_URL",
    metavar="URL",
    help="Postgres connection URL (default: $DATABASE_URL).",
)
@click.option("--json", "json_output", is_flag=True, help="Print JSON instead of tables.")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.version_option(package_version(), "-V", "--version", prog_name="awa")
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, json_output: bool, debug: bool) -> None:
    """Awa: administer a Postgres-native job queue."""
    ctx.obj = CliState(database_url=database_url, json_output=json_output, debug=debug)


cli.add_command(migrate)
cli.add_command(job)
cli.add_command(queue)
cli.add_command(queue_stats_hidden)
cli.add_command(dlq)
cli.add_command(batch_ops)
cli.add_command(health)
cli.add_command(context)
cli.add_command(storage)
cli.add_command(worker)
cli.add_command(dev)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    try:
        cli.main(args=None if argv is None else list(argv), prog_name="awa", standalone_mode=True)
    except SystemExit as exit_:
        code = exit_.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    return 0
