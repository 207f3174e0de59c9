"""``awa health`` (database readiness) and ``awa context`` (what this CLI is pointed at)."""

from __future__ import annotations

import importlib.metadata
from typing import Any

import click
from psycopg.conninfo import make_conninfo

from awa.adapters._pg.pool import DictConnection, connect
from awa.domain.schema import schema_compatible
from awa.entrypoints import bootstrap
from awa.entrypoints.cli import _db
from awa.entrypoints.cli._common import emit_json, first_line, json_option, run, state, wants_json

PACKAGE = "awa-py"


def package_version() -> str:
    """The installed package version, or ``unknown`` when running from a bare checkout."""
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


async def _inspect(url: str, timeout: int) -> dict[str, Any]:
    report: dict[str, Any] = {"reachable": False}
    try:
        conn = await connect(make_conninfo(url, connect_timeout=str(timeout)))
    except Exception as exc:
        report["error"] = first_line(exc)
        return report
    try:
        report["reachable"] = True
        report.update(await _describe(conn))
    finally:
        await conn.close()
    return report


async def _describe(conn: DictConnection) -> dict[str, Any]:
    transition = await _db.transition_state(conn)
    return {
        "schema_version": await _db.schema_version(conn),
        "storage": None
        if transition is None
        else {
            "state": transition.get("state"),
            "active_engine": transition.get("active_engine"),
            "prepared_engine": transition.get("prepared_engine"),
        },
        "runtimes": await _db.runtime_counts(conn),
    }


def _problems(report: dict[str, Any], expected: int) -> list[str]:
    if not report["reachable"]:
        return [f"database unreachable: {report.get('error', 'unknown error')}"]
    version = int(report["schema_version"])
    # A newer schema is compatible: migrations only add, so migrating first and rolling
    # the workers afterwards is the normal order.
    if not schema_compatible(version, expected):
        return [f"schema version {version} is behind the package ({expected}): run `awa migrate`"]
    return []


def _rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [("database", str(report["database"])), ("reachable", _yes(report["reachable"]))]
    if "schema_version" in report:
        rows.append(
            ("schema", f"{report['schema_version']} (package {report['package_schema_version']})")
        )
    storage = report.get("storage")
    if storage is not None:
        rows.append(("storage", f"{storage['active_engine']} (state {storage['state']})"))
    runtimes = report.get("runtimes")
    if runtimes is not None:
        rows.append(("runtimes", f"{runtimes['live']} live, {runtimes['unhealthy']} unhealthy"))
    return rows


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _echo_rows(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key.ljust(width)}  {value}")


@click.command()
@click.option(
    "--connect-timeout", type=click.IntRange(min=1), default=5, show_default=True, help="Seconds."
)
@json_option
def health(connect_timeout: int, json_flag: bool) -> None:
    """Check the database is reachable and migrated to this package's schema version."""
    cli_state = state()
    url = cli_state.database_url()
    expected = bootstrap.current_migration_version()
    report = run(_inspect(url, connect_timeout))
    report["database"] = cli_state.display_url()
    report["package_schema_version"] = expected
    problems = _problems(report, expected)
    report["problems"] = problems
    report["ready"] = not problems
    if wants_json(json_flag):
        emit_json(report)
    else:
        rows = _rows(report)
        rows.extend(("problem", p) for p in problems)
        rows.append(("status", "ok" if not problems else "unhealthy"))
        _echo_rows(rows)
    if problems:
        raise click.exceptions.Exit(1)


@click.command()
@json_option
def context(json_flag: bool) -> None:
    """Show the database target, package version, schema version and storage engine."""
    cli_state = state()
    url = cli_state.database_url()
    report = run(_inspect(url, 5))
    info: dict[str, Any] = {
        "database": cli_state.display_url(),
        "package_version": package_version(),
        "package_schema_version": bootstrap.current_migration_version(),
        "schema_version": report.get("schema_version"),
        "active_engine": (report.get("storage") or {}).get("active_engine"),
        "transition_state": (report.get("storage") or {}).get("state"),
    }
    if not report["reachable"]:
        info["error"] = report.get("error")
    if wants_json(json_flag):
        emit_json(info)
    else:
        rows = [(k.replace("_", " "), "-" if v is None else str(v)) for k, v in info.items()]
        _echo_rows(rows)
    if not report["reachable"]:
        raise click.exceptions.Exit(1)
