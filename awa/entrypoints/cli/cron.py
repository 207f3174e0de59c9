"""``awa cron ...``: list, remove, pause, resume and trigger periodic schedules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from awa.domain.errors import ValidationError
from awa.entrypoints.cli._common import (
    CommandFailed,
    emit_json,
    json_option,
    print_table,
    wants_json,
    with_client,
)

if TYPE_CHECKING:
    from awa.entrypoints.client_async import AsyncClient

LIST_HEADERS = ("NAME", "CRON", "TIMEZONE", "MISSED", "KIND", "QUEUE", "PAUSED", "NEXT FIRE")


@click.group()
def cron() -> None:
    """Inspect and control periodic (cron) schedules stored in awa.cron_jobs."""


def _missing(name: str) -> CommandFailed:
    return CommandFailed(f"cron job not found: {name} (see `awa cron list`)")


@cron.command("list")
@json_option
def list_(json_flag: bool) -> None:
    """Every stored schedule with its next fire time."""

    async def go(client: AsyncClient) -> list[dict[str, Any]]:
        return await client.list_cron_jobs()

    from awa.entrypoints.client_cron import next_fire_at

    rows = with_client(go)
    for row in rows:
        row["next_fire_at"] = next_fire_at(row["cron_expr"], row["timezone"])
    if wants_json(json_flag):
        emit_json(rows)
        return
    print_table(
        LIST_HEADERS,
        [
            [
                r["name"],
                r["cron_expr"],
                r["timezone"],
                r["missed_fire_policy"],
                r["kind"],
                r["queue"],
                r["paused_at"] is not None,
                "-" if r["paused_at"] is not None else r["next_fire_at"],
            ]
            for r in rows
        ],
    )


@cron.command()
@click.argument("name")
def remove(name: str) -> None:
    """Delete a stored schedule (a runtime still declaring it stores it again)."""

    async def go(client: AsyncClient) -> bool:
        return await client.delete_cron_job(name)

    if not with_client(go):
        raise _missing(name)
    click.echo(f"Removed cron job {name}")


@cron.command()
@click.argument("name")
@click.option("--by", "paused_by", default="cli", show_default=True, help="Who paused it.")
def pause(name: str, paused_by: str) -> None:
    """Stop a schedule's automatic fires (trigger still works)."""

    async def go(client: AsyncClient) -> bool:
        return await client.pause_cron_job(name, paused_by)

    if not with_client(go):
        raise _missing(name)
    click.echo(f"Paused cron job {name}")


@cron.command()
@click.argument("name")
def resume(name: str) -> None:
    """Let a paused schedule fire again; its missed-fire policy decides what it catches up."""

    async def go(client: AsyncClient) -> bool:
        return await client.resume_cron_job(name)

    if not with_client(go):
        raise _missing(name)
    click.echo(f"Resumed cron job {name}")


@cron.command()
@click.argument("name")
@json_option
def trigger(name: str, json_flag: bool) -> None:
    """Enqueue a schedule's job now, even while paused; the schedule is unchanged."""

    async def go(client: AsyncClient) -> dict[str, Any] | None:
        try:
            job = await client.trigger_cron_job(name)
        except ValidationError:
            return None
        return {"id": job.id, "kind": job.kind, "queue": job.queue, "state": str(job.state)}

    job = with_client(go)
    if job is None:
        raise _missing(name)
    if wants_json(json_flag):
        emit_json(job)
        return
    click.echo(f"Triggered cron job {name}: job {job['id']} in queue {job['queue']}")
