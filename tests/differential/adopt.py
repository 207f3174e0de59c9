"""Adopt probe: an awa-pg 0.6.9 database with a job in every state, adopted in place and
drained by this package's worker (ADR 0019).

    python -m tests.differential.adopt [--engine canonical|queue_storage|queue_storage_side ...]
        [--awa-pg-python PATH] [--server-url URL]

For each awa-pg storage engine (queue storage in schema ``awa`` or in a schema of its
own): a fresh database is seeded by awa-pg itself
(``adopt_seed.py`` under the scratch interpreter of ``run.py``), its crashed worker's
runtime is let go stale, ``awa adopt``'s function converts it, and this package's worker
runs every unfinished job. The report (JSON) gives each job's state after adoption and at
the end, and how often this package's handler ran it; the exit status is 1 when a job was
lost, ran twice, or a finished one ran again. ``tests/integration/test_adopt_awa_pg.py``
runs the same steps under pytest.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from awa import AsyncClient, Job, RetryPolicy
from awa.entrypoints import bootstrap
from tests.differential import run as differential

SEED = Path(__file__).with_name("adopt_seed.py")

#: Jobs the seed leaves unfinished, which this package's worker must run to the end.
UNFINISHED = ("scheduled", "available", "unique", "paused", "retryable", "running")
#: Jobs whose run is over (for the callback, awa-pg's attempt), which must not run again.
FINISHED = ("completed", "failed", "cancelled", "waiting_external", "dead_lettered", "resolved")
QUEUES = ("adopt_work", "adopt_idle", "adopt_paused")
#: awa-pg's engines a 0.6.9 database can be on (queue storage in schema awa or its own).
ENGINES = ("canonical", "queue_storage", "queue_storage_side")


@dataclasses.dataclass
class AdoptArgs:
    label: str


def seed(python: Path, url: str, engine: str) -> dict[str, Any]:
    """Make the awa-pg database at ``url`` (empty) with awa-pg on ``engine``; what the
    seed printed: ``jobs`` (label to id), ``callback_id``, ``dead_lettered``."""
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run(
            [str(python), "-P", str(SEED), differential.awa_pg_url(url), engine],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"seeding with awa-pg failed: {done.stderr[-2000:]}")
    seeded: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seeded


def sql(url: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query.encode())
        return cur.fetchall() if cur.description else []


def let_runtimes_go_stale(url: str) -> None:
    """The seed's worker ended like a crash; stand in for the minute awa-pg gives a
    runtime that stopped heartbeating."""
    sql(url, "UPDATE awa.runtime_instances SET last_seen_at = now() - interval '1 hour'")


def states(url: str, ids: dict[str, int]) -> dict[str, str | None]:
    """Each seeded job's state in this package's schema (``dlq`` for a DLQ entry)."""
    found = dict(sql(url, "SELECT id, state::text FROM awa.jobs"))
    found.update(
        dict.fromkeys((row[0] for row in sql(url, "SELECT job_id FROM awa.dlq_entries")), "dlq")
    )
    return {label: found.get(job_id) for label, job_id in ids.items()}


async def drain(url: str, seeded: dict[str, Any]) -> Counter[str]:
    """Run every adopted job to its end with this package's worker; how often its handler
    ran each label. The waiting job is completed through its callback."""
    ids: dict[str, int] = seeded["jobs"]
    # The scheduled job's time and the retry's back-off have not come yet; the passage
    # of time is not what the probe is about.
    sql(
        url,
        f"UPDATE awa.jobs SET run_at = now() WHERE id IN ({ids['scheduled']}, {ids['retryable']})",
    )
    client = AsyncClient(url)
    runs: Counter[str] = Counter()
    finished = asyncio.Event()

    # The rescued attempt's retry comes after a short back-off, not awa-pg's seconds: the
    # passage of time is not what the probe is about.
    @client.task(
        AdoptArgs,
        kind="adopt_job",
        queue="adopt_work",
        retry=RetryPolicy(base=timedelta(milliseconds=20), jitter=0.0),
    )
    async def handle(job: Job[AdoptArgs]) -> None:
        runs[job.args.label] += 1
        if set(runs) >= set(UNFINISHED):
            finished.set()

    # The running job's worker is gone: its heartbeat is stale, so the rescue sweep
    # retries it (after the usual back-off).
    await client.start(
        [(queue, 4) for queue in QUEUES],
        heartbeat_interval_ms=200,
        heartbeat_rescue_interval_ms=100,
        heartbeat_staleness_ms=1000,
        promote_interval_ms=100,
    )
    try:
        await client.resume_queue("adopt_paused")
        await client.complete_external(seeded["callback_id"], {"ok": True})
        await asyncio.wait_for(finished.wait(), 30)
    finally:
        # Waits for the last attempt and flushes its completion.
        await client.shutdown()
        await client.close()
    return runs


def verdict(runs: Counter[str], final: dict[str, str | None], dead_lettered: bool) -> list[str]:
    """What went wrong, if anything."""
    problems = [
        f"{label} ended {final[label]}" for label in UNFINISHED if final[label] != "completed"
    ]
    problems += [
        f"{label} ran {n} times" for label, n in runs.items() if n != 1 or label in FINISHED
    ]
    problems += [f"{label} never ran" for label in UNFINISHED if label not in runs]
    expected_end = {
        "completed": "completed",
        "resolved": "completed",
        "failed": "failed",
        "cancelled": "cancelled",
        "waiting_external": "completed",
        "dead_lettered": "dlq" if dead_lettered else "failed",
    }
    problems += [
        f"{label} ended {final[label]}, not {end}"
        for label, end in expected_end.items()
        if final[label] != end
    ]
    return problems


async def probe(python: Path, server_url: str, engine: str) -> dict[str, Any]:
    url = differential.create_database(server_url)
    try:
        seeded = await asyncio.to_thread(seed, python, url, engine)
        let_runtimes_go_stale(url)
        report = await bootstrap.adopt_awa_pg(url)
        adopted = states(url, seeded["jobs"])
        runs = await drain(url, seeded)
        final = states(url, seeded["jobs"])
        return {
            "engine": engine,
            "adopted": adopted,
            "adopted_counts": dataclasses.asdict(report),
            "runs": dict(runs),
            "final": final,
            "problems": verdict(runs, final, seeded["dead_lettered"]),
        }
    finally:
        differential.drop_database(server_url, url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", action="append", choices=ENGINES)
    parser.add_argument("--awa-pg-python", type=Path)
    parser.add_argument("--server-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    options = parser.parse_args()
    python = options.awa_pg_python or differential.awa_pg_python()
    reports = [
        asyncio.run(probe(python, options.server_url, engine))
        for engine in options.engine or ENGINES
    ]
    print(json.dumps(reports, indent=2, sort_keys=True, default=str))
    sys.exit(1 if any(report["problems"] for report in reports) else 0)


if __name__ == "__main__":
    main()
