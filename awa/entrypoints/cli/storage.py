"""``awa storage ...``: the storage engine and its staged transition (ADR 0007).

``status`` reads the transition singleton; ``prepare``, ``enter-mixed-transition``,
``finalize`` and ``abort`` call the SQL functions of the same names (so the gates are the
database's, shared with external tooling); ``prepare-queue-storage-schema`` builds the
queue-storage tables in a schema. A refused step exits 1 with one line naming the gate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import click

from awa.domain.errors import AwaError, ValidationError
from awa.domain.transition import TransitionStatus
from awa.domain.validation import DEFAULT_SLOT_COUNTS, schema_name_problem, validate_slot_counts
from awa.entrypoints.cli._common import (
    cell,
    emit_json,
    fail,
    json_option,
    mutating,
    state,
    wants_json,
    with_schema_admin,
)

if TYPE_CHECKING:
    from awa.ports.admin import SchemaAdmin

NOT_MIGRATED = (
    "the database is not migrated (awa.storage_transition_state is missing): run `awa migrate`"
)
NO_TRANSITION_FUNCTIONS = (
    "the database has no storage transition functions (schema older than 200): run `awa migrate`"
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@click.group()
def storage() -> None:
    """Inspect and drive the storage engine transition."""


async def _status(admin: SchemaAdmin) -> dict[str, Any] | None:
    row = await admin.transition_state()
    if row is None:
        return None
    report: dict[str, Any] = dict(row)
    for extra in (await admin.storage_status(), await admin.transition_backlog()):
        if extra:
            report.update(extra)
    report["schema_version"] = await admin.schema_version()
    ring = await admin.ring_maintenance()
    if ring is not None:
        # What the maintenance leader last found per queue-storage schema: prune
        # outcomes, and the long transaction it is waiting for, if any (ADR 0006).
        report["ring_maintenance"] = [{k: v for k, v in r.items() if v is not None} for r in ring]
    counts = await admin.runtime_counts()
    if counts is not None:
        report["runtimes"] = counts.as_dict()
    return report


def _render(value: Any) -> str:
    if isinstance(value, dict | list):
        from awa.entrypoints import payloads

        return payloads.dumps(value, sort_keys=True)
    return cell(value)


def _print_report(report: dict[str, Any], json_flag: bool) -> None:
    if wants_json(json_flag):
        emit_json(report)
        return
    width = max(len(k) for k in report)
    for key, value in report.items():
        click.echo(f"{key.ljust(width)}  {_render(value)}")


def _step(
    action: Callable[[SchemaAdmin], Awaitable[TransitionStatus]],
    json_flag: bool,
    *,
    note: str | None = None,
    writes: bool | None = None,
) -> None:
    """Run one transition step on a fresh connection and print the resulting status
    (with ``note``, a dry run: the note on stderr, and ``"check": true`` in JSON)."""
    url = state().database_url(mutating=writes)

    async def go(admin: SchemaAdmin) -> TransitionStatus:
        if not await admin.has_transition_functions():
            raise fail(NO_TRANSITION_FUNCTIONS)
        return await action(admin)

    try:
        status = with_schema_admin(url, go)
    except AwaError as exc:
        raise fail(str(exc)) from exc
    report = status.as_row()
    if note is not None:
        click.echo(f"awa: {note}", err=True)
        report["check"] = True
    _print_report(report, json_flag)


def parse_duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """Option callback: ``90``, ``90s``, ``500ms``, ``5m`` or ``1h`` as seconds."""
    if value is None:
        return None
    match = _DURATION.match(value)
    if match is None:
        raise click.BadParameter(f"{value!r} is not a duration like 30s, 5m or 1h")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]


def _details(ctx: click.Context, param: click.Parameter, value: str | None) -> dict[str, Any]:
    if value is None:
        return {}
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc.msg}") from None
    if not isinstance(parsed, dict):
        raise click.BadParameter("must be a JSON object")
    return parsed


@storage.command()
@json_option
def status(json_flag: bool) -> None:
    """Print the storage transition state (engine, state, epoch, backlog, runtime counts)."""
    url = state().database_url()
    report = with_schema_admin(url, _status)
    if report is None:
        raise fail(NOT_MIGRATED)
    _print_report(report, json_flag)


@storage.command()
@mutating
@click.option("--engine", required=True, help="The engine to move to (queue_storage).")
@click.option(
    "--details",
    callback=_details,
    metavar="JSON",
    help='A JSON object recorded with the transition, e.g. \'{"schema": "awa"}\'.',
)
@json_option
def prepare(engine: str, details: dict[str, Any], json_flag: bool) -> None:
    """Prepare the transition to ENGINE (from canonical or prepared)."""
    _step(lambda admin: admin.prepare(engine, details), json_flag)


@storage.command("prepare-queue-storage-schema")
@mutating
@click.option("--schema", required=True, help="The schema to build queue storage in.")
@click.option(
    "--queue-slot-count",
    type=click.IntRange(2, 256),
    default=DEFAULT_SLOT_COUNTS["queue_slot_count"],
    show_default=True,
)
@click.option(
    "--lease-slot-count",
    type=click.IntRange(1, 256),
    default=DEFAULT_SLOT_COUNTS["lease_slot_count"],
    show_default=True,
)
@click.option("--reset", is_flag=True, help="Drop and rebuild the schema (never for awa).")
def prepare_queue_storage_schema(
    schema: str, queue_slot_count: int, lease_slot_count: int, reset: bool
) -> None:
    """Build the queue-storage tables in SCHEMA (idempotent unless --reset)."""
    problem = schema_name_problem(schema)
    if problem is not None:
        raise click.BadParameter(problem, param_hint="--schema")
    if schema == "awa" and reset:
        raise fail("refusing to reset queue storage in schema awa")
    try:
        validate_slot_counts(
            schema,
            {"queue_slot_count": queue_slot_count, "lease_slot_count": lease_slot_count},
        )
    except ValidationError as exc:
        raise fail(str(exc)) from exc
    url = state().database_url()

    async def go(admin: SchemaAdmin) -> bool:
        return await admin.install_queue_storage_schema(
            schema,
            queue_slot_count=queue_slot_count,
            lease_slot_count=lease_slot_count,
            reset=reset,
        )

    try:
        installed = with_schema_admin(url, go)
    except AwaError as exc:
        raise fail(str(exc)) from exc
    if not installed:
        raise fail(f"queue storage is not installed in schema {schema}")
    click.echo(f"queue storage ready in schema {schema}")


@storage.command("enter-mixed-transition")
@mutating
@click.option(
    "--quiesced",
    is_flag=True,
    help="Flip with every worker stopped: refused while any runtime heartbeats. Keep the "
    "workers stopped until this returns, then restart them.",
)
@json_option
def enter_mixed_transition(quiesced: bool, json_flag: bool) -> None:
    """Route new jobs to queue storage while canonical drains (from prepared)."""
    _step(lambda admin: admin.enter_mixed_transition(quiesced=quiesced), json_flag)


@storage.command("rebuild-terminal-counters")
@mutating
def rebuild_terminal_counters() -> None:
    """Recount queue storage's per-queue state counters from its jobs (after an incident
    or drift); best run on a quiesced fleet."""
    url = state().database_url()
    try:
        rebuilt = with_schema_admin(url, lambda admin: admin.rebuild_terminal_counters())
    except AwaError as exc:
        raise fail(str(exc)) from exc
    if rebuilt is None:
        click.echo("No queue-storage schema is active: canonical storage keeps no counters")
        return
    schema, written = rebuilt
    click.echo(f"Rebuilt {written} counter(s) in schema {schema}")


@storage.command()
@mutating
@click.option("--check", is_flag=True, help="Only report whether finalize would pass now.")
@click.option(
    "--wait",
    "wait",
    callback=parse_duration,
    metavar="DURATION",
    help="Retry until the canonical backlog drains, for at most DURATION (e.g. 5m).",
)
@json_option
def finalize(check: bool, wait: float | None, json_flag: bool) -> None:
    """Make queue storage the only engine once the canonical backlog is drained."""
    if check and wait is not None:
        raise click.UsageError("--check and --wait cannot be combined")
    if check:
        _step(
            lambda admin: admin.check_finalize(),
            json_flag,
            note="finalize would pass now (nothing was changed)",
            writes=False,
        )
        return
    if wait is None:
        _step(lambda admin: admin.finalize(), json_flag)
        return
    url = state().database_url()
    try:
        status = with_schema_admin(url, lambda admin: admin.finalize_when_drained(wait))
    except AwaError as exc:
        raise fail(str(exc)) from exc
    _print_report(status.as_row(), json_flag)


@storage.command()
@mutating
@json_option
def abort(json_flag: bool) -> None:
    """Go back to canonical (from prepared, or from mixed while queue storage is empty)."""
    _step(lambda admin: admin.abort(), json_flag)
