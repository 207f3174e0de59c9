"""The queue-storage engine converts its statements' ``%(name)s`` parameters to ``$n``
once per statement and runs them on psycopg's public raw-query cursor (no private psycopg
name, whatever the statement's length)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg.rows import dict_row

from awa.adapters._pg.pool import DictConnection
from awa.adapters.postgres_queue_storage import statements
from awa.adapters.postgres_queue_storage.statements import numbered, run

pytestmark = pytest.mark.anyio

#: Longer than psycopg's own conversion cache takes (4 KiB).
LONG = b" -- " + b"x" * 5000


def test_each_name_gets_one_number_and_percent_signs_are_unescaped() -> None:
    query, names = numbered(b"SELECT %(a)s, %(b)s, %(a)s, 7 %% 3, '%(a)s'" + LONG)
    assert query.startswith(b"SELECT $1, $2, $1, 7 % 3, '$1'")
    assert names == ("a", "b")
    assert numbered(b"SELECT 1") == (b"SELECT 1", ())


def test_a_statement_is_converted_once_whatever_its_length() -> None:
    statement = b"SELECT %(n)s::int AS n" + LONG
    numbered(statement)
    hits = numbered.cache_info().hits
    numbered(statement)
    assert numbered.cache_info().hits == hits + 1


@pytest.mark.parametrize("form", [b"%s", b"%(a)b", b"%d", b"%(1a)s", b"50%"])
def test_any_other_percent_form_is_refused(form: bytes) -> None:
    with pytest.raises(psycopg.ProgrammingError, match="only %\\(name\\)s parameters"):
        numbered(b"SELECT " + form)


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[DictConnection]:
    async with await psycopg.AsyncConnection.connect(
        database_url, autocommit=True, row_factory=dict_row
    ) as opened:
        yield opened


async def test_run_binds_by_name_on_a_long_statement(conn: DictConnection) -> None:
    statement = b"SELECT %(a)s::int + %(b)s::int AS s, %(a)s::text AS a, 7 %% 3 AS m" + LONG
    cur = await run(conn, statement, {"b": 2, "a": 40, "unused": "ignored"})
    assert await cur.fetchall() == [{"s": 42, "a": "40", "m": 1}]
    cur = await run(conn, statement, {"a": 1, "b": 1}, prepare=True)
    assert await cur.fetchall() == [{"s": 2, "a": "1", "m": 1}]


async def test_without_parameters_the_statement_goes_as_it_is(conn: DictConnection) -> None:
    cur = await run(conn, b"SELECT 7 % 3 AS m")
    assert await cur.fetchall() == [{"m": 1}]


async def test_a_missing_parameter_is_named_before_anything_is_sent(
    conn: DictConnection,
) -> None:
    with pytest.raises(psycopg.ProgrammingError, match="query parameter missing: b"):
        await run(conn, b"SELECT %(a)s, %(b)s", {"a": 1})
    with pytest.raises(TypeError, match="must be a mapping by name"):
        await run(conn, b"SELECT %(a)s", [1])  # type: ignore[arg-type]


def test_no_private_psycopg_name_is_imported() -> None:
    source = statements.__file__
    assert source is not None
    with open(source, encoding="utf-8") as handle:
        text = handle.read()
    assert "psycopg._" not in text and "from psycopg._" not in text
