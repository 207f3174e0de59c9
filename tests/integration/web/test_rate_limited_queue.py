"""The admin API and the queue page show how many available jobs a queue's fleet-wide
rate limit holds back right now (ADR 0029)."""

from __future__ import annotations

import psycopg
import pytest

import awa
from tests.integration.web.conftest import AppFactory

pytestmark = pytest.mark.postgres


def test_the_queue_page_shows_jobs_held_back_by_the_rate_limit(
    migrated_database_url: str, make_client: AppFactory
) -> None:
    url = migrated_database_url
    with awa.Client(url) as client:
        for n in range(5):
            client.insert({"n": n}, kind="paced_call", queue="paced")
            client.insert({"n": n}, kind="free_call", queue="free")
        # The limit in force: an operator's override (no worker runs here).
        client.set_queue_overrides("paced", global_rate_limit=1.0, global_rate_burst=2)
    with psycopg.connect(url) as conn:
        # The limiter as claims leave it when its burst is spent: 100 s of backlog.
        conn.execute(
            "INSERT INTO awa.rate_limiters (queue, limiter, tat, rate, burst, updated_at)"
            " VALUES ('paced', '', now() + interval '100 seconds', 1.0, 2, now())"
        )
    web = make_client(url)
    queues = {q["queue"]: q for q in web.get("/api/queues").json()}
    assert queues["paced"]["rate_limited"] == 5
    assert queues["free"]["rate_limited"] == 0
    page = web.get("/queues/paced").text
    assert "5 held back by the fleet-wide rate limit" in page
    assert "held back" not in web.get("/queues/free").text
