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
from typing import Any

import click

from awa.adapters._pg import transition as pg_transition
from awa.adapters._pg.pool import DictConnection
from awa.domain.errors import AwaError
from awa.domain.transition import TransitionStatus
from awa.entrypoints import payloads
from awa.entrypoints.cli import _db
from awa.entrypoints.cli._common import (
    cell,
    emit_json,
    fail,
    json_option,
    mutating,
    run,
    state,
    wants_json,
)

NOT_MIGRATED = (
    "the database is not migrated (awa.storage_transition_state is missing): run `awa migrate`"
)
NO_TRANSITION_FUNCTIONS = (
    "the database has no storage transition functions (schema older than 200): run `awa migrate`"
)
DEFAULT_QUEUE_SLOTS = 16
DEFAULT_LEASE_SLOTS = 8

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@click.group()
def storage() -> None:
    """Inspect and drive the storage engine transition."""


async def _status(conn: DictConnection) -> dict[str, Any] | None:
    row = await _db.transition_state(conn)
    if row is None:
        return None
    report: dict[str, Any] = {k: v for k, v in row.items() if k != "singleton"}
    if await _db.function_exists(conn, "awa.storage_status()"):
        extra = await _db.fetch_optional(conn, "SELECT * FROM awa.storage_status()")
        if extra:
            report.update(extra)
    if await _db.function_exists(conn, "awa.canonical_live_backlog()"):
        extra = await _db.fetch_optional(
            conn,
            "SELECT awa.active_queue_storage_schema() AS active_queue_storage_schema, "
            "awa.canonical_live_backlog() AS canonical_live_backlog",
        )
        if extra:
            report.update(extra)
    report["schema_version"] = await _db.schema_version(conn)
    if await _db.relation_exists(conn, "awa.ring_maintenance"):
        # What the maintenance leader last found per queue-storage schema: prune
        # outcomes, and the long transaction it is waiting for, if any (ADR 0006).
        cur = await conn.execute(
            "SELECT schema_name, concern, outcome, since, blocker_pid, blocker_xact_start, "
            "detail FROM awa.ring_maintenance ORDER BY schema_name, concern"
        )
        report["ring_maintenance"] = [
            {k: v for k, v in row.items() if v is not None} for row in await cur.fetchall()
        ]
    counts = await _db.runtime_counts(conn)
    if counts is not None:
        report["runtimes"] = counts
    return report


def _render(value: Any) -> str:
    if isinstance(value, dict | list):
        return payloads.dumps(value, sort_keys=True)
    return cell(value)


def _print_report(report: dict[str, Any], json_flag: bool) -> None:
    if wants_json(json_flag):
        emit_json(report)
        return
    width = max(len(k) for k in report)
    for key, value in report.items():
        click.echo(f"{key.ljust(width)}  {_render(value)}")


def _status_dict(status: TransitionStatus) -> dict[str, Any]:
    return {
        "current_engine": status.current_engine,
        "active_engine": status.active_engine,
        "prepared_engine": status.prepared_engine,
        "state": status.state.value,
        "transition_epoch": status.transition_epoch,
        "details": dict(status.details),
        "entered_at": status.entered_at,
        "updated_at": status.updated_at,
        "finalized_at": status.finalized_at,
    }


def _step(
    action: Callable[[DictConnection], Awaitable[TransitionStatus]],
    json_flag: bool,
    *,
    note: str | None = None,
    writes: bool | None = None,
) -> None:
    """Run one transition step on a fresh connection and print the resulting status
    (with ``note``, a dry run: the note on stderr, and ``"check": true`` in JSON)."""
    url = state().database_url(mutating=writes)

    async def go(conn: DictConnection) -> TransitionStatus:
        if not await _db.function_exists(conn, "awa.storage_status()"):
            raise fail(NO_TRANSITION_FUNCTIONS)
        return await action(conn)

    try:
        status = run(_db.with_connection(url, go))
    except AwaError as exc:
        raise fail(str(exc)) from exc
    report = _status_dict(status)
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
    report = run(_db.with_connection(url, _status))
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
    _step(lambda conn: pg_transition.prepare(conn, engine, details), json_flag)


@storage.command("prepare-queue-storage-schema")
@mutating
@click.option("--schema", required=True, help="The schema to build queue storage in.")
@click.option("--queue-slot-count", type=click.IntRange(2, 256), default=DEFAULT_QUEUE_SLOTS)
@click.option("--lease-slot-count", type=click.IntRange(1, 256), default=DEFAULT_LEASE_SLOTS)
@click.option("--reset", is_flag=True, help="Drop and rebuild the schema (never for awa).")
def prepare_queue_storage_schema(
    schema: str, queue_slot_count: int, lease_slot_count: int, reset: bool
) -> None:
    """Build the queue-storage tables in SCHEMA (idempotent unless --reset)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", schema):
        raise click.BadParameter(f"{schema!r} is not a plain SQL identifier", param_hint="--schema")
    if schema == "awa" and reset:
        raise fail("refusing to reset queue storage in schema awa")
    if schema == "awa" and (queue_slot_count, lease_slot_count) != (
        DEFAULT_QUEUE_SLOTS,
        DEFAULT_LEASE_SLOTS,
    ):
        raise fail(
            f"schema awa is installed by the migrations with {DEFAULT_QUEUE_SLOTS} queue slots "
            f"and {DEFAULT_LEASE_SLOTS} lease slots"
        )
    url = state().database_url()

    async def go(conn: DictConnection) -> bool:
        await pg_transition.install_schema(
            conn,
            schema,
            queue_slot_count=queue_slot_count,
            lease_slot_count=lease_slot_count,
            reset=reset,
        )
        return await pg_transition.queue_storage_installed(conn, schema)

    try:
        installed = run(_db.with_connection(url, go))
    except AwaError as exc:
        raise fail(str(exc)) from exc
    if not installed:
        raise fail(f"queue storage is not installed in schema {schema}")
    click.echo(f"queue storage ready in schema {schema}")


@storage.command("enter-mixed-transition")
@mutating
@json_option
def enter_mixed_transition(json_flag: bool) -> None:
    """Route new jobs to queue storage while canonical drains (from prepared)."""
    _step(pg_transition.enter_mixed_transition, json_flag)


async def _check_finalize(conn: DictConnection) -> TransitionStatus:
    # Run the real step, gates included, and roll it back.
    async with conn.transaction(force_rollback=True):
        return await pg_transition.finalize(conn)


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
            _check_finalize,
            json_flag,
            note="finalize would pass now (nothing was changed)",
            writes=False,
        )
        return
    if wait is None:
        _step(pg_transition.finalize, json_flag)
        return
    url = state().database_url()
    try:
        status = run(pg_transition.finalize_when_drained(url, timeout=wait))
    except AwaError as exc:
        raise fail(str(exc)) from exc
    _print_report(_status_dict(status), json_flag)


@storage.command()
@mutating
@json_option
def abort(json_flag: bool) -> None:
    """Go back to canonical (from prepared, or from mixed while queue storage is empty)."""
    _step(pg_transition.abort, json_flag)
