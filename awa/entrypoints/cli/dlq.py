"""``awa dlq ...``: browse, retry, move into and purge the dead-letter queue.

Bulk operations need a filter (``--kind``, ``--queue``, ``--tag``) or an explicit ``--all``;
without either they are refused before the database is touched.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from awa.entrypoints.cli._common import (
    emit_json,
    fail,
    json_option,
    mutating,
    parse_iso,
    print_table,
    wants_json,
    with_client,
)
from awa.entrypoints.job import rfc3339
from awa.entrypoints.results import DlqEntry

if TYPE_CHECKING:
    from awa.entrypoints.client_async import AsyncClient

LIST_HEADERS = ("JOB_ID", "KIND", "QUEUE", "ATT", "REASON", "DLQ_AT")


def _refuse_unfiltered(operation: str, filters: str, *values: Any, allow_all: bool) -> None:
    if not allow_all and all(v is None for v in values):
        raise fail(f"{operation} needs a filter ({filters}) or --all to act on every entry")


def _entry_dict(entry: DlqEntry) -> dict[str, Any]:
    from awa.entrypoints.client_admin import job_dict

    return {
        "job": job_dict(entry.job.record),
        "reason": entry.reason,
        "dlq_at": rfc3339(entry.dlq_at),
        "original_run_lease": entry.original_run_lease,
    }


@click.group()
def dlq() -> None:
    """Inspect and act on the dead-letter queue."""


@dlq.command("list")
@click.option("--kind", help="Only entries of this kind.")
@click.option("--queue", help="Only entries from this queue.")
@click.option("--tag", help="Only entries carrying this tag.")
@click.option("--before-id", type=int, help="Page cursor: entries before this job id.")
@click.option(
    "--before-dlq-at",
    callback=parse_iso,
    metavar="ISO",
    help="Page cursor: entries before this time.",
)
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@json_option
def list_entries(
    kind: str | None,
    queue: str | None,
    tag: str | None,
    before_id: int | None,
    before_dlq_at: datetime | None,
    limit: int,
    json_flag: bool,
) -> None:
    """List DLQ entries, newest first, and print the cursor of the next page."""

    async def go(client: AsyncClient) -> list[DlqEntry]:
        return await client.list_dlq(
            kind=kind,
            queue=queue,
            tag=tag,
            before_id=before_id,
            before_dlq_at=before_dlq_at,
            limit=limit,
        )

    entries = with_client(go)
    cursor = None
    if len(entries) == limit:
        last = entries[-1]
        cursor = {"before_id": last.job.id, "before_dlq_at": rfc3339(last.dlq_at)}
    if wants_json(json_flag):
        emit_json({"entries": [_entry_dict(e) for e in entries], "next_cursor": cursor})
        return
    print_table(
        LIST_HEADERS,
        [
            [e.job.id, e.job.kind, e.job.queue, e.job.attempt, e.reason, rfc3339(e.dlq_at)]
            for e in entries
        ],
    )
    if cursor is not None:
        click.echo(
            f"Next page: --before-dlq-at {cursor['before_dlq_at']} "
            f"--before-id {cursor['before_id']}"
        )


@dlq.command()
@click.option("--queue", help="Depth of this queue only.")
@json_option
def depth(queue: str | None, json_flag: bool) -> None:
    """How many jobs the DLQ holds, in total and per queue."""

    async def go(client: AsyncClient) -> tuple[int, list[tuple[str, int]]]:
        total = await client.dlq_depth(queue=queue)
        per_queue = [] if queue is not None else await client.dlq_depth_by_queue()
        return total, per_queue

    total, per_queue = with_client(go)
    if wants_json(json_flag):
        emit_json({"total": total, "queue": queue, "by_queue": dict(per_queue)})
        return
    click.echo(f"{queue}: {total}" if queue is not None else f"Total: {total}")
    if per_queue:
        print_table(("QUEUE", "DEPTH"), per_queue)


@dlq.command()
@mutating
@click.argument("job_id", type=int)
@click.option("--queue", help="Re-enqueue into this queue instead.")
@click.option("--priority", type=click.IntRange(1, 4), help="Override the priority.")
@click.option(
    "--run-at", callback=parse_iso, metavar="ISO", help="Run at this time instead of now."
)
def retry(job_id: int, queue: str | None, priority: int | None, run_at: datetime | None) -> None:
    """Re-enqueue one DLQ entry with a fresh attempt budget."""

    async def go(client: AsyncClient) -> bool:
        job = await client.retry_from_dlq(job_id, run_at=run_at, priority=priority, queue=queue)
        return job is not None

    if not with_client(go):
        raise fail(f"job {job_id} is not in the dead-letter queue")
    click.echo(f"Retried job {job_id} from the dead-letter queue")


def _retry_bulk(kind: str | None, queue: str | None, tag: str | None, all_: bool) -> None:
    _refuse_unfiltered("retry-bulk", "--kind, --queue, --tag", kind, queue, tag, allow_all=all_)

    async def go(client: AsyncClient) -> int:
        return await client.bulk_retry_from_dlq(kind=kind, queue=queue, tag=tag, allow_all=all_)

    click.echo(f"Retried {with_client(go)} job(s) from the dead-letter queue")


_bulk_filters = [
    click.option("--kind", help="Only entries of this kind."),
    click.option("--queue", help="Only entries from this queue."),
    click.option("--tag", help="Only entries carrying this tag."),
    click.option("--all", "all_", is_flag=True, help="Act on every entry (no filter)."),
]


def _with_bulk_filters(command: Any) -> Any:
    for option in reversed(_bulk_filters):
        command = option(command)
    return command


@dlq.command("retry-bulk")
@mutating
@_with_bulk_filters
def retry_bulk(kind: str | None, queue: str | None, tag: str | None, all_: bool) -> None:
    """Re-enqueue every matching DLQ entry."""
    _retry_bulk(kind, queue, tag, all_)


@dlq.command("retry-all", hidden=True)
@mutating
@_with_bulk_filters
def retry_all(kind: str | None, queue: str | None, tag: str | None, all_: bool) -> None:
    """Alias of ``awa dlq retry-bulk``."""
    _retry_bulk(kind, queue, tag, all_)


@dlq.command()
@mutating
@click.argument("job_id", type=int, required=False)
@click.option("--kind", help="Only failed jobs of this kind.")
@click.option("--queue", help="Only failed jobs in this queue.")
@click.option("--reason", default="manual", show_default=True, help="Reason recorded.")
@click.option("--all", "all_", is_flag=True, help="Move every failed job (no filter).")
def move(job_id: int | None, kind: str | None, queue: str | None, reason: str, all_: bool) -> None:
    """Move failed jobs (one by id, or every matching one) into the DLQ."""
    if job_id is not None:
        if kind is not None or queue is not None or all_:
            raise click.UsageError("give a JOB_ID or filters, not both")

        async def one(client: AsyncClient) -> bool:
            return await client.move_failed_to_dlq(job_id, reason) is not None

        if not with_client(one):
            raise fail(f"job {job_id} is not a failed job")
        click.echo(f"Moved job {job_id} to the dead-letter queue")
        return
    _refuse_unfiltered("move", "--kind, --queue", kind, queue, allow_all=all_)

    async def bulk(client: AsyncClient) -> int:
        return await client.bulk_move_failed_to_dlq(
            kind=kind, queue=queue, reason=reason, allow_all=all_
        )

    click.echo(f"Moved {with_client(bulk)} failed job(s) to the dead-letter queue")


@dlq.command()
@mutating
@click.argument("job_id", type=int, required=False)
@_with_bulk_filters
def purge(
    job_id: int | None, kind: str | None, queue: str | None, tag: str | None, all_: bool
) -> None:
    """Delete DLQ entries (one by id, or every matching one)."""
    if job_id is not None:
        if kind is not None or queue is not None or tag is not None or all_:
            raise click.UsageError("give a JOB_ID or filters, not both")

        async def one(client: AsyncClient) -> bool:
            return await client.purge_dlq_job(job_id)

        if not with_client(one):
            raise fail(f"job {job_id} is not in the dead-letter queue")
        click.echo(f"Purged job {job_id} from the dead-letter queue")
        return
    _refuse_unfiltered("purge", "--kind, --queue, --tag", kind, queue, tag, allow_all=all_)

    async def bulk(client: AsyncClient) -> int:
        return await client.purge_dlq(kind=kind, queue=queue, tag=tag, allow_all=all_)

    click.echo(f"Purged {with_client(bulk)} job(s) from the dead-letter queue")
