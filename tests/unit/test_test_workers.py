"""The test command's worker count (``tests/support/workers.py``): two on two cores or
more, in-process on one, lowered to fit the shared server's ``max_connections``."""

from __future__ import annotations

import os

import pytest

from tests.support import workers
from tests.support.workers import (
    CONNECTIONS_PER_WORKER,
    RESERVED_CONNECTIONS,
    WORKERS,
    choose_workers,
    shared_server_url,
)


def test_two_cores_or_more_run_the_default_workers_on_a_roomy_server() -> None:
    assert choose_workers(2, 500) == WORKERS == 2
    assert choose_workers(16, 500) == WORKERS
    assert choose_workers(2, None) == WORKERS  # each worker starts its own server


def test_one_core_runs_in_process() -> None:
    assert choose_workers(1, 500) == 0
    assert choose_workers(1, None) == 0


def test_a_default_server_of_100_connections_holds_two_workers() -> None:
    assert choose_workers(2, 100) == 2


def test_a_small_server_lowers_the_count_and_below_two_runs_in_process() -> None:
    two = RESERVED_CONNECTIONS + 2 * CONNECTIONS_PER_WORKER
    assert choose_workers(4, two) == 2
    assert choose_workers(4, two - 1) == 0  # one worker would only add the xdist overhead
    assert choose_workers(4, 20) == 0


def test_embedded_and_docker_have_no_shared_server(monkeypatch: pytest.MonkeyPatch) -> None:
    for provider in ("embedded", "docker"):
        monkeypatch.setenv("AWA_TEST_PG_PROVIDER", provider)
        assert shared_server_url() is None


def test_an_env_url_is_the_shared_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWA_TEST_PG_PROVIDER", raising=False)
    monkeypatch.setenv("AWA_TEST_DATABASE_URL", "postgresql://u@db.example:5433/x")
    assert shared_server_url() == "postgresql://u@db.example:5433/x"


@pytest.mark.postgres
def test_the_server_limit_is_read_from_the_server(
    monkeypatch: pytest.MonkeyPatch, pg_server_url: str
) -> None:
    limit = workers.server_max_connections(pg_server_url)
    assert limit is not None and limit >= 1
    assert workers.server_max_connections(None) is None
    monkeypatch.setattr(workers, "shared_server_url", lambda: pg_server_url)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert workers.auto_workers() == (choose_workers(2, limit), limit)
