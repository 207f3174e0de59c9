"""A client on a database that was never migrated.

Its own SQL transactions run (they need no Awa schema) and its health check answers
unhealthy with Postgres connected; what needs the schema raises ``SchemaNotMigrated``
until ``migrate()`` runs, and works after it with the same client.
"""

from __future__ import annotations

import dataclasses

import pytest

import awa
from awa import AsyncClient
from awa.domain.errors import SchemaNotMigrated

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@dataclasses.dataclass
class Note:
    text: str


async def test_async_transaction_and_health_check_on_a_never_migrated_database(
    database_url: str,
) -> None:
    async with AsyncClient(database_url) as client:
        async with await client.transaction() as tx:
            await tx.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
            assert await tx.execute("INSERT INTO notes VALUES ($1, $2)", 1, "first") == 1
            assert await tx.fetch_one("SELECT body FROM notes WHERE id = $1", 1) == {
                "body": "first"
            }
        async with await client.transaction() as tx:
            assert await tx.fetch_all("SELECT id FROM notes") == [{"id": 1}]
        health = await client.health_check()
        assert health.healthy is False
        assert health.postgres_connected is True
        assert health.leader is False and health.queues == {}
        with pytest.raises(SchemaNotMigrated, match="awa migrate"):
            await client.insert(Note("x"))
        await client.migrate()
        job = await client.insert(Note("after migrate"))
        assert (await client.get_job(job.id)).args == {"text": "after migrate"}


def test_sync_transaction_and_health_check_on_a_never_migrated_database(
    database_url: str,
) -> None:
    with awa.Client(database_url) as client:
        with client.transaction() as tx:
            tx.execute("CREATE TABLE notes (id int PRIMARY KEY)")
            tx.execute("INSERT INTO notes VALUES ($1)", 7)
        with client.transaction() as tx:
            assert tx.fetch_optional("SELECT id FROM notes") == {"id": 7}
        health = client.health_check()
        assert (health.healthy, health.postgres_connected) == (False, True)
        with pytest.raises(SchemaNotMigrated):
            client.insert(Note("x"))
