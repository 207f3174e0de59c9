"""``awa context``: what this CLI points at, and the named contexts it could point at.

``awa context`` connects to the resolved target and reports it; ``awa context list`` and
``awa context show [NAME]`` read only the contexts file (no database is contacted).
"""

from __future__ import annotations

import os
from typing import Any

import click

from awa.adapters._pg import conninfo
from awa.entrypoints.cli._common import (
    emit_json,
    fail,
    json_option,
    print_table,
    run,
    state,
    wants_json,
)
from awa.entrypoints.cli._contexts import ConfigError, ContextConfig, NamedContext, load
from awa.entrypoints.cli.status import echo_rows, inspect_target, package_version

LIST_HEADERS = ("CURRENT", "NAME", "DEFAULT", "PRODUCTION", "SOURCE", "TARGET")


@click.group(invoke_without_command=True)
@json_option
@click.pass_context
def context(ctx: click.Context, json_flag: bool) -> None:
    """Show the target database (package, schema version, storage engine).

    `awa context list` and `awa context show [NAME]` describe the named contexts of the
    config file without connecting anywhere.
    """
    if ctx.invoked_subcommand is not None:
        return
    from awa.entrypoints import bootstrap

    cli_state = state()
    url = cli_state.database_url()
    report = run(inspect_target(url, 5))
    target = cli_state.target()
    info: dict[str, Any] = {
        "database": cli_state.display_url(),
        "context": None if target is None or target.context is None else target.context.name,
        "production": bool(target and target.production),
        "resolved_via": None if target is None else target.via,
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
        echo_rows([(k.replace("_", " "), _text(v)) for k, v in info.items()])
    if not report["reachable"]:
        raise click.exceptions.Exit(1)


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _config() -> ContextConfig:
    try:
        config = load(os.environ)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    for warning in config.warnings:
        click.echo(f"awa: warning: {warning}", err=True)
    return config


def _current_name(config: ContextConfig) -> str | None:
    """The context the global options and environment select right now, if any."""
    cli_state = state()
    if cli_state.database_url_option:
        return None
    name = cli_state.context_option or os.environ.get("AWA_CONTEXT", "").strip()
    if name:
        return name
    if os.environ.get("DATABASE_URL", "").strip():
        return None
    return config.default_context


def _describe(config: ContextConfig, entry: NamedContext, current: str | None) -> dict[str, Any]:
    try:
        target: str | None = conninfo.display(entry.resolve(os.environ))
        problem = None
    except ConfigError as exc:
        target, problem = None, str(exc)
    described: dict[str, Any] = {
        "name": entry.name,
        "current": entry.name == current,
        "default": entry.name == config.default_context,
        "production": entry.production,
        "source": entry.source(),
        "target": target,
    }
    if entry.description is not None:
        described["description"] = entry.description
    if problem is not None:
        described["problem"] = problem
    return described


@context.command("list")
@json_option
def list_contexts(json_flag: bool) -> None:
    """List the named contexts, marking the current, default and production ones."""
    config = _config()
    current = _current_name(config)
    rows = [_describe(config, config.contexts[n], current) for n in sorted(config.contexts)]
    if wants_json(json_flag):
        emit_json({"config": str(config.path), "exists": config.exists, "contexts": rows})
        return
    if not rows:
        where = str(config.path) if config.exists else f"{config.path} (not found)"
        click.echo(f"No contexts defined in {where}")
        return
    print_table(
        LIST_HEADERS,
        [
            [
                "*" if r["current"] else "",
                r["name"],
                "yes" if r["default"] else "",
                "yes" if r["production"] else "no",
                r["source"],
                r["target"] if r["target"] is not None else f"({r['problem']})",
            ]
            for r in rows
        ],
    )


@context.command("show")
@click.argument("name", required=False)
@json_option
def show_context(name: str | None, json_flag: bool) -> None:
    """Describe context NAME (default: the one currently selected)."""
    config = _config()
    current = _current_name(config)
    chosen = name or current
    if chosen is None:
        raise fail(
            "no context is selected (pass NAME, --context, AWA_CONTEXT or set default_context)"
        )
    try:
        entry = config.get(chosen)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    described = _describe(config, entry, current)
    described["config"] = str(config.path)
    if wants_json(json_flag):
        emit_json(described)
        return
    echo_rows([(k, _text(v)) for k, v in described.items()])
