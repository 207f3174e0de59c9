"""``awa queue ...``: pause, resume, drain and per-queue statistics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from awa.entrypoints.cli._common import (
    emit_json,
    json_option,
    mutating,
    print_table,
    wants_json,
    with_client,
)
from awa.entrypoints.cli.overrides import overrides
from awa.entrypoints.job_graph import KEY_LIMIT, MAX_KEY_LIMIT, queue_keys

if TYPE_CHECKING:
    from awa.entrypoints.client_async import AsyncClient

STATS_HEADERS = (
    "QUEUE",
    "AVAIL",
    "RUNNING",
    "FAILED",
    "COMPLETED/1H",
    "LAG(s)",
    "PAUSED",
    "SERVED",
)


@click.group()
def queue() -> None:
    """Pause, resume, drain and inspect queues."""


@queue.command()
@mutating
@click.argument("name")
@click.option("--by", "paused_by", default="cli", show_default=True, help="Who paused it.")
def pause(name: str, paused_by: str) -> None:
    """Stop workers claiming from a queue (inserts still succeed)."""

    async def go(client: AsyncClient) -> None:
        await client.pause_queue(name, paused_by)

    with_client(go)
    click.echo(f"Paused queue {name}")


@queue.command()
@mutating
@click.argument("name")
def resume(name: str) -> None:
    """Let workers claim from a paused queue again."""

    async def go(client: AsyncClient) -> None:
        await client.resume_queue(name)

    with_client(go)
    click.echo(f"Resumed queue {name}")


@queue.command()
@mutating
@click.argument("name")
def drain(name: str) -> None:
    """Cancel every pending job of a queue."""

    async def go(client: AsyncClient) -> int:
        return await client.drain_queue(name)

    count = with_client(go)
    click.echo(f"Drained {count} job(s) from queue {name}")


async def _served_queues(client: AsyncClient) -> frozenset[str]:
    return await (await client.schema_admin()).served_queues()


def _waiting(row: dict[str, Any]) -> int:
    return int(row["available"]) + int(row["retryable"]) + int(row["scheduled"])


async def _stats(client: AsyncClient) -> list[dict[str, Any]]:
    served = await _served_queues(client)
    rows = [
        {
            "queue": s.queue,
            "total_queued": s.total_queued,
            "scheduled": s.scheduled,
            "available": s.available,
            "retryable": s.retryable,
            "running": s.running,
            "failed": s.failed,
            "waiting_external": s.waiting_external,
            "completed_last_hour": s.completed_last_hour,
            "lag_seconds": s.lag_seconds,
            "paused": s.paused,
            "served": s.queue in served,
        }
        for s in await client.queue_stats()
    ]
    for row in rows:
        # Jobs wait forever on a queue no worker serves: say so instead of staying quiet.
        row["unserved_waiting"] = 0 if row["served"] else _waiting(row)
    return rows


def _print_stats(json_flag: bool) -> None:
    rows = with_client(_stats)
    stranded = [r for r in rows if r["unserved_waiting"]]
    if stranded:
        names = ", ".join(f"{r['queue']} ({r['unserved_waiting']} waiting)" for r in stranded)
        click.echo(
            f"awa: warning: no live worker serves queue(s) {names}; their jobs will wait "
            f"until one does (e.g. `awa worker -m APP -q {stranded[0]['queue']}`)",
            err=True,
        )
    if wants_json(json_flag):
        emit_json(rows)
        return
    print_table(
        STATS_HEADERS,
        [
            [
                r["queue"],
                r["available"],
                r["running"],
                r["failed"],
                r["completed_last_hour"],
                r["lag_seconds"],
                r["paused"],
                "yes" if r["served"] else ("NO" if r["unserved_waiting"] else "no"),
            ]
            for r in rows
        ],
    )


@queue.command()
@json_option
def stats(json_flag: bool) -> None:
    """Per-queue counts, lag and pause state."""
    _print_stats(json_flag)


@click.command("queue-stats", hidden=True)
@json_option
def queue_stats_hidden(json_flag: bool) -> None:
    """Alias of ``awa queue stats``."""
    _print_stats(json_flag)


@queue.command()
@click.argument("name")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_KEY_LIMIT),
    default=KEY_LIMIT,
    show_default=True,
    help="List at most this many keys, the busiest first.",
)
@json_option
def keys(name: str, limit: int, json_flag: bool) -> None:
    """A queue's concurrency keys: how many of each run, how many wait and how many of
    those the per-key limit holds back, the busiest first, with the per-key and rate
    limits in force on the queue (an operator's override, else the live workers'
    queue config)."""

    async def go(client: AsyncClient) -> dict[str, Any]:
        return await queue_keys(client, name, limit=limit)

    doc = with_client(go)
    if wants_json(json_flag):
        emit_json(doc)
        return
    limits = doc["limits"]
    sources = doc["limit_sources"]
    per_key = limits["max_running_per_key"]
    per_key_text = (
        "none set (by override or by a live worker)"
        if per_key is None
        else f"{per_key} ({sources['max_running_per_key']})"
    )
    click.echo(f"Queue {name}: per-key limit {per_key_text}")
    for label, rate, burst in (
        ("rate limit per process", "rate_limit_per_second", "rate_limit_burst"),
        ("fleet-wide rate limit", "global_rate_per_second", "global_rate_burst"),
        (
            "fleet-wide rate limit per key",
            "global_rate_per_key_per_second",
            "global_rate_per_key_burst",
        ),
    ):
        if limits[rate] is not None:
            click.echo(f"  {label}: {limits[rate]:g}/s, burst {limits[burst]} ({sources[rate]})")
    if not doc["keys"]:
        click.echo("No concurrency key has a running or waiting job.")
        return
    print_table(
        ("KEY", "RUNNING", "WAITING", "HELD BACK"),
        [[k["key"], k["running"], k["waiting"], k["held_back"]] for k in doc["keys"]],
    )


queue.add_command(overrides)
