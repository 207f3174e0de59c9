"""``awa health``: database readiness (reachable, migrated, storage state, runtimes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from awa._version import __version__
from awa.domain.engine_notice import engine_notice
from awa.domain.errors import SchemaNotMigrated
from awa.domain.schema import schema_compatible
from awa.domain.transition import TransitionState, TransitionStatus
from awa.entrypoints.cli._common import emit_json, first_line, json_option, run, state, wants_json
from awa.entrypoints.environment import LISTEN_URL_ENV

if TYPE_CHECKING:
    from awa.ports.admin import SchemaAdmin


def package_version() -> str:
    """The package version (``awa.__version__``, which the package metadata is built from)."""
    return __version__


async def inspect_target(
    url: str, timeout: int, *, listen_url: str | None = None, wakeups: bool = False
) -> dict[str, Any]:
    """What ``awa health`` reports; with ``wakeups``, also how the database URL is
    connected (``"connection"``: ``direct`` or ``transaction`` for a transaction-mode
    pooler) and how a worker would be woken (``"wakeups"``: ``listen`` when a test
    notification on ``listen_url``, default ``url``, comes back, else ``polling`` with
    ``"wakeups_reason"``)."""
    from awa.entrypoints import bootstrap

    report: dict[str, Any] = {"reachable": False}
    try:
        admin = await bootstrap.connect_schema_admin(url, connect_timeout=timeout)
    except Exception as exc:
        report["error"] = first_line(exc)
        return report
    try:
        report["reachable"] = True
        report.update(await _describe(admin))
    except SchemaNotMigrated as exc:
        adopt_first = await bootstrap.awa_pg_refusal(url)
        if adopt_first is None:
            raise
        raise SchemaNotMigrated(adopt_first) from exc
    finally:
        await admin.close()
    if wakeups:
        report["connection"] = await bootstrap.connection_mode(url)
        mode, reason = await bootstrap.probe_wakeups(url, listen_url)
        report["wakeups"] = mode
        if reason is not None:
            report["wakeups_reason"] = reason
    return report


async def _describe(admin: SchemaAdmin) -> dict[str, Any]:
    transition = await admin.transition_state()
    counts = await admin.runtime_counts()
    return {
        "schema_version": await admin.schema_version(),
        "storage": None if transition is None else _storage(transition),
        "runtimes": None if counts is None else counts.as_dict(),
        "leader": _leader(await admin.leader_lease()),
    }


def _leader(lease: dict[str, Any] | None) -> dict[str, Any] | None:
    """The maintenance lease as ``awa health`` reports it (``None``: nobody ever led)."""
    if lease is None:
        return None
    return {
        "holder": lease["holder"],
        "term": lease["term"],
        "live": lease["live"],
        "expires_in_s": round(float(lease["expires_in"]), 1),
        "renewed_at": lease["renewed_at"].isoformat(),
    }


def _storage(transition: dict[str, Any]) -> dict[str, Any]:
    status = TransitionStatus.from_row(transition)
    notice = engine_notice(status)
    return {
        "state": status.state.value,
        "active_engine": status.active_engine,
        "prepared_engine": status.prepared_engine,
        "schema": None if status.state is TransitionState.CANONICAL else status.schema,
        "engine": notice.text,
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
        rows.append(("engine", storage["engine"].removeprefix("storage engine: ")))
    runtimes = report.get("runtimes")
    if runtimes is not None:
        rows.append(("runtimes", f"{runtimes['live']} live, {runtimes['unhealthy']} unhealthy"))
    if "connection" in report:
        rows.append(("connection", str(report["connection"])))
    if "wakeups" in report:
        reason = report.get("wakeups_reason")
        rows.append(("wakeups", str(report["wakeups"]) + (f" ({reason})" if reason else "")))
    if "leader" in report:
        rows.append(("leader", _leader_row(report["leader"])))
    return rows


def _leader_row(leader: dict[str, Any] | None) -> str:
    if leader is None:
        return "none yet (no worker has led maintenance)"
    if not leader["live"]:
        return (
            f"none: the lease of {leader['holder']} (term {leader['term']}) expired; "
            f"a running worker takes it over"
        )
    return f"{leader['holder']} (term {leader['term']}, lease {leader['expires_in_s']} s left)"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def echo_rows(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key.ljust(width)}  {value}")


@click.command()
@click.option(
    "--connect-timeout", type=click.IntRange(min=1), default=5, show_default=True, help="Seconds."
)
@click.option(
    "--listen-database-url",
    "listen_url",
    envvar=LISTEN_URL_ENV,
    metavar="URL",
    default=None,
    help=f"Where workers listen for wake-ups (${LISTEN_URL_ENV}; default the database).",
)
@json_option
def health(connect_timeout: int, listen_url: str | None, json_flag: bool) -> None:
    """Check the database is reachable and migrated to this package's schema version, and
    report how workers would connect and be woken (notifications or polling)."""
    from awa.entrypoints import bootstrap

    cli_state = state()
    url = cli_state.database_url()
    expected = bootstrap.current_migration_version()
    report = run(inspect_target(url, connect_timeout, listen_url=listen_url or None, wakeups=True))
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
        echo_rows(rows)
    if problems:
        raise click.exceptions.Exit(1)
