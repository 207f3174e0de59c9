"""``awa migrate``: apply schema migrations, or print their SQL for review.

The SQL ``migrate`` runs is the migration stream, then the schema files (one per function
or view) whose content the database has not applied; ``--sql`` and ``--pending`` print
both, ``--from`` / ``--to`` / ``--version`` select migrations only. ``--extract-to DIR``
writes the same selection as files instead, named as migration tools that apply a
directory in name order expect (``V<version>__<description>.sql``, then the schema files
as ``R__<order>_<object>.sql``)."""

from __future__ import annotations

import re
from pathlib import Path

import click

from awa.entrypoints.cli._common import fail, mutating, run, state, with_schema_admin

SELECTION_NEEDS_SQL = "--from, --to and --version select SQL to print; add --sql or --extract-to"
SQL_OR_EXTRACT = "--sql prints and --extract-to writes files: give one of them"
PENDING_EXCLUSIVE = "--pending cannot be combined with --from, --to or --version"
VERSION_EXCLUSIVE = "--version cannot be combined with --from or --to"
FRESH_INSTALL = (
    "Storage engine: queue storage (schema awa); a database installed fresh starts on it"
)


def _database_version(*, writes: bool) -> int:
    url = state().database_url(mutating=writes)
    return with_schema_admin(url, lambda admin: admin.schema_version())


def _print_sql(selected: list[tuple[int, str, str]]) -> None:
    for version, description, sql in selected:
        click.echo(f"-- Migration V{version}: {description}")
        click.echo(sql.rstrip("\n"))
        click.echo("")


def _print_schema_files(files: list[tuple[str, str]]) -> None:
    for path, sql in files:
        click.echo(f"-- Schema file {path}")
        click.echo(sql.rstrip("\n"))
        click.echo("")


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def _extract(
    directory: Path, migrations: list[tuple[int, str, str]], files: list[tuple[str, str]]
) -> None:
    """Write each migration and schema file of the selection into ``directory``."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for version, description, sql in migrations:
            _write(directory / f"V{version}__{_UNSAFE.sub('_', description)}.sql", sql)
        # Schema files apply after the stream, in this order (their dependencies first).
        for order, (path, sql) in enumerate(files, start=1):
            name = _UNSAFE.sub("_", Path(path).stem)
            _write(directory / f"R__{order:04d}_{name}.sql", sql)
    except OSError as exc:
        raise click.ClickException(f"cannot extract migrations to {directory}: {exc}") from None


def _write(path: Path, sql: str) -> None:
    path.write_text(sql if sql.endswith("\n") else sql + "\n", encoding="utf-8")
    click.echo(f"Extracted: {path}")


@click.command()
@mutating
@click.option("--sql", "print_sql", is_flag=True, help="Print the SQL instead of applying it.")
@click.option(
    "--pending",
    is_flag=True,
    help="Print only the migrations and schema files the database has not applied.",
)
@click.option(
    "--from", "from_version", type=click.IntRange(min=0), help="Start after this version."
)
@click.option("--to", "to_version", type=click.IntRange(min=0), help="Stop at this version.")
@click.option("--version", "version", type=click.IntRange(min=1), help="Only this version.")
@click.option(
    "--extract-to",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the migration SQL into this directory instead of applying it.",
)
def migrate(
    print_sql: bool,
    pending: bool,
    from_version: int | None,
    to_version: int | None,
    version: int | None,
    extract_to: Path | None,
) -> None:
    """Apply pending migrations (or print SQL with --sql / --pending, or write it to files
    with --extract-to)."""
    from awa.entrypoints import bootstrap

    ranged = from_version is not None or to_version is not None
    if pending and (ranged or version is not None):
        raise click.UsageError(PENDING_EXCLUSIVE)
    if version is not None and ranged:
        raise click.UsageError(VERSION_EXCLUSIVE)
    if print_sql and extract_to is not None:
        raise click.UsageError(SQL_OR_EXTRACT)
    if (ranged or version is not None) and not (print_sql or extract_to is not None):
        raise click.UsageError(SELECTION_NEEDS_SQL)
    latest = bootstrap.current_migration_version()
    if pending:
        url = state().database_url(mutating=False)
        adopt_first = run(bootstrap.awa_pg_refusal(url))
        if adopt_first is not None:
            raise fail(adopt_first)
        migrations = bootstrap.migrations_range(_database_version(writes=False), latest)
        files = with_schema_admin(url, lambda admin: admin.pending_schema_files())
        if extract_to is not None:
            _extract(extract_to, migrations, files)
            return
        _print_sql(migrations)
        _print_schema_files(files)
        return
    if print_sql or extract_to is not None:
        if version is not None:
            selected = bootstrap.migrations_range(version - 1, version)
            if not selected:
                raise click.BadParameter(
                    f"no migration has version {version}", param_hint="--version"
                )
        else:
            low = 0 if from_version is None else from_version
            high = latest if to_version is None else to_version
            selected = bootstrap.migrations_range(low, high)
        files = bootstrap.schema_files() if not ranged and version is None else []
        if extract_to is not None:
            _extract(extract_to, selected, files)
            return
        _print_sql(selected)
        _print_schema_files(files)
        return
    before = _database_version(writes=True)
    activated = run(bootstrap.migrate(state().database_url()))
    if before >= latest:
        click.echo(f"Schema already at version {before}; nothing to apply")
    else:
        applied = len(bootstrap.migrations_range(before, latest))
        click.echo(f"Applied {applied} migration(s); schema now at version {latest}")
    if activated:
        click.echo(FRESH_INSTALL)
