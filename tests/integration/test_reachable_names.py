"""Kind and queue names the admin UI and REST API can reach: every insert path, and the
SQL producer ``awa.insert_job_compat``, refuses the others with an error naming the rule,
and the SQL rule is the Python rule."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors as pg_errors

from awa import Client
from awa.adapters._pg.errors import map_error
from awa.domain.errors import ValidationError
from awa.domain.validation import SPACE_RANGES, UNPRINTABLE_RANGES, name_problem
from tests.conftest import migrate_template
from tests.integration.test_insert_paths_property import PATHS, _insert
from tests.support.pg import DatabaseFactory

pytestmark = pytest.mark.postgres

BAD_QUEUES = {
    "a/b": "'/'",
    " ": "blank",
    "a\nb": "U+000A",
    "pay\u202eusd": "U+202E",
    "email#1": "'#'",
    "..": "'..'",
    " mail": "space",
}
BAD_KINDS = {"send\x01": "U+0001", "  ": "blank", "a\u200bb": "U+200B"}


@pytest.fixture(scope="module", params=["postgres_canonical", "postgres_queue_storage"])
def client(
    request: pytest.FixtureRequest, pg_databases: DatabaseFactory
) -> Iterator[tuple[Client, str]]:
    url = pg_databases.create(pg_databases.template("migrated", migrate_template))
    try:
        with Client(url) as c:
            if request.param == "postgres_queue_storage":
                c.install_queue_storage()
            yield c, url
    finally:
        pg_databases.release(url)


def _insert_named(client: Client, url: str, path: str, kind: str, queue: str | None) -> None:
    options: dict[str, Any] = {} if queue is None else {"queue": queue}
    if path in ("tx_insert", "tx_insert_many"):
        with client.transaction() as tx:
            if path == "tx_insert":
                tx.insert({"n": 1}, kind=kind, **options)
            else:
                tx.insert_many([{"n": 1}], kind=kind, **options)
        return
    _insert(client, url, path, kind, {"args": {"n": 1}, **options})


@pytest.mark.parametrize("path", PATHS)
def test_every_insert_path_refuses_unreachable_names(client: tuple[Client, str], path: str) -> None:
    sync, url = client
    cases = [("queue", q, why, "ok_kind") for q, why in BAD_QUEUES.items()]
    cases += [("kind", k, why, k) for k, why in BAD_KINDS.items()]
    for field, name, why, kind in cases:
        with pytest.raises(ValidationError) as info:
            _insert_named(sync, url, path, kind, name if field == "queue" else None)
        assert info.value.field == field and why in str(info.value), (path, name, info.value)
    assert sync.list_jobs(kind="ok_kind", limit=5) == []
    # Names awa-pg accepts and the UI can show stay accepted (the COPY fast path needs
    # queue storage at all).
    canonical = json.loads(sync.storage_status())["active_engine"] == "canonical"
    if path == "enqueue_many_copy" and canonical:
        return
    for queue in ("mail", "a b", "é-queue", "reports.v2", "x:y"):
        _insert_named(sync, url, path, f"fine_{path}", queue)
    assert len(sync.list_jobs(kind=f"fine_{path}", limit=10)) == 5


def test_the_sql_producer_refuses_them_naming_the_rule(client: tuple[Client, str]) -> None:
    _sync, url = client
    with psycopg.connect(url, autocommit=True) as conn:
        for queue, why in BAD_QUEUES.items():
            with pytest.raises(pg_errors.CheckViolation) as info:
                conn.execute("SELECT awa.insert_job_compat('k', %s)", (queue,))
            assert why in str(info.value) and info.value.diag.constraint_name == (
                "canonical_jobs_queue_check"
            )
        for kind, why in BAD_KINDS.items():
            with pytest.raises(pg_errors.CheckViolation, match=why.replace("+", r"\+")):
                conn.execute("SELECT awa.insert_job_compat(%s, 'q')", (kind,))
        assert conn.execute("SELECT count(*) FROM awa.jobs WHERE kind = 'k'").fetchone() == (0,)
        row = conn.execute("SELECT (awa.insert_job_compat('k', 'fine queue')).queue").fetchone()
        assert row == ("fine queue",)


def _probe_code_points() -> list[int]:
    """Both sides of every range edge of the rule, and a spread of others."""
    edges = {
        cp
        for low, high in (*UNPRINTABLE_RANGES, *SPACE_RANGES)
        for edge in (low, high)
        for cp in (edge - 1, edge, edge + 1)
    }
    spread = set(range(1, 0x3100)) | set(range(0x3100, 0x110000, 97))
    return sorted(c for c in edges | spread if 0 < c < 0x110000 and not 0xD800 <= c <= 0xDFFF)


def test_the_sql_rule_is_the_python_rule(migrated_database_url: str) -> None:
    """Every edge of the rule's ranges (and a spread of other code points) inside a name,
    at its end and alone, plus the queue-only cases: ``awa.job_name_problem`` and
    ``name_problem`` refuse the same names."""
    shapes = {"inside": "a{}b", "end": "a{}", "alone": "{}"}
    names = [pattern.format(chr(cp)) for cp in _probe_code_points() for pattern in shapes.values()]
    queue_names = ["a/b", "a#1", ".", "..", "...", "a.b", "#", "/", "ok"]
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        refused_sql = {
            name
            for (name,) in conn.execute(
                "SELECT n FROM unnest(%s::text[]) AS n "
                "WHERE awa.job_name_problem('kind', n) IS NOT NULL",
                (names,),
            )
        }
        sql_queue = {
            name
            for (name,) in conn.execute(
                "SELECT n FROM unnest(%s::text[]) AS n "
                "WHERE awa.job_name_problem('queue', n) IS NOT NULL",
                (queue_names,),
            )
        }
    assert refused_sql == {n for n in names if name_problem("kind", n) is not None}
    assert sql_queue == {n for n in queue_names if name_problem("queue", n) is not None}
    assert sql_queue == {"a/b", "a#1", ".", "..", "#", "/"}


def test_bad_ids_and_nul_text_are_validation_errors(client: tuple[Client, str]) -> None:
    sync, url = client
    calls: list[Callable[[], object]] = [
        lambda: sync.get_job("abc"),  # type: ignore[arg-type]
        lambda: sync.retry("abc"),  # type: ignore[arg-type]
        lambda: sync.cancel("abc"),  # type: ignore[arg-type]
        lambda: sync.dump_job("abc"),  # type: ignore[arg-type]
        lambda: sync.pause_queue("a\x00b"),
        lambda: sync.resume_queue("a\x00b"),
        lambda: sync.drain_queue("a\x00b"),
        lambda: sync.list_jobs(queue="a\x00b"),
        lambda: sync.list_jobs(kind="a\x00b"),
    ]
    for call in calls:
        with pytest.raises(ValidationError):
            call()
    # What slips past the client is still a ValidationError at the driver's edge.
    with psycopg.connect(url, autocommit=True) as conn:
        for sql, param in (("SELECT %s::bigint", "abc"), ("SELECT %s::text", "a\x00b")):
            try:
                conn.execute(sql, (param,))
            except psycopg.Error as exc:
                assert isinstance(map_error(exc), ValidationError), exc
            else:
                raise AssertionError(f"{sql} accepted {param!r}")
