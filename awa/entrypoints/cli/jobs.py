"""``awa job ...``: enqueue, inspect, list, retry, cancel and discard jobs."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from awa.domain.errors import JobNotFound, UniqueConflict
from awa.domain.job import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE
from awa.domain.states import JobState
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
from awa.entrypoints.cli.storage import parse_duration

if TYPE_CHECKING:
    from awa.entrypoints.client_async import AsyncClient

STATES = [str(s) for s in JobState]
#: ``insert_outcome`` of an insert left out because a job holds its unique key (skip).
SKIPPED = "skipped"
ON_CONFLICT_MODES = ("skip", "replace", "debounce")
JOB_HEADERS = ("ID", "KIND", "QUEUE", "STATE", "ATT", "MAX")


@click.group()
def job() -> None:
    """Inspect and administer individual jobs."""


def _json_object(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(parsed, dict):
        raise click.BadParameter(f"must be a JSON object, got {type(parsed).__name__}")
    return parsed


def _run_at(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    """``--run-at``: an ISO-8601 time, or ``+DURATION`` from now (``+30s``, ``+5m``)."""
    if value is None or not value.strip().startswith("+"):
        return parse_iso(ctx, param, value)
    seconds = parse_duration(ctx, param, value.strip()[1:])
    assert seconds is not None
    return datetime.now(UTC) + timedelta(seconds=seconds)


@job.command()
@mutating
@click.argument("kind")
@click.option(
    "--queue", "-q", default=DEFAULT_QUEUE, show_default=True, help="Queue to enqueue in."
)
@click.option(
    "--args",
    "args_",
    callback=_json_object,
    default="{}",
    metavar="JSON",
    help="Job arguments as a JSON object.",
)
@click.option(
    "--run-at",
    callback=_run_at,
    metavar="ISO|+DURATION",
    help="Schedule it: an ISO-8601 time or an offset such as +30s or +5m (default: now).",
)
@click.option("--priority", type=click.IntRange(1, 4), default=DEFAULT_PRIORITY, show_default=True)
@click.option(
    "--max-attempts",
    type=click.IntRange(1, 1000),
    default=DEFAULT_MAX_ATTEMPTS,
    show_default=True,
)
@click.option("--tag", "tags", multiple=True, help="Tag the job; repeatable.")
@click.option("--metadata", callback=_json_object, metavar="JSON", help="Metadata object.")
@click.option(
    "--concurrency-key",
    metavar="KEY",
    help="The job's concurrency key (the queue's max_running_per_key and per-key rate).",
)
@click.option(
    "--unique-opts",
    callback=_json_object,
    metavar="JSON",
    help='Give the job a unique key: the unique_opts object of insert(), e.g. \'{"by_args": '
    "false}'. --on-conflict alone means the default unique options.",
)
@click.option(
    "--on-conflict",
    type=click.Choice(ON_CONFLICT_MODES),
    help="When a job already holds the unique key: skip this insert (the default), "
    "replace the waiting job's args and run_at, or debounce into it (needs --debounce "
    "and --max-wait).",
)
@click.option(
    "--debounce",
    "debounce_window",
    callback=parse_duration,
    metavar="DURATION",
    help="Debounce window: each insert moves the waiting job's run to now + this.",
)
@click.option(
    "--max-wait",
    callback=parse_duration,
    metavar="DURATION",
    help="Debounce: never later than this after the first insert.",
)
@json_option
def enqueue(
    kind: str,
    queue: str,
    args_: dict[str, Any],
    run_at: datetime | None,
    priority: int,
    max_attempts: int,
    tags: tuple[str, ...],
    metadata: dict[str, Any] | None,
    concurrency_key: str | None,
    unique_opts: dict[str, Any] | None,
    on_conflict: str | None,
    debounce_window: float | None,
    max_wait: float | None,
    json_flag: bool,
) -> None:
    """Enqueue one job of KIND and print its id, state and what the insert did
    (inserted; replaced, debounced or skipped when a job already held its unique key).
    Also spelled ``awa job insert``."""
    unique = _unique_options(unique_opts, on_conflict, debounce_window, max_wait)

    async def go(client: AsyncClient) -> dict[str, Any]:
        from awa.entrypoints.client_admin import job_dict

        try:
            inserted = await client.insert(
                args_,
                kind=kind,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                tags=list(tags) or None,
                metadata=metadata,
                run_at=run_at,
                concurrency_key=concurrency_key,
                unique_opts=unique,
            )
        except UniqueConflict as exc:
            return {"insert_outcome": SKIPPED, "id": exc.job_id, "reason": str(exc)}
        return {**job_dict(inserted.record), "insert_outcome": str(inserted.insert_outcome)}

    row = with_client(go)
    if wants_json(json_flag):
        emit_json(row)
        return
    click.echo(_insert_line(row))


# ``awa job insert``: the same command under the name of the client method.
job.add_command(copy.copy(enqueue), "insert")
job.commands["insert"].hidden = True


def _unique_options(
    unique_opts: dict[str, Any] | None,
    on_conflict: str | None,
    window: float | None,
    max_wait: float | None,
) -> dict[str, Any] | None:
    """``unique_opts`` for ``insert`` from the options; the modes themselves are checked
    by ``insert`` (``ValidationError`` naming ``unique_opts.on_conflict...``)."""
    if (window is not None or max_wait is not None) and on_conflict != "debounce":
        raise click.UsageError("--debounce and --max-wait go with --on-conflict debounce")
    if on_conflict is None:
        return unique_opts
    if unique_opts is not None and "on_conflict" in unique_opts:
        raise click.UsageError("give the mode once: --on-conflict or on_conflict in --unique-opts")
    mode: Any = on_conflict
    if on_conflict == "debounce":
        if window is None:
            raise click.UsageError("--on-conflict debounce needs --debounce DURATION")
        mode = (
            {"debounce": window} if max_wait is None else {"debounce": window, "max_wait": max_wait}
        )
    return {**(unique_opts or {}), "on_conflict": mode}


def _insert_line(row: dict[str, Any]) -> str:
    outcome = row["insert_outcome"]
    if outcome == SKIPPED:
        held = "another job" if row["id"] is None else f"job {row['id']}"
        return f"Skipped: {held} already holds the unique key"
    what = f"(kind {row['kind']}, queue {row['queue']}, {row['state']})"
    if outcome == "replaced":
        return f"Replaced waiting job {row['id']} {what}, runs at {row['run_at']}"
    if outcome == "debounced":
        return f"Debounced into waiting job {row['id']} {what}, runs at {row['run_at']}"
    return f"Enqueued job {row['id']} {what}"


RELATED_HEADERS = ("ID", "KIND", "STATE", "EDGE")


def _edge_word(edge: dict[str, Any]) -> str:
    """How the edge stands: met (the parent completed), failed (its failure doomed the
    child) or waiting, with the child's policy when it is not the default."""
    word = "met" if edge["satisfied_at"] else ("failed" if edge["failed"] else "waiting")
    if edge["on_failure"] != "cancel":
        word += f" (on failure: {edge['on_failure']})"
    return word


def _related_rows(edges: list[dict[str, Any]]) -> list[list[Any]]:
    return [
        [
            e["id"],
            e["kind"] or "-",
            (e["state"] or "gone") + (" (dlq)" if e["dlq"] else ""),
            _edge_word(e),
        ]
        for e in edges
    ]


@job.command()
@click.argument("job_id", type=int)
@json_option
def get(job_id: int, json_flag: bool) -> None:
    """Show a job: its row, its parents and children with their states, and its stored
    result."""

    async def go(client: AsyncClient) -> dict[str, Any] | None:
        from awa.entrypoints.client_admin import held_back_json, job_dict
        from awa.entrypoints.job_graph import job_relations

        try:
            found = await client.get_job(job_id)
        except JobNotFound:
            return None
        relations = await job_relations(client, job_id)
        if relations is None:
            return None
        row = {**job_dict(found.record), "held_back": held_back_json(found.held_back)}
        return {"job": row, **relations}

    doc = with_client(go)
    if doc is None:
        raise fail(f"job {job_id} not found")
    if wants_json(json_flag):
        emit_json(doc)
        return
    row = doc["job"]
    click.echo(
        f"Job {row['id']}  kind {row['kind']}  queue {row['queue']}  state {doc['state']}  "
        f"attempt {row['attempt']}/{row['max_attempts']}"
    )
    if row["held_back"] is not None:
        click.echo(row["held_back"]["reason"])
    batch = doc["batch"]
    if batch is not None:
        click.echo(
            f"Batch callback of {batch['size']} job(s): {batch['completed']} completed, "
            f"{batch['failed']} failed, {batch['cancelled']} cancelled, "
            f"{batch['pending']} pending"
        )
    if doc["waiting_on"]:
        click.echo(f"Waiting on {doc['waiting_on']} of {doc['parent_count']} parent(s)")
    for title, edges, count in (
        ("Parents", doc["parents"], doc["parent_count"]),
        ("Children", doc["children"], doc["child_count"]),
    ):
        click.echo("")
        if not count:
            click.echo(f"{title}: none")
            continue
        shown = "" if count == len(edges) else f", first {len(edges)} shown"
        click.echo(f"{title} ({count}{shown}):")
        print_table(RELATED_HEADERS, _related_rows(edges))
    click.echo("")
    result = doc["result"]
    if result["stored"]:
        click.echo(f"Result (stored {result['stored_at']}, kept until {result['expires_at']}):")
        click.echo(json.dumps(result["value"], indent=2, sort_keys=True))
    else:
        click.echo("Result: no result stored")


@job.command()
@click.argument("job_id", type=int)
def dump(job_id: int) -> None:
    """Print everything known about a job as JSON (row, summary, timeline, DLQ entry)."""

    async def go(client: AsyncClient) -> str:
        return await client.dump_job(job_id)

    click.echo(with_client(go))


@job.command("dump-run")
@click.argument("job_id", type=int)
@click.option("--attempt", type=click.IntRange(min=0), help="Attempt number (default: latest).")
def dump_run(job_id: int, attempt: int | None) -> None:
    """Print one attempt of a job as JSON."""

    async def go(client: AsyncClient) -> str:
        return await client.dump_run(job_id, attempt)

    click.echo(with_client(go))


@job.command()
@mutating
@click.argument("job_id", type=int)
def retry(job_id: int) -> None:
    """Make a failed, cancelled or waiting job available again."""

    async def go(client: AsyncClient) -> bool:
        return await client.retry(job_id) is not None

    if not with_client(go):
        raise fail(f"job {job_id} cannot be retried")
    click.echo(f"Retried job {job_id}")


@job.command()
@mutating
@click.argument("job_id", type=int)
def cancel(job_id: int) -> None:
    """Cancel a job that has not finished (a running handler is told to stop)."""

    async def go(client: AsyncClient) -> bool:
        return await client.cancel(job_id) is not None

    if not with_client(go):
        raise fail(f"job {job_id} cannot be cancelled")
    click.echo(f"Cancelled job {job_id}")


@job.command("retry-failed")
@mutating
@click.option("--kind", help="Retry failed jobs of this kind.")
@click.option("--queue", help="Retry failed jobs in this queue.")
def retry_failed(kind: str | None, queue: str | None) -> None:
    """Retry every failed job of exactly one kind or one queue."""
    if (kind is None) == (queue is None):
        raise click.UsageError("give exactly one of --kind or --queue")

    async def go(client: AsyncClient) -> tuple[int, int, int | None]:
        result = await client.retry_failed(kind=kind, queue=queue)
        return len(result.jobs), result.matched, result.pruned_failed_count

    retried, matched, pruned = with_client(go)
    target = f"kind {kind}" if kind is not None else f"queue {queue}"
    click.echo(
        f"Retried {retried} failed job(s) of {target} "
        f"(matched {matched}, raced {matched - retried})"
    )
    if pruned:
        click.echo(f"{pruned} failed job(s) were already pruned by retention")


@job.command()
@mutating
@click.option("--kind", required=True, help="Kind whose failed jobs are deleted.")
def discard(kind: str) -> None:
    """Delete every failed job of a kind."""

    async def go(client: AsyncClient) -> int:
        return await client.discard_failed(kind)

    count = with_client(go)
    click.echo(f"Discarded {count} failed job(s) of kind {kind}")


@job.command("list")
@click.option("--state", "state_", type=click.Choice(STATES), help="Only jobs in this state.")
@click.option("--kind", help="Only jobs of this kind.")
@click.option("--queue", help="Only jobs in this queue.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@json_option
def list_jobs(
    state_: str | None, kind: str | None, queue: str | None, limit: int, json_flag: bool
) -> None:
    """List jobs, newest first."""

    async def go(client: AsyncClient) -> list[dict[str, Any]]:
        from awa.entrypoints.client_admin import held_back_json, job_dict

        jobs = await client.list_jobs(state=state_, kind=kind, queue=queue, limit=limit)
        return [{**job_dict(j.record), "held_back": held_back_json(j.held_back)} for j in jobs]

    rows = with_client(go)
    if wants_json(json_flag):
        emit_json(rows)
        return
    print_table(
        JOB_HEADERS,
        [
            [r["id"], r["kind"], r["queue"], r["state"], r["attempt"], r["max_attempts"]]
            for r in rows
        ],
    )
    for r in rows:
        if r["held_back"] is not None:
            click.echo(f"job {r['id']}: {r['held_back']['reason']}")
