"""``awa adopt``: convert a database that awa-pg 0.6.9 migrated, in place (ADR 0019)."""

from __future__ import annotations

import dataclasses

import click

from awa.entrypoints.cli._common import emit_json, json_option, mutating, run, state, wants_json

NEXT_STEPS = (
    "Storage engine: canonical. Start this package's workers; to move to queue storage "
    "later run `awa storage prepare`, `awa storage enter-mixed-transition` and "
    "`awa storage finalize` (docs/migrating-from-awa-pg.md)"
)


@click.command()
@mutating
@json_option
def adopt(json_flag: bool) -> None:
    """Convert a database awa-pg 0.6.9 migrated into this package's schema, in place.

    One transaction, one way: every job keeps its state (running ones their lease,
    waiting ones their callback), with the DLQ, unique claims, cron schedules, queue
    metadata and descriptors. Stop every awa-pg worker first: adoption refuses, naming
    them, while any awa-pg runtime heartbeats. awa-pg cannot open the database afterwards.
    """
    from awa.entrypoints import bootstrap

    report = run(bootstrap.adopt_awa_pg(state().database_url()))
    if wants_json(json_flag):
        emit_json(dataclasses.asdict(report))
        return
    jobs = ", ".join(f"{n} {name}" for name, n in sorted(report.jobs.items())) or "none"
    click.echo(
        f"Adopted the awa-pg 0.6.9 database (it was on awa-pg's {report.awa_pg_engine} "
        f"engine); dropped awa-pg's schema(s) {', '.join(report.dropped_schemas)}"
    )
    click.echo(f"Jobs: {jobs}")
    click.echo(
        f"DLQ entries: {report.dlq}; unique claims: {report.unique_claims}; cron schedules: "
        f"{report.cron}; queues with metadata: {report.queues}; descriptors: "
        f"{report.queue_descriptors} queue, {report.kind_descriptors} job kind"
    )
    click.echo(NEXT_STEPS)
