"""Shared plumbing for the ``awa`` command line: the target, options, errors and output.

Every command that touches the database asks :meth:`CliState.database_url` for it. That
resolves the target (``_target``: ``--database-url`` > ``--context`` / ``AWA_CONTEXT`` >
``DATABASE_URL`` > ``default_context``), applies the rules for commands marked
:func:`mutating` (an explicit target when several contexts exist, the production gate)
and echoes the password-stripped target to stderr once, before anything acts.

Failures become one ``awa: error: ...`` line and exit code 1; ``--debug`` lets the
original traceback through instead. No message carries a password.

Every command module is imported to build the help, so this module and the command
modules import the composition root, the client and the event loop inside the functions
that use them: ``awa --help`` and a command that never connects load none of them, and a
command loads only what it runs (ADR 0018).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click

from awa.adapters._pg import conninfo
from awa.domain.errors import SchemaNotMigrated
from awa.entrypoints.cli import _target
from awa.entrypoints.environment import POOLER_ENV

if TYPE_CHECKING:
    from awa.entrypoints.cli._contexts import ContextConfig
    from awa.entrypoints.client_async import AsyncClient
    from awa.ports.admin import SchemaAdmin

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

NO_DATABASE_URL = _target.NO_TARGET
_MUTATING = "__awa_mutating__"


class CommandFailed(click.ClickException):
    """A refused or failed action: one line on stderr, exit code 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"awa: error: {self.format_message()}", err=True, file=file)


def mutating(command: F) -> F:
    """Mark a command as changing data.

    Apply it above or below ``@group.command()``. Such a command then needs an explicit
    target (``--database-url`` / ``--context`` / ``AWA_CONTEXT``) when the contexts file
    defines more than one context, and on a ``production = true`` context it asks for
    confirmation (``--yes`` skips the question; a non-interactive stdin without ``--yes``
    is refused). A command whose options decide whether it writes (``migrate --sql``)
    passes ``mutating=`` to :meth:`CliState.database_url` instead.
    """
    setattr(command, _MUTATING, True)
    return command


def is_mutating(command: click.Command) -> bool:
    """Whether ``command`` was marked with :func:`mutating`."""
    return bool(getattr(command, _MUTATING, False) or getattr(command.callback, _MUTATING, False))


class CliState:
    """Global options of one invocation, shared with every subcommand via ``ctx.obj``.

    Global options may be given before or after the subcommand; the later one wins."""

    def __init__(
        self,
        *,
        database_url: str | None,
        json_output: bool,
        debug: bool,
        context: str | None = None,
        yes: bool = False,
    ) -> None:
        self.database_url_option = database_url or None
        self.context_option = context or None
        self.json_output = json_output
        self.debug = debug
        self.yes = yes
        self._resolved: tuple[_target.Target | None, ContextConfig | None] | None = None
        self._announced = False
        self._checked = False

    def target(self) -> _target.Target | None:
        """The resolved target (``None`` when nothing names one); no rules applied."""
        if self._resolved is None:
            self._resolved = _target.resolve(
                database_url=self.database_url_option,
                context_name=self.context_option,
                environ=os.environ,
            )
        return self._resolved[0]

    def target_if_resolved(self) -> _target.Target | None:
        """The target if it was already resolved (never resolves, never raises)."""
        return None if self._resolved is None else self._resolved[0]

    def database_url(self, *, mutating: bool | None = None) -> str:
        """The target's connection string, after the mutation rules and the echo.

        ``mutating`` defaults to whether the running command is marked :func:`mutating`.
        """
        target = self.target()
        if target is None:
            raise click.UsageError(NO_DATABASE_URL)
        try:
            conninfo.parse(target.url)
        except conninfo.ConnInfoError as exc:
            raise _target.TargetUsageError(f"{exc} (from {target.via})") from None
        ctx = click.get_current_context(silent=True)
        if mutating is None:
            mutating = ctx is not None and is_mutating(ctx.command)
        self.announce()
        from awa.entrypoints import bootstrap

        try:
            # What the URL points at ($AWA_POOLER), for every connection this command opens.
            bootstrap.declare_pooler(target.url, None)
        except ValueError as exc:
            raise click.UsageError(f"{exc} (from ${POOLER_ENV})") from None
        if mutating and not self._checked:
            assert self._resolved is not None
            command = ctx.command_path if ctx is not None else "awa"
            config = self._resolved[1]
            _target.check_mutation(
                target, config, command=command, yes=self.yes, environ=os.environ
            )
            self._checked = True
        return target.url

    def optional_database_url(self, *, mutating: bool | None = None) -> str | None:
        """Like :meth:`database_url`, but ``None`` when no target is configured."""
        return None if self.target() is None else self.database_url(mutating=mutating)

    def announce(self) -> None:
        """Echo the password-stripped target on stderr (once)."""
        target = self.target()
        if target is not None and not self._announced:
            click.echo(f"awa: database {target.describe()}", err=True)
            self._announced = True

    def display_url(self) -> str | None:
        """The password-stripped target, or ``None`` when none is configured."""
        target = self.target()
        return None if target is None else target.display


def redact_url(url: str) -> str:
    """``url`` without its password, rendered by libpq's parser (URL or key/value form)."""
    return conninfo.display(url)


def first_line(exc: BaseException) -> str:
    """A one-line description of ``exc`` suitable for stderr, without any password (of
    the current target or of any connection string it quotes)."""
    known: list[str] = []
    ctx = click.get_current_context(silent=True)
    found = ctx.find_object(CliState) if ctx is not None else None
    resolved = found.target_if_resolved() if found is not None else None
    if resolved is not None:
        known.append(resolved.url)
    for line in conninfo.scrub(str(exc), *known).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def state(ctx: click.Context | None = None) -> CliState:
    """The :class:`CliState` of the running invocation."""
    current = ctx if ctx is not None else click.get_current_context()
    found = current.find_object(CliState)
    if found is None:
        return CliState(database_url=None, json_output=False, debug=False)
    return found


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine to completion on a fresh event loop."""
    import asyncio

    return asyncio.run(coro)


def with_client(action: Callable[[AsyncClient], Awaitable[T]]) -> T:
    """Open a client on the target database, run ``action`` with it, and close it."""
    from awa.entrypoints.client_async import AsyncClient

    url = state().database_url()

    async def go() -> T:
        async with AsyncClient(url, max_connections=2) as client:
            return await action(client)

    return run(go())


def with_schema_admin(url: str, action: Callable[[SchemaAdmin], Awaitable[T]]) -> T:
    """Run ``action`` with the schema admin port on one connection to ``url``, then
    close it."""
    from awa.entrypoints import bootstrap

    async def go() -> T:
        admin = await bootstrap.connect_schema_admin(url)
        try:
            return await action(admin)
        except SchemaNotMigrated as exc:
            # A database awa-pg migrated lacks what this package's schema has: say so.
            adopt_first = await bootstrap.awa_pg_refusal(url)
            if adopt_first is None:
                raise
            raise SchemaNotMigrated(adopt_first) from exc
        finally:
            await admin.close()

    return run(go())


def json_option(command: F) -> F:
    """Add a per-command ``--json`` flag (the global ``awa --json`` works too)."""
    return click.option("--json", "json_flag", is_flag=True, help="Print JSON instead of a table.")(
        command
    )


def wants_json(json_flag: bool) -> bool:
    """Whether JSON output was asked for globally or on this command."""
    return json_flag or state().json_output


def emit_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout."""
    from awa.entrypoints import payloads

    click.echo(payloads.dumps(value, indent=2))


def cell(value: Any) -> str:
    """Render one table cell: ``-`` for missing values, lower-case booleans."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns separated by two spaces, padded to the widest cell."""
    rendered = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rendered:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    lines = [_line(headers, widths)]
    lines.extend(_line(row, widths) for row in rendered)
    return "\n".join(lines)


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(text.ljust(width) for text, width in zip(cells, widths, strict=True)).rstrip()


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print an aligned table on stdout."""
    click.echo(format_table(headers, rows))


def fail(message: str) -> CommandFailed:
    """A :class:`CommandFailed` to ``raise`` for a refused action."""
    return CommandFailed(message)


def parse_iso(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    """Option callback: an ISO-8601 timestamp (``Z`` allowed; naive values are UTC)."""
    if value is None:
        return None
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO-8601 timestamp") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
