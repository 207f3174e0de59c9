"""``awa queue overrides set|clear|show``: live per-queue overrides in awa.queue_meta."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

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

HEADERS = (
    "QUEUE",
    "POLL(ms)",
    "BATCH",
    "RATE(/s)",
    "BURST",
    "DEADLINE(ms)",
    "PER KEY",
    "FLEET RATE(/s)",
    "FLEET BURST",
    "KEY RATE(/s)",
    "KEY BURST",
)


@click.group()
def overrides() -> None:
    """Live per-queue overrides that running workers pick up without a restart
    (within AWA_OVERRIDE_REFRESH_MS, default 10 s)."""


@overrides.command("set")
@click.argument("queue")
@click.option("--poll-interval-ms", type=click.IntRange(min=1), help="Poll interval.")
@click.option("--claim-batch-size", type=click.IntRange(min=1), help="Jobs per claim.")
@click.option(
    "--rate-limit",
    type=click.FloatRange(min=0, min_open=True),
    help="Jobs per second (retunes a queue started with a rate limit).",
)
@click.option("--rate-limit-burst", type=click.IntRange(min=1), help="Rate-limit burst.")
@click.option(
    "--deadline-ms",
    type=click.IntRange(min=1),
    help="Attempt deadline (retunes a queue started with a deadline).",
)
@click.option(
    "--max-running-per-key",
    type=click.IntRange(min=1, max=1_000_000),
    help="At most this many running jobs per concurrency key, fleet-wide.",
)
@click.option(
    "--global-rate-limit",
    type=float,
    help="Jobs per second for the whole fleet (sets the queue's global_rate_limit).",
)
@click.option(
    "--global-rate-burst",
    type=int,
    help="Burst of the fleet-wide rate limit (default: the started burst, else 1).",
)
@click.option(
    "--global-rate-limit-per-key",
    type=float,
    help="Jobs per second for each concurrency key, fleet-wide.",
)
@click.option(
    "--global-rate-burst-per-key",
    type=int,
    help="Burst of the per-key fleet-wide rate limit (default: the started burst, else 1).",
)
@json_option
def set_(
    queue: str,
    poll_interval_ms: int | None,
    claim_batch_size: int | None,
    rate_limit: float | None,
    rate_limit_burst: int | None,
    deadline_ms: int | None,
    max_running_per_key: int | None,
    global_rate_limit: float | None,
    global_rate_burst: int | None,
    global_rate_limit_per_key: float | None,
    global_rate_burst_per_key: int | None,
    json_flag: bool,
) -> None:
    """Replace QUEUE's overrides with the given ones (an option left out is cleared)."""
    values = (
        poll_interval_ms,
        claim_batch_size,
        rate_limit,
        rate_limit_burst,
        deadline_ms,
        max_running_per_key,
        global_rate_limit,
        global_rate_burst,
        global_rate_limit_per_key,
        global_rate_burst_per_key,
    )
    if all(value is None for value in values):
        raise click.UsageError(
            "give at least one override (use `awa queue overrides clear` to remove them)"
        )

    async def go(client: AsyncClient) -> dict[str, Any]:
        return await client.set_queue_overrides(
            queue,
            poll_interval_ms=poll_interval_ms,
            claim_batch_size=claim_batch_size,
            rate_limit=rate_limit,
            rate_limit_burst=rate_limit_burst,
            deadline_ms=deadline_ms,
            max_running_per_key=max_running_per_key,
            global_rate_limit=global_rate_limit,
            global_rate_burst=global_rate_burst,
            global_rate_limit_per_key=global_rate_limit_per_key,
            global_rate_burst_per_key=global_rate_burst_per_key,
        )

    result = with_client(go)
    if wants_json(json_flag):
        emit_json({queue: result})
        return
    shown = ", ".join(f"{k}={v}" for k, v in result.items() if v is not None)
    click.echo(f"Set overrides of queue {queue}: {shown}")


@overrides.command()
@click.argument("queue")
def clear(queue: str) -> None:
    """Remove every override of QUEUE (workers return to their started settings)."""

    async def go(client: AsyncClient) -> bool:
        return await client.clear_queue_overrides(queue)

    if not with_client(go):
        raise CommandFailed(f"queue {queue} has no overrides")
    click.echo(f"Cleared overrides of queue {queue}")


@overrides.command()
@click.argument("queue", required=False)
@json_option
def show(queue: str | None, json_flag: bool) -> None:
    """Overrides of every queue that has any (or of QUEUE)."""

    async def go(client: AsyncClient) -> dict[str, dict[str, Any]]:
        return await client.queue_overrides(queue)

    found = with_client(go)
    if wants_json(json_flag):
        emit_json(found)
        return
    print_table(
        HEADERS,
        [
            [
                name,
                o["poll_interval_ms"],
                o["claim_batch_size"],
                o["rate_limit_per_second"],
                o["rate_limit_burst"],
                o["deadline_ms"],
                o["max_running_per_key"],
                o["global_rate_per_second"],
                o["global_rate_burst"],
                o["global_rate_per_key_per_second"],
                o["global_rate_per_key_burst"],
            ]
            for name, o in found.items()
        ],
    )
