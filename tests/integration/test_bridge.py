"""``awa.bridge``: enqueue on the caller's connection, committing or rolling back with it."""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
import pytest

from awa.bridge import insert_job, insert_job_sync
from tests.support.otel import Recorder, recording

pytestmark = pytest.mark.postgres


@dataclasses.dataclass
class SendEmail:
    to: str


def _count(url: str, job_id: int) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM awa.jobs WHERE id = %s", (job_id,)).fetchone()
        assert row is not None
        return int(row[0])


@pytest.fixture
def migrated(migrated_database_url: str) -> str:
    return migrated_database_url


def _inserted(recorder: Recorder) -> float:
    return recorder.total("awa.job.inserted")


def _check_row(row: dict[str, Any], *, kind: str = "send_email") -> None:
    assert set(row) == {
        "id",
        "kind",
        "queue",
        "args",
        "state",
        "priority",
        "attempt",
        "max_attempts",
        "run_at",
        "created_at",
        "metadata",
        "tags",
    }
    assert row["kind"] == kind
    assert row["attempt"] == 0


def test_psycopg_sync_commit_and_rollback(migrated: str) -> None:
    with recording() as recorder, psycopg.connect(migrated, autocommit=True) as conn:
        # With no transaction open the insert is committed at once, and counted.
        insert_job_sync(conn, SendEmail("auto"), queue="counted")
        assert recorder.total("awa.job.inserted", {"awa.job.queue": "counted"}) == 1
        # Inside the caller's transaction psycopg reports no commit: not counted.
        with conn.transaction():
            insert_job_sync(conn, SendEmail("in-tx"), queue="counted")
        assert _inserted(recorder) == 1
    with psycopg.connect(migrated) as conn:
        row = insert_job_sync(conn, SendEmail("a@b"), tags=["t"], metadata={"m": 1})
        _check_row(row)
        assert row["args"] == {"to": "a@b"}
        assert row["state"] == "available"
        assert row["tags"] == ["t"]
        assert row["metadata"] == {"m": 1}
        conn.rollback()
    assert _count(migrated, row["id"]) == 0
    with psycopg.connect(migrated) as conn:
        row = insert_job_sync(conn, {"x": 1}, kind="raw", run_at="2030-01-01T00:00:00Z")
        assert row["state"] == "scheduled"
        conn.commit()
    assert _count(migrated, row["id"]) == 1


@pytest.mark.anyio
async def test_psycopg_async_commit_and_rollback(migrated: str) -> None:
    async with await psycopg.AsyncConnection.connect(migrated) as conn:
        row = await insert_job(conn, SendEmail("x"), queue="mail", priority=1)
        _check_row(row)
        assert (row["queue"], row["priority"]) == ("mail", 1)
        await conn.rollback()
        kept = await insert_job(conn, {"kind": "from_key", "v": 2})
        assert kept["kind"] == "from_key"
        await conn.commit()
    assert _count(migrated, row["id"]) == 0
    assert _count(migrated, kept["id"]) == 1


@pytest.mark.anyio
async def test_asyncpg_transaction(migrated: str) -> None:
    asyncpg = pytest.importorskip("asyncpg")
    conn = await asyncpg.connect(migrated)
    try:
        tx = conn.transaction()
        await tx.start()
        row = await insert_job(conn, SendEmail("y"), ordering_key="k")
        _check_row(row)
        assert row["args"] == {"to": "y"}
        await tx.rollback()
        async with conn.transaction():
            kept = await insert_job(conn, SendEmail("z"))
        with recording() as recorder:
            await insert_job(conn, SendEmail("autocommit"))
            assert _inserted(recorder) == 1
    finally:
        await conn.close()
    assert _count(migrated, row["id"]) == 0
    assert _count(migrated, kept["id"]) == 1


@pytest.mark.anyio
async def test_sqlalchemy_async(migrated: str) -> None:
    pytest.importorskip("sqlalchemy")
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    engine = create_async_engine(migrated.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with recording() as recorder:
            async with engine.connect() as conn:
                row = await insert_job(conn, SendEmail("s"))
                _check_row(row)
                await conn.rollback()
                assert _inserted(recorder) == 0
                # The rolled-back insert's listener is spent: this commit counts one.
                await insert_job(conn, SendEmail("s2"))
                await conn.commit()
                assert _inserted(recorder) == 1
            async with engine.begin() as conn:
                kept = await insert_job(conn, SendEmail("t"))
                assert _inserted(recorder) == 1
            assert _inserted(recorder) == 2
            async with AsyncSession(engine) as session:
                await insert_job(session, SendEmail("orm"))
                await session.rollback()
                await insert_job(session, SendEmail("orm2"))
                await session.commit()
            assert _inserted(recorder) == 3
    finally:
        await engine.dispose()
    assert _count(migrated, row["id"]) == 0
    assert _count(migrated, kept["id"]) == 1


def test_sqlalchemy_sync(migrated: str) -> None:
    pytest.importorskip("sqlalchemy")
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    engine = create_engine(migrated.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with recording() as recorder:
            with engine.connect() as conn:
                row = insert_job_sync(conn, SendEmail("s"))
                _check_row(row)
                conn.rollback()
            with engine.begin() as conn:
                kept = insert_job_sync(conn, SendEmail("t"))
                assert _inserted(recorder) == 0
            assert _inserted(recorder) == 1
            with Session(engine) as session:
                insert_job_sync(session, SendEmail("orm"))
                session.rollback()
                insert_job_sync(session, SendEmail("orm2"))
                session.commit()
            assert _inserted(recorder) == 2
    finally:
        engine.dispose()
    assert _count(migrated, row["id"]) == 0
    assert _count(migrated, kept["id"]) == 1


def test_django_connection(migrated: str) -> None:
    pytest.importorskip("django")
    import django
    from django.conf import settings

    info = psycopg.conninfo.conninfo_to_dict(migrated)
    if not settings.configured:
        settings.configure(DATABASES={}, INSTALLED_APPS=[], USE_TZ=True)
        django.setup()
    from django.db import connections, transaction

    alias = f"bridge_{info['dbname']}"
    connections.databases[alias] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": info["dbname"],
        "USER": info.get("user", "postgres"),
        "PASSWORD": info.get("password", ""),
        "HOST": info.get("host", "127.0.0.1"),
        "PORT": info.get("port", "5432"),
        "TIME_ZONE": None,
        "CONN_MAX_AGE": 0,
        "CONN_HEALTH_CHECKS": False,
        "OPTIONS": {},
        "AUTOCOMMIT": True,
        "ATOMIC_REQUESTS": False,
        "TEST": {},
    }
    connection = connections[alias]
    try:
        with recording() as recorder:
            with pytest.raises(RuntimeError), transaction.atomic(using=alias):
                row = insert_job_sync(connection, SendEmail("dj"))
                _check_row(row)
                raise RuntimeError("roll back")
            with transaction.atomic(using=alias):
                kept = insert_job_sync(connection, SendEmail("dj2"))
                assert _inserted(recorder) == 0
            assert _inserted(recorder) == 1
    finally:
        connection.close()
        del connections.databases[alias]
    assert _count(migrated, row["id"]) == 0
    assert _count(migrated, kept["id"]) == 1


@pytest.mark.anyio
async def test_refusals(migrated: str) -> None:
    with psycopg.connect(migrated) as sync_conn:
        with pytest.raises(ValueError, match="null bytes"):
            insert_job_sync(sync_conn, {"s": "a\x00b"}, kind="k")
        with pytest.raises(TypeError, match="insert_job\\(\\) requires an async"):
            await insert_job(sync_conn, SendEmail("x"))
        with pytest.raises(TypeError, match="kind"):
            insert_job_sync(sync_conn, {"no": "kind"})
        with pytest.raises(TypeError, match="dataclass"):
            insert_job_sync(sync_conn, 42, kind="k")
    async with await psycopg.AsyncConnection.connect(migrated) as async_conn:
        with pytest.raises(TypeError, match="insert_job_sync\\(\\) requires a sync"):
            insert_job_sync(async_conn, SendEmail("x"))
    with pytest.raises(TypeError, match="Unsupported connection type"):
        insert_job_sync(object(), SendEmail("x"))
