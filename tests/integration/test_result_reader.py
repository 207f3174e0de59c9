"""The waiters a burst of completions wakes read their results through one reader: the
reads asked for while one is in flight go together in the next statement, so forty
woken waiters take one or two of the pool's connections between them, not forty (at
200 jobs/s they queued for the producer's connections one each)."""

from __future__ import annotations

import asyncio
import json
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from awa.adapters._pg.pool import open_pool
from awa.adapters._pg.results import PgResultStore
from awa.adapters.clock import SystemClock
from awa.domain.results import StoredResult

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

WAITERS = 40


async def test_woken_waiters_share_one_read_of_their_results(
    migrated_database_url: str,
) -> None:
    pool = await open_pool(migrated_database_url, max_connections=4)
    taken = 0
    connection = pool.connection

    def counted(*args: Any, **kwargs: Any) -> AbstractAsyncContextManager[Any]:
        nonlocal taken
        taken += 1
        return connection(*args, **kwargs)

    try:
        store = PgResultStore(pool, SystemClock())
        ids = list(range(7_000_001, 7_000_001 + WAITERS))
        for job_id in ids[:-1]:  # the last job stored none (its task does not)
            await store.store_result(job_id, json.dumps({"job": job_id}), kind="report")
        pool.connection = counted  # type: ignore[method-assign,assignment]

        found = await asyncio.gather(*(store.get_result(job_id) for job_id in ids))

        assert [None if r is None else r.value for r in found] == [
            *({"job": job_id} for job_id in ids[:-1]),
            None,
        ]
        assert all(isinstance(r, StoredResult) and r.kind == "report" for r in found[:-1])
        assert 1 <= taken <= 2, f"{WAITERS} reads took {taken} pool connections"

        # A read alone, and two asking for the same job, are answered as before.
        taken = 0
        one, same = await asyncio.gather(store.get_result(ids[0]), store.get_result(ids[0]))
        assert one == same and one is not None and one.value == {"job": ids[0]}
        assert taken == 1
    finally:
        await pool.close()


async def test_a_failed_read_fails_the_reads_that_shared_it(migrated_database_url: str) -> None:
    """An error of the shared statement reaches every read in it; the next reads go on."""
    pool = await open_pool(migrated_database_url, max_connections=2)
    try:
        store = PgResultStore(pool, SystemClock())
        await store.store_result(7_100_001, "[1]")
        read = store._read_results
        failures = iter([RuntimeError("connection lost")])

        async def flaky(job_ids: list[int]) -> dict[int, StoredResult]:
            error = next(failures, None)
            if error is not None:
                raise error
            return await read(job_ids)

        store._reader = type(store._reader)(flaky)
        outcomes = await asyncio.gather(
            store.get_result(7_100_001), store.get_result(7_100_002), return_exceptions=True
        )
        assert [type(o) for o in outcomes] == [RuntimeError, RuntimeError]
        again = await store.get_result(7_100_001)
        assert again is not None and again.value == [1]
    finally:
        await pool.close()
