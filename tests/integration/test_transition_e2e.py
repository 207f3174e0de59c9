"""End to end: a canonical cluster moves to queue storage while producers and workers run.

Producers enqueue continuously (single inserts, bulk COPY-path inserts, SQL
``awa.insert_job_compat`` inside client transactions); a worker runtime started with
``AsyncClient.start`` executes every job; the transition is driven through the ``awa``
command line in subprocesses (prepare, enter-mixed-transition, finalize --wait), with a
worker restart while the transition is mixed. Every job enqueued before, during and after
must complete exactly once and the counts must add up.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa
from awa import AsyncClient, Job, JobState
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

KIND = "transition_work"


@dataclasses.dataclass
class Work:
    n: int
    # Jobs marked "retry" ask for a short retry on their first attempt, so some canonical
    # jobs are retryable when the transition starts and finish in queue storage.
    mode: str = "plain"


async def awa_cli(url: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "awa",
        "--database-url",
        url,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def where_jobs_live(url: str, ids: list[int]) -> tuple[int, int]:
    """(jobs whose last fact is canonical, jobs with any queue-storage fact)."""
    with psycopg.connect(url) as conn:
        canonical = conn.execute(
            "SELECT count(*) FROM awa.canonical_jobs WHERE id = ANY(%s)", (ids,)
        ).fetchone()
        queue_storage = conn.execute(
            "SELECT count(DISTINCT job_id) FROM ("
            " SELECT job_id FROM awa.ready_entries UNION ALL"
            " SELECT job_id FROM awa.deferred_jobs) AS f WHERE job_id = ANY(%s)",
            (ids,),
        ).fetchone()
    assert canonical is not None and queue_storage is not None
    return int(canonical[0]), int(queue_storage[0])


async def _all_completed(client: AsyncClient, ids: list[int]) -> bool:
    """True once every job of ``ids`` is completed."""
    async with await client.transaction() as tx:
        row = await tx.fetch_one(
            "SELECT count(*) AS n FROM awa.jobs WHERE id = ANY($1) AND state <> 'completed'",
            ids,
        )
    return int(row["n"]) == 0


async def test_transition_under_load_completes_every_job_exactly_once(
    migrated_database_url: str,
) -> None:
    url = migrated_database_url
    successes: Counter[int] = Counter()
    executions: Counter[int] = Counter()
    enqueued: list[int] = []
    phases: dict[str, list[int]] = {"before": [], "mixed": [], "after": []}
    phase = "before"

    grown = asyncio.Condition()

    def record(ids: list[int]) -> None:
        enqueued.extend(ids)
        phases[phase].extend(ids)

    async def while_producing(jobs: int) -> None:
        """Let the producers enqueue ``jobs`` more jobs in this phase (however long
        that takes on this host), instead of a fixed while."""
        async with grown:
            target = len(phases[phase]) + jobs
            await asyncio.wait_for(grown.wait_for(lambda: len(phases[phase]) >= target), 60)

    async with AsyncClient(url, max_connections=12) as client:

        @client.task(Work, kind=KIND)
        async def handle(job: Job[Work]) -> Any:
            executions[job.id] += 1
            await asyncio.sleep(0.003)  # attempts overlap the transition's phases: the race
            if job.args.mode == "retry" and job.attempt == 1:
                return awa.RetryAfter(0.4)
            successes[job.id] += 1
            async with grown:
                grown.notify_all()
            return None

        # A canonical cluster with history: jobs exist before any runtime starts, so the
        # fresh-install shortcut does not apply.
        record([(await client.insert(Work(i), kind=KIND)).id for i in range(20)])
        record(
            [
                j.id
                for j in await client.insert_many_copy(
                    [Work(100 + i, "retry") for i in range(10)], kind=KIND
                )
            ]
        )
        later = datetime.now(UTC) + timedelta(seconds=1.5)
        record([(await client.insert(Work(200), kind=KIND, run_at=later)).id])

        start_kwargs: dict[str, Any] = {
            "poll_interval_ms": 50,
            "promote_interval_ms": 100,
            # Completed history on queue storage lives about ring size x rotation interval;
            # the checks below read every job back, so keep the ring from wrapping meanwhile.
            "queue_storage_queue_rotate_interval_ms": 600_000,
        }
        await client.start([("default", 8)], **start_kwargs)
        status = json.loads((await awa_cli(url, "storage", "status", "--json"))[1])
        assert status["state"] == "canonical"

        stop = asyncio.Event()
        counter = iter(range(1000, 10**6))

        async def produce() -> None:
            turn = 0
            while not stop.is_set():
                turn += 1
                if turn % 3 == 0:
                    jobs = await client.insert_many_copy(
                        [Work(next(counter)) for _ in range(5)], kind=KIND
                    )
                    record([j.id for j in jobs])
                elif turn % 3 == 1:
                    job = await client.insert(
                        Work(next(counter), "retry" if turn % 7 == 1 else "plain"), kind=KIND
                    )
                    record([job.id])
                else:
                    async with await client.transaction() as tx:
                        row = await tx.fetch_one(
                            "SELECT id FROM awa.insert_job_compat($1, 'default', $2::jsonb)",
                            KIND,
                            json.dumps({"n": next(counter), "mode": "plain"}),
                        )
                    record([int(row["id"])])
                async with grown:
                    grown.notify_all()
                await asyncio.sleep(0.01)  # paces the producers; nothing waits on it

        producers = [asyncio.create_task(produce()) for _ in range(2)]
        try:
            await while_producing(20)
            code, out, err = await awa_cli(url, "storage", "prepare", "--engine", "queue_storage")
            assert code == 0, err
            await while_producing(10)
            code, out, err = await awa_cli(url, "storage", "enter-mixed-transition", "--json")
            assert code == 0, err
            assert json.loads(out)["state"] == "mixed_transition"
            phase = "mixed"
            await while_producing(20)
            # A worker restart in the middle of the transition.
            await client.shutdown()
            await client.start([("default", 8)], **start_kwargs)
            await while_producing(20)
            code, out, err = await awa_cli(url, "storage", "finalize", "--wait", "60s", "--json")
            assert code == 0, err
            assert json.loads(out)["state"] == "active"
            phase = "after"
            await while_producing(20)
        finally:
            stop.set()
            await asyncio.gather(*producers)

        async with grown:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    grown.wait_for(lambda: all(successes[j] >= 1 for j in enqueued)), 60
                )
        # Every job completed in the database too: none can be claimed again, so any
        # duplicate execution is one in flight now, which the shutdown lets finish.
        await until(
            lambda: _all_completed(client, enqueued),
            "every job completed in the database",
            timeout=60,
        )
        await client.shutdown()

        missing = [job_id for job_id in enqueued if successes[job_id] == 0]
        twice = {job_id: n for job_id, n in successes.items() if n > 1}
        assert not missing, f"{len(missing)} jobs never completed, e.g. {missing[:5]}"
        assert not twice, f"jobs completed more than once: {twice}"
        assert len(set(enqueued)) == len(enqueued)
        assert set(successes) == set(enqueued)
        assert sum(successes.values()) == len(enqueued)
        # Retried jobs ran twice, the rest once.
        assert sum(executions.values()) >= len(enqueued)
        assert all(executions[j] <= 2 for j in enqueued)
        assert all(phases.values()), {k: len(v) for k, v in phases.items()}

        for job_id in enqueued[:: max(1, len(enqueued) // 40)]:
            assert (await client.get_job(job_id)).state == JobState.Completed

        canonical_before, _ = where_jobs_live(url, phases["before"])
        assert canonical_before > 0, "jobs enqueued before the transition ran on canonical"
        canonical_after, queue_storage_after = where_jobs_live(url, phases["after"])
        assert canonical_after == 0 and queue_storage_after == len(phases["after"])
        _, queue_storage_mixed = where_jobs_live(url, phases["mixed"])
        assert queue_storage_mixed == len(phases["mixed"])

        status = json.loads((await awa_cli(url, "storage", "status", "--json"))[1])
        assert status["state"] == "active"
        assert status["canonical_live_backlog"] == 0
        stats = {s.queue: s for s in await client.queue_stats()}
        assert stats["default"].available == 0
