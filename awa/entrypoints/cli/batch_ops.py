"""``awa batch-ops ...``: preview, submit, inspect, cancel and purge batch operations.

``--spec`` and ``--filter`` take JSON objects, e.g.
``awa batch-ops submit --op-kind move_queue --spec '{"queue": "bulk"}'
--filter '{"queue": "default", "tag": "import"}'``. A running worker's maintenance leader
executes submitted operations. Output is JSON.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from awa.entrypoints.cli._common import emit_json, parse_iso, with_client

if TYPE_CHECKING:
    from awa.entrypoints.client_async import AsyncClient

OP_KINDS = ("set_priority", "move_queue")
STATES = ("pending", "scanning", "running", "cancelling", "completed", "cancelled", "failed")


def _json_object(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise click.BadParameter("must be a JSON object")
    return parsed


_op_kind = click.option(
    "--op-kind", type=click.Choice(OP_KINDS), required=True, help="What to do to each job."
)
_spec = click.option(
    "--spec",
    callback=_json_object,
    required=True,
    metavar="JSON",
    help='The change: {"priority": N} or {"queue": NAME[, "priority": N]}.',
)
_filter = click.option(
    "--filter",
    "filter_",
    callback=_json_object,
    metavar="JSON",
    help="kind, queue, ids, tag, state, created_at_gte, created_at_lt (RFC 3339).",
)


@click.group("batch-ops")
def batch_ops() -> None:
    """Durable batch changes of queued jobs (set_priority, move_queue)."""


@batch_ops.command("list")
@click.option("--state", type=click.Choice(STATES), help="Only operations in this state.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
def list_ops(state: str | None, limit: int) -> None:
    """List operations, newest first."""

    async def go(client: AsyncClient) -> Any:
        return await client.list_batch_operations(state=state, limit=limit)  # type: ignore[arg-type]

    emit_json(with_client(go))


@batch_ops.command("get")
@click.argument("operation_id")
def get_op(operation_id: str) -> None:
    """Show one operation and its progress."""

    async def go(client: AsyncClient) -> Any:
        return await client.get_batch_operation(operation_id)

    emit_json(with_client(go))


@batch_ops.command()
@_op_kind
@_spec
@_filter
def preview(op_kind: str, spec: dict[str, Any], filter_: dict[str, Any] | None) -> None:
    """How many queued jobs an operation would change now, with a sample."""

    async def go(client: AsyncClient) -> Any:
        return await client.preview_batch_operation(
            op_kind,  # type: ignore[arg-type]
            spec=spec,
            filter=filter_,  # type: ignore[arg-type]
        )

    emit_json(with_client(go))


@batch_ops.command()
@_op_kind
@_spec
@_filter
@click.option("--submitted-by", help="Who asked for it (recorded on the operation).")
@click.option("--all", "all_", is_flag=True, help="Allow an empty filter (every queued job).")
def submit(
    op_kind: str,
    spec: dict[str, Any],
    filter_: dict[str, Any] | None,
    submitted_by: str | None,
    all_: bool,
) -> None:
    """Submit an operation for the maintenance leader to run."""

    async def go(client: AsyncClient) -> Any:
        return await client.submit_batch_operation(
            op_kind,  # type: ignore[arg-type]
            spec=spec,
            filter=filter_,  # type: ignore[arg-type]
            submitted_by=submitted_by,
            allow_all=all_,
        )

    emit_json(with_client(go))


@batch_ops.command()
@click.argument("operation_id")
def cancel(operation_id: str) -> None:
    """Ask an operation to stop at its next chunk (jobs already changed stay changed)."""

    async def go(client: AsyncClient) -> Any:
        return await client.cancel_batch_operation(operation_id)

    emit_json(with_client(go))


@batch_ops.command()
@click.option(
    "--before",
    callback=parse_iso,
    required=True,
    metavar="ISO",
    help="Delete finished operations finalized before this time.",
)
@click.option("--limit", type=click.IntRange(min=1), default=1000, show_default=True)
def purge(before: datetime, limit: int) -> None:
    """Delete finished operations (never pending or running ones)."""

    async def go(client: AsyncClient) -> int:
        return await client.purge_batch_operations(before, limit=limit)

    emit_json({"purged": with_client(go)})
