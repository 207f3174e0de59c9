"""``awa.job_held_back(id)``, the SQL twin of the per-job held-back rule (ADR 0029), says
what ``get_job`` says of the same job: which limit holds it back (its key's slots, the
queue's or its key's fleet-wide limiter with its next admission), or NULL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from awa import AsyncClient
from awa.domain.flow_control import CONCURRENCY_KEY_METADATA
from awa.domain.rate_limits import GlobalRateLimit

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

#: One job every 1,000 s after a burst of one: the limiter holds the rest back for long.
SLOW = GlobalRateLimit(rate=0.001, burst=1)


@pytest.fixture
async def client(migrated_database_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(migrated_database_url) as c:
        yield c


async def sql_reason(url: str, job_id: int) -> dict[str, Any] | None:
    async with await psycopg.AsyncConnection.connect(url, row_factory=dict_row) as conn:
        row = await (await conn.execute("SELECT awa.job_held_back(%s) AS r", (job_id,))).fetchone()
    assert row is not None
    found: dict[str, Any] | None = row["r"]
    return found


def _split(doc: dict[str, Any]) -> tuple[dict[str, Any], datetime | None, str]:
    """The fields, the next admission as an instant, and the reason before its time."""
    fields = {k: v for k, v in doc.items() if k not in ("next_admission", "reason")}
    at = doc["next_admission"]
    return (
        fields,
        None if at is None else datetime.fromisoformat(at),
        doc["reason"].split(", next admission at ")[0],
    )


async def same_reason(client: AsyncClient, url: str, job_id: int) -> dict[str, Any] | None:
    """The SQL function's answer, checked against ``get_job``'s."""
    from_sql = await sql_reason(url, job_id)
    held = (await client.get_job(job_id)).held_back
    from_python = None if held is None else held.as_json()
    if from_python is None or from_sql is None:
        assert from_sql == from_python
    else:
        assert _split(from_sql) == _split(from_python)
    return from_sql


async def keyed(client: AsyncClient, queue: str, key: str | None) -> int:
    metadata = {} if key is None else {CONCURRENCY_KEY_METADATA: key}
    return (await client.insert({}, kind="held", queue=queue, metadata=metadata)).id


async def test_a_full_key(client: AsyncClient, migrated_database_url: str) -> None:
    url = migrated_database_url
    first, second = await keyed(client, "sql_keys", "t-1"), await keyed(client, "sql_keys", "t-1")
    other = await keyed(client, "sql_keys", "t-2")
    await client.set_queue_overrides("sql_keys", max_running_per_key=1)
    assert await same_reason(client, url, second) is None
    engine = await client.admin_engine()
    (claim,) = await engine.claim("sql_keys", limit=1, max_running_per_key=1)
    assert claim.job.id == first
    held = await same_reason(client, url, second)
    assert held is not None
    assert held["reason"] == "held back: key t-1 has 1 of 1 running (max_running_per_key)"
    assert await same_reason(client, url, other) is None
    assert await same_reason(client, url, first) is None  # running, not available
    assert await sql_reason(url, 987_654_321) is None


async def test_the_queue_and_key_limiters(client: AsyncClient, migrated_database_url: str) -> None:
    url = migrated_database_url
    engine = await client.admin_engine()
    jobs = [await keyed(client, "sql_rate", None) for _ in range(2)]
    await client.set_queue_overrides("sql_rate", global_rate_limit=0.001, global_rate_burst=1)
    assert await same_reason(client, url, jobs[1]) is None
    assert len(await engine.claim("sql_rate", limit=2, global_rate_limit=SLOW)) == 1
    held = await same_reason(client, url, jobs[1])
    assert held is not None and held["limit"] == "global_rate_limit"
    assert held["next_admission"] is not None

    per_key = [await keyed(client, "sql_key_rate", "t-9") for _ in range(2)]
    other = await keyed(client, "sql_key_rate", "t-8")
    await client.set_queue_overrides(
        "sql_key_rate", global_rate_limit_per_key=0.001, global_rate_burst_per_key=1
    )
    claims = await engine.claim("sql_key_rate", limit=5, global_rate_limit_per_key=SLOW)
    assert sorted(c.job.id for c in claims) == [per_key[0], other]
    held = await same_reason(client, url, per_key[1])
    assert held is not None and (held["limit"], held["key"]) == ("global_rate_limit_per_key", "t-9")
    # A key whose limiter was never used has its whole burst.
    assert await same_reason(client, url, await keyed(client, "sql_key_rate", "t-7")) is None
