"""``awa batch show ID``: a batch's progress (ADR 0035), as ``client.get_batch`` reads it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from awa.domain.errors import JobNotFound
from awa.entrypoints.cli._common import emit_json, fail, json_option, wants_json, with_client

if TYPE_CHECKING:
    from awa.entrypoints.client_async import AsyncClient


@click.group()
def batch() -> None:
    """Inspect batches (jobs inserted with a completion callback, ``awa.Batch``)."""


@batch.command()
@click.argument("batch_id", type=int)
@json_option
def show(batch_id: int, json_flag: bool) -> None:
    """Show a batch's progress: how many of its jobs completed, failed, were cancelled
    and are pending, and its callback job's state. BATCH_ID is the callback's job id."""

    async def go(client: AsyncClient) -> dict[str, Any] | None:
        from awa.entrypoints.job_graph import batch_json

        try:
            return batch_json(await client.get_batch(batch_id))
        except JobNotFound:
            return None

    doc = with_client(go)
    if doc is None:
        raise fail(f"batch {batch_id} not found (a batch's id is its callback job's id)")
    if wants_json(json_flag):
        emit_json(doc)
        return
    state = doc["callback_state"] or "gone (retention removed its row)"
    click.echo(
        f"Batch {doc['batch_id']}: {doc['size']} job(s), {doc['completed']} completed, "
        f"{doc['failed']} failed, {doc['cancelled']} cancelled, {doc['pending']} pending"
    )
    click.echo(f"Callback: job {doc['batch_id']}, {state}")
