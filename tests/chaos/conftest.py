"""``worker_url``: where a chaos test's worker processes connect, the database itself
(``direct``) or the same database through the session's PgBouncer in transaction mode
(``pooled``; skipped without pgbouncer). The tests read and check through the database
itself."""

from __future__ import annotations

import pytest

from tests.support.pgbouncer import PgBouncer


@pytest.fixture(params=["direct", "pooled"])
def worker_url(request: pytest.FixtureRequest, migrated_database_url: str) -> str:
    if request.param == "direct":
        return migrated_database_url
    bouncer: PgBouncer = request.getfixturevalue("pgbouncer_running")
    return bouncer.url(migrated_database_url)
