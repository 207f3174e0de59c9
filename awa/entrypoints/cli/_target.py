"""Which database a command acts on, and whether it may.

Resolution, first match wins:

1. ``--database-url URL`` (the contexts file is not even read, so a broken file cannot
   stand in the way of an explicit URL);
2. ``--context NAME``, else ``$AWA_CONTEXT``;
3. ``$DATABASE_URL``;
4. ``default_context`` of the contexts file.

1 and 2 name the target explicitly; 3 and 4 are fallbacks. Read-only commands take any
of them. A command that changes data refuses a fallback when the contexts file defines
more than one context (the fallback may not be the database the operator has in mind),
and on a ``production = true`` context it asks ``y/N`` on a terminal, proceeds with
``--yes``, and refuses outright when stdin is not a terminal and ``--yes`` is absent,
instead of waiting for an answer nobody can give.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

import attrs
import click

from awa.adapters._pg import conninfo
from awa.entrypoints.cli._contexts import ConfigError, ContextConfig, NamedContext, load

NO_TARGET = (
    "no database target: pass --database-url URL or --context NAME, "
    "or set DATABASE_URL, AWA_CONTEXT or a default_context"
)


@attrs.frozen
class Target:
    """A resolved database target."""

    url: str
    via: str
    explicit: bool
    context: NamedContext | None = None

    @property
    def display(self) -> str:
        """The target without secrets."""
        return conninfo.display(self.url)

    @property
    def production(self) -> bool:
        return self.context is not None and self.context.production

    def describe(self) -> str:
        """``postgresql://app@db/app (context prod, production)``-style echo text."""
        notes = [f"context {self.context.name}" if self.context is not None else f"{self.via}"]
        if self.context is not None and self.via.startswith(("AWA_CONTEXT", "default_context")):
            notes.append(f"via {self.via.split(' ', 1)[0]}")
        if self.production:
            notes.append("production")
        return f"{self.display} ({', '.join(notes)})"


class TargetError(click.ClickException):
    """A refused use of the target (production gate): one stderr line, exit 1."""

    exit_code = 1

    def show(self, file: object = None) -> None:
        click.echo(f"awa: error: {self.format_message()}", err=True)


class TargetUsageError(TargetError):
    """The target is missing, ambiguous or misconfigured: one stderr line, exit 2."""

    exit_code = 2


def resolve(
    *,
    database_url: str | None,
    context_name: str | None,
    environ: Mapping[str, str],
    config: ContextConfig | None = None,
) -> tuple[Target | None, ContextConfig | None]:
    """The target by the order above, and the contexts file if it had to be read."""
    if database_url:
        return Target(conninfo.normalize(database_url), "--database-url", explicit=True), config
    env_context = environ.get("AWA_CONTEXT", "").strip()
    name, via = (
        (context_name, f"--context {context_name}")
        if context_name
        else (env_context, f"AWA_CONTEXT={env_context}")
    )
    if name:
        config = config if config is not None else _load(environ)
        context = _get(config, name)
        return Target(_url(context, environ), via, explicit=True, context=context), config
    env_url = environ.get("DATABASE_URL", "").strip()
    if env_url:
        return Target(conninfo.normalize(env_url), "DATABASE_URL", explicit=False), config
    config = config if config is not None else _load(environ)
    if config.default_context is not None:
        context = _get(config, config.default_context)
        via = f"default_context {context.name}"
        return Target(_url(context, environ), via, explicit=False, context=context), config
    return None, config


def check_mutation(
    target: Target,
    config: ContextConfig | None,
    *,
    command: str,
    yes: bool,
    environ: Mapping[str, str],
) -> None:
    """Refuse (or ask about) a data-changing ``command`` on ``target``."""
    if not target.explicit:
        config = config if config is not None else _load(environ)
        if len(config.contexts) > 1:
            names = ", ".join(sorted(config.contexts))
            raise TargetUsageError(
                f"`{command}` changes data, and {config.path} defines {len(config.contexts)} "
                f"contexts ({names}), but the target came only from {target.via}: name it "
                "with --context NAME (or AWA_CONTEXT) or --database-url",
            )
    if not target.production or yes:
        return
    assert target.context is not None
    where = f"production context {target.context.name!r} ({target.display})"
    if not _stdin_is_terminal():
        raise TargetError(
            f"refusing `{command}` on {where}: stdin is not a terminal, so nobody can confirm; "
            "pass --yes to confirm non-interactively"
        )
    if not click.confirm(f"awa: `{command}` will change data in {where}. Continue?", err=True):
        raise TargetError(f"`{command}` not confirmed; nothing was changed")


def _stdin_is_terminal() -> bool:
    stream = sys.stdin
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        return False


def _load(environ: Mapping[str, str]) -> ContextConfig:
    try:
        config = load(environ)
    except ConfigError as exc:
        raise TargetUsageError(str(exc)) from None
    for warning in config.warnings:
        click.echo(f"awa: warning: {warning}", err=True)
    return config


def _get(config: ContextConfig, name: str) -> NamedContext:
    try:
        return config.get(name)
    except ConfigError as exc:
        raise TargetUsageError(str(exc)) from None


def _url(context: NamedContext, environ: Mapping[str, str]) -> str:
    try:
        return conninfo.normalize(context.resolve(environ))
    except ConfigError as exc:
        raise TargetUsageError(str(exc)) from None
