"""``awa dev``: run example jobs through a real worker with a live progress display."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from awa.entrypoints import logs
from awa.entrypoints.cli._common import fail, mutating, state
from awa.entrypoints.cli._logging import log_options


@click.command()
@mutating
@click.option(
    "--jobs", type=click.IntRange(min=1), default=300, show_default=True, help="Jobs to enqueue."
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Handlers running at once per queue.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Stop after this many seconds even if jobs are unfinished (exit code 1).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="AWA_DEV_DATA_DIR",
    default=None,
    help="Data directory of the embedded Postgres used without a database URL "
    "(default: the user's cache directory, or a temporary one when running as root).",
)
# The tour's own display reports every outcome; log lines (stderr) are opt-in.
@log_options("critical")
def dev(
    jobs: int,
    workers: int,
    seconds: float | None,
    data_dir: Path | None,
    log_level: str,
    log_format: str,
) -> None:
    """Enqueue example jobs, work them with a live display, and print a summary.

    Uses --database-url / $DATABASE_URL when given; otherwise starts an embedded Postgres
    for the duration of the run, stopped (and its temporary data directory removed) on
    exit, SIGINT, SIGTERM or SIGHUP. --log-level info (or debug) adds the worker's log
    lines on stderr.
    """
    from awa.entrypoints import dev as dev_tour
    from awa.entrypoints.dev_embedded import EMBEDDED_MISSING, Interrupted

    logs.configure(log_level, log_format)
    url = state().optional_database_url()
    options = dev_tour.DevOptions(jobs=jobs, workers=workers, seconds=seconds)
    try:
        code = dev_tour.main(url, options, data_dir=data_dir)
    except RuntimeError as exc:
        if str(exc) == EMBEDDED_MISSING:
            raise fail(str(exc)) from exc
        raise
    except Interrupted as stopped:
        # Everything was shut down on the way here; a closed terminal may not take this.
        with contextlib.suppress(OSError):
            click.echo(f"awa dev: stopped by {stopped}", err=True)
        raise click.exceptions.Exit(128 + stopped.signum) from None
    if code != 0:
        raise click.exceptions.Exit(code)
