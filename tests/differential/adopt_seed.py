"""Make an awa-pg 0.6.9 database with a job in every state, using awa-pg itself.

Usage: ``python -P adopt_seed.py DATABASE_URL ENGINE`` under an
interpreter that has awa-pg 0.6.9 (``tests/differential/run.py``'s ``awa_pg_python()``).
The database must exist and be empty. The second argument picks awa-pg's storage engine:
``canonical`` (awa-pg leaves a database with a backlog there), ``queue_storage``
(``install_queue_storage`` installs and activates it before the first job) or
``queue_storage_side`` (the same in a schema of its own, ``awa_side``).

It leaves, besides the schema awa-pg migrated: jobs ``scheduled``, ``available`` (one
with a unique claim, one in a paused queue), ``running`` (its handler still inside the
attempt), ``retryable``, ``waiting_external`` (with its callback id), ``completed`` (one
of them, ``resolved``, through its callback),
``failed`` and ``cancelled``; one dead-lettered job (on queue storage: awa-pg's DLQ
needs it); a cron schedule; a queue and a job-kind descriptor; the pause of queue
``paused``. Then the process ends without shutting its worker down, as a crash would:
the running job keeps its lease and the runtime its last heartbeat. The last line of
stdout is JSON: ``{"jobs": {label: id}, "callback_id": ..., "handled": [label, ...],
"dead_lettered": bool}``; ``handled`` counts the attempts awa-pg's handler began.

This module imports only the standard library and awa-pg.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import os
import sys
from typing import Any

#: Queue the seeding worker serves; the other queues keep their jobs where they are.
WORK = "adopt_work"
IDLE = "adopt_idle"
PAUSED = "adopt_paused"
KIND = "adopt_job"
#: awa-pg's queue storage, by the engine argument: the schema it is installed in.
SCHEMAS = {"queue_storage": "awa", "queue_storage_side": "awa_side"}


@dataclasses.dataclass
class AdoptArgs:
    label: str


async def wait_state(client: Any, job_id: int, state: str) -> None:
    for _ in range(400):
        if str((await client.get_job(job_id)).state).rsplit(".", 1)[-1].lower() == state:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"job {job_id} never reached {state}")


async def seed(url: str, engine: str) -> None:
    import awa

    client = awa.AsyncClient(url)
    await client.migrate()
    schema = SCHEMAS.get(engine)
    if schema is not None:
        await client.install_queue_storage(schema=schema)
    handled: list[str] = []
    callback_ids: dict[str, asyncio.Queue[str]] = {
        "waiting_external": asyncio.Queue(),
        "resolved": asyncio.Queue(),
    }
    running = asyncio.Event()
    never = asyncio.Event()

    @client.task(AdoptArgs, kind=KIND, queue=WORK)
    async def handle(job: Any) -> Any:
        label = job.args.label
        handled.append(label)
        if label in ("failed", "dead_lettered", "retryable"):
            raise RuntimeError(f"{label} on purpose")
        if label in callback_ids:
            token = await job.register_callback(timeout_seconds=3600)
            await callback_ids[label].put(token.id)
            if label == "resolved":
                await job.wait_for_callback(token)
                return None
            return awa.WaitForCallback(token)
        if label == "running":
            running.set()
            await never.wait()
        return None

    client.queue_descriptor(WORK, display_name="Adopted work", owner="ops")
    client.job_kind_descriptor(KIND, display_name="Adopted job", description="seeded")
    client.periodic(
        "adopt_nightly", "0 3 * * *", AdoptArgs, AdoptArgs("cron"), queue=IDLE, priority=3
    )

    def insert(label: str, queue: str = WORK, **kwargs: Any) -> Any:
        return client.insert(AdoptArgs(label), kind=KIND, queue=queue, **kwargs)

    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=6)
    jobs = {
        "scheduled": await insert("scheduled", run_at=later),
        "available": await insert("available", queue=IDLE),
        "unique": await insert(
            "unique", queue=IDLE, unique_opts={"by_queue": True, "by_args": True}
        ),
        "cancelled": await insert("cancelled", queue=IDLE),
        "paused": await insert("paused", queue=PAUSED),
    }
    await client.cancel(jobs["cancelled"].id)
    await client.pause_queue(PAUSED, paused_by="adopt-seed")
    # A short heartbeat makes the attempts' leases and the runtime's snapshot current.
    await client.start(
        [(WORK, 8)],
        heartbeat_interval_ms=200,
        promote_interval_ms=200,
        leader_election_interval_ms=100,
        queue_storage_schema=schema,
    )
    jobs["completed"] = await insert("completed")
    jobs["failed"] = await insert("failed", max_attempts=1)
    jobs["dead_lettered"] = await insert("dead_lettered", max_attempts=1)
    jobs["retryable"] = await insert("retryable", max_attempts=5)
    jobs["waiting_external"] = await insert("waiting_external")
    jobs["running"] = await insert("running")
    jobs["resolved"] = await insert("resolved")
    for label, state in (
        ("completed", "completed"),
        ("failed", "failed"),
        ("dead_lettered", "failed"),
        ("retryable", "retryable"),
        ("waiting_external", "waiting_external"),
        ("running", "running"),
    ):
        await wait_state(client, jobs[label].id, state)
    await running.wait()
    callback_id = await asyncio.wait_for(callback_ids["waiting_external"].get(), 10)
    # A callback resumed in its handler, which then completes: awa-pg keeps the callback
    # id on the completed job.
    resolved = await asyncio.wait_for(callback_ids["resolved"].get(), 10)
    await wait_state(client, jobs["resolved"].id, "waiting_external")
    await client.resume_external(resolved, {"ok": True})
    await wait_state(client, jobs["resolved"].id, "completed")
    # awa-pg keeps a DLQ only on queue storage; on canonical the job stays failed.
    dead_lettered = schema is not None
    if dead_lettered and await client.move_failed_to_dlq(jobs["dead_lettered"].id, "seed") is None:
        raise RuntimeError("the dead-lettered job did not move to the DLQ")
    crons = [row["name"] for row in await client.list_cron_jobs()]
    for _ in range(200):
        if "adopt_nightly" in crons:
            break
        await asyncio.sleep(0.05)
        crons = [row["name"] for row in await client.list_cron_jobs()]
    if "adopt_nightly" not in crons:
        raise RuntimeError("the cron schedule was never synced")
    seeded = {
        "jobs": {label: job.id for label, job in jobs.items()},
        "callback_id": str(callback_id),
        "handled": sorted(handled),
        "dead_lettered": dead_lettered,
    }
    print(json.dumps(seeded, sort_keys=True), flush=True)
    # End as a crash would, with the running attempt still inside its handler: no
    # shutdown, so it keeps its lease and the runtime its last snapshot.
    os._exit(0)


def main() -> None:
    url, engine = sys.argv[1], sys.argv[2]
    if engine not in ("canonical", *SCHEMAS):
        raise SystemExit(f"engine must be canonical or one of {sorted(SCHEMAS)}, not {engine!r}")
    asyncio.run(seed(url, engine))


if __name__ == "__main__":
    main()
