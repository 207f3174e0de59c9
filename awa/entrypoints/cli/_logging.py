"""``--log-level`` / ``--log-format`` for the commands that run a worker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from awa.entrypoints import logs

F = TypeVar("F", bound=Callable[..., Any])


def log_options(default_level: str) -> Callable[[F], F]:
    """Add ``--log-level`` (``$AWA_LOG_LEVEL``) and ``--log-format`` (``$AWA_LOG_FORMAT``)."""

    def decorate(command: F) -> F:
        command = click.option(
            "--log-format",
            envvar=logs.FORMAT_ENV,
            type=click.Choice(logs.FORMATS, case_sensitive=False),
            default="text",
            show_default=True,
            help=f"Log line format on stderr (${logs.FORMAT_ENV}).",
        )(command)
        command = click.option(
            "--log-level",
            envvar=logs.LEVEL_ENV,
            type=click.Choice(logs.LEVELS, case_sensitive=False),
            default=default_level,
            show_default=True,
            help=f"Lowest level logged (${logs.LEVEL_ENV}); job completions are debug.",
        )(command)
        return command

    return decorate
