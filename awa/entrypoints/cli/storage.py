"""``awa storage ...``: the storage engine and its staged transition.

``status`` reads the transition singleton (and ``awa.storage_status()`` once that function
exists). The transition steps (prepare, enter-mixed-transition, finalize, abort) register
on the :data:`storage` group defined here.
"""

from __future__ import annotations

import json
from typing import Any

import click

from awa.adapters._pg.pool import DictConnection
from awa.entrypoints.cli import _db
from awa.entrypoints.cli._common import cell, emit_json, fail, json_option, run, state, wants_json

NOT_MIGRATED = (
    "the database is not migrated (awa.storage_transition_state is missing): run `awa migrate`"
)


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
    report["schema_version"] = await _db.schema_version(conn)
    counts = await _db.runtime_counts(conn)
    if counts is not None:
        report["runtimes"] = counts
    return report


def _render(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, default=str)
    return cell(value)


@storage.command()
@json_option
def status(json_flag: bool) -> None:
    """Print the storage transition state (engine, state, epoch, runtime counts)."""
    url = state().database_url()
    report = run(_db.with_connection(url, _status))
    if report is None:
        raise fail(NOT_MIGRATED)
    if wants_json(json_flag):
        emit_json(report)
        return
    width = max(len(k) for k in report)
    for key, value in report.items():
        click.echo(f"{key.ljust(width)}  {_render(value)}")
