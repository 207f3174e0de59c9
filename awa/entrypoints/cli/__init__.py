"""The ``awa`` command line (console script ``awa`` and ``python -m awa``).

Command groups live one per module: ``migrate``, ``adopt`` (an awa-pg database),
``job``, ``queue``, ``dlq``, ``cron``, ``health`` / ``context``, ``storage``, ``worker``
(run a module's handlers) and ``dev`` (a worked example on a real or embedded Postgres).
Exit codes: 0 success, 1 refused or failed action, 2 bad usage.

Writing a command group: get the target with ``state().database_url()`` (or
``with_client``), which resolves it, echoes it and applies the safety rules; decorate a
command that changes data with ``@mutating`` (from ``_common``) so it needs an explicit
target when several contexts exist and passes the production gate. The global options
(``--database-url``, ``--context``, ``--yes``, ``--json``, ``--debug``) are added to every
registered command automatically, so they work after the subcommand too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from awa.entrypoints.cli._common import CliState, CommandFailed, first_line
from awa.entrypoints.cli.adopt import adopt
from awa.entrypoints.cli.batch_ops import batch_ops
from awa.entrypoints.cli.batches import batch
from awa.entrypoints.cli.context import context
from awa.entrypoints.cli.cron import cron
from awa.entrypoints.cli.dev import dev
from awa.entrypoints.cli.dlq import dlq
from awa.entrypoints.cli.jobs import job
from awa.entrypoints.cli.migrate import migrate
from awa.entrypoints.cli.queues import queue, queue_stats_hidden
from awa.entrypoints.cli.serve import callbacks, serve
from awa.entrypoints.cli.status import health, package_version
from awa.entrypoints.cli.storage import storage
from awa.entrypoints.cli.worker import worker

__all__ = ["cli", "main"]


def _set_global(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """Callback of a global option given after the subcommand: store it on the state."""
    if value is None or value is False or param.name is None:
        return
    cli_state = ctx.find_object(CliState)
    if cli_state is not None:
        setattr(cli_state, _GLOBAL_ATTRS[param.name], value)


_GLOBAL_ATTRS = {
    "awa_global_database_url": "database_url_option",
    "awa_global_context": "context_option",
    "awa_global_yes": "yes",
    "awa_global_json": "json_output",
    "awa_global_debug": "debug",
}


def _global_params() -> list[click.Option]:
    common: dict[str, Any] = {"expose_value": False, "callback": _set_global, "hidden": True}
    return [
        click.Option(["--database-url", "awa_global_database_url"], metavar="URL", **common),
        click.Option(["--context", "awa_global_context"], metavar="NAME", **common),
        click.Option(["--yes", "awa_global_yes"], is_flag=True, **common),
        click.Option(["--json", "awa_global_json"], is_flag=True, **common),
        click.Option(["--debug", "awa_global_debug"], is_flag=True, **common),
    ]


def _accept_global_options(command: click.Command) -> None:
    """Let ``command`` and everything under it take the global options too (hidden from
    their help), unless it already has an option of the same spelling."""
    taken = {opt for param in command.params for opt in getattr(param, "opts", ())}
    names = {param.name for param in command.params}
    for param in _global_params():
        if param.name not in names and not taken.intersection(param.opts):
            command.params.append(param)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _accept_global_options(sub)


class AwaGroup(click.Group):
    """The root group: global options anywhere, unexpected exceptions as one stderr line
    (exit 1)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        # Commands are registered (possibly by other modules) before the first parse.
        for sub in self.commands.values():
            _accept_global_options(sub)
        return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            cli_state = ctx.find_object(CliState)
            if cli_state is not None and cli_state.debug:
                raise
            raise CommandFailed(first_line(exc)) from exc


@click.group(cls=AwaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--database-url",
    metavar="URL",
    help="Postgres connection string (URL or key/value; wins over everything else).",
)
@click.option(
    "--context",
    "context_name",
    metavar="NAME",
    help="Named context from the config file (default: $AWA_CONTEXT).",
)
@click.option("--yes", is_flag=True, help="Confirm changes to a production context without asking.")
@click.option("--json", "json_output", is_flag=True, help="Print JSON instead of tables.")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.version_option(package_version(), "-V", "--version", prog_name="awa")
@click.pass_context
def cli(
    ctx: click.Context,
    database_url: str | None,
    context_name: str | None,
    yes: bool,
    json_output: bool,
    debug: bool,
) -> None:
    """Awa: administer a Postgres-native job queue.

    The target database is, first match wins: --database-url, --context / $AWA_CONTEXT,
    $DATABASE_URL, then default_context of ~/.config/awa/config.toml (or $AWA_CONFIG).
    It is echoed, password stripped, on stderr before a command acts. Global options may
    also follow the subcommand.
    """
    ctx.obj = CliState(
        database_url=database_url,
        context=context_name,
        json_output=json_output,
        debug=debug,
        yes=yes,
    )


cli.add_command(migrate)
cli.add_command(adopt)
cli.add_command(job)
cli.add_command(queue)
cli.add_command(queue_stats_hidden)
cli.add_command(dlq)
cli.add_command(cron)
cli.add_command(batch_ops)
cli.add_command(batch)
cli.add_command(health)
cli.add_command(context)
cli.add_command(storage)
cli.add_command(worker)
cli.add_command(dev)
cli.add_command(serve)
cli.add_command(callbacks)


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
