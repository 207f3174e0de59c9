"""Shared plumbing for the ``awa`` command line: options, errors, output and async runs.

Every command that touches the database goes through :func:`database_url`, which resolves
``--database-url`` / ``DATABASE_URL`` and echoes the password-stripped target to stderr
once before anything acts. Failures become one ``awa: error: ...`` line and exit code 1;
``--debug`` lets the original traceback through instead.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import click

from awa.entrypoints.client import AsyncClient

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

NO_DATABASE_URL = "no database URL: pass --database-url or set DATABASE_URL"
_SECRET_KEYS = frozenset({"password", "sslpassword"})


class CommandFailed(click.ClickException):
    """A refused or failed action: one line on stderr, exit code 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"awa: error: {self.format_message()}", err=True, file=file)


class CliState:
    """Global options of one invocation, shared with every subcommand via ``ctx.obj``."""

    def __init__(self, *, database_url: str | None, json_output: bool, debug: bool) -> None:
        self._url = database_url or None
        self.json_output = json_output
        self.debug = debug
        self._announced = False

    def database_url(self) -> str:
        """The target database; announces it (password stripped) on first use."""
        if self._url is None:
            raise click.UsageError(NO_DATABASE_URL)
        if not self._announced:
            click.echo(f"awa: database {redact_url(self._url)}", err=True)
            self._announced = True
        return self._url

    def display_url(self) -> str | None:
        """The password-stripped target, or ``None`` when none is configured."""
        return None if self._url is None else redact_url(self._url)


def redact_url(url: str) -> str:
    """``url`` with any password removed (URL userinfo, ``?password=`` or ``password=``)."""
    if "://" not in url:
        parts = [p for p in url.split() if p.split("=", 1)[0].strip() not in _SECRET_KEYS]
        return " ".join(parts)
    split = urlsplit(url)
    netloc = split.netloc
    if "@" in netloc:
        userinfo, hosts = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}@{hosts}" if user else hosts
    query = split.query
    if query:
        kept = [
            (k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in _SECRET_KEYS
        ]
        query = urlencode(kept)
    return urlunsplit((split.scheme, netloc, split.path, query, split.fragment))


def first_line(exc: BaseException) -> str:
    """A one-line description of ``exc`` suitable for stderr."""
    for line in str(exc).splitlines():
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
    return asyncio.run(coro)


def with_client(action: Callable[[AsyncClient], Awaitable[T]]) -> T:
    """Open a client on the target database, run ``action`` with it, and close it."""
    url = state().database_url()

    async def go() -> T:
        async with AsyncClient(url, max_connections=2) as client:
            return await action(client)

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
    click.echo(json.dumps(value, indent=2, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


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
