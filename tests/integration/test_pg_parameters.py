"""How every connection the adapters open reads ``json``/``jsonb`` and sends integer
arrays (``awa.adapters._pg.pool.configure``): the values are what psycopg's own
conversions give, by a shorter path."""

from __future__ import annotations

import pytest

from awa.adapters._pg.arrays import Int8s
from awa.adapters._pg.pool import connect

pytestmark = pytest.mark.anyio


async def test_jsonb_reads_as_psycopg_reads_it(database_url: str) -> None:
    conn = await connect(database_url)
    try:
        cur = await conn.execute(
            "SELECT '{}'::jsonb AS a, '{}'::jsonb AS b, "
            """'{"k": [1, 2.5, "é", null, true], "big": 123456789012345678901234}'::jsonb"""
            " AS c, '\"text\"'::json AS d, 'null'::jsonb AS e, '[]'::json AS f"
        )
        row = await cur.fetchone()
    finally:
        await conn.close()
    assert row is not None
    assert row["a"] == {} and row["b"] == {}
    # each empty object its own dict: a job's metadata is changed in place by some callers
    assert row["a"] is not row["b"]
    assert row["c"] == {"k": [1, 2.5, "é", None, True], "big": 123456789012345678901234}
    assert (row["d"], row["e"], row["f"]) == ("text", None, [])


async def test_an_int8s_parameter_is_an_int8_array(database_url: str) -> None:
    conn = await connect(database_url)
    try:
        values = Int8s([3, -1, 2**62, 0])
        # small values too: a plain list of them would go as smallint[], and a prepared
        # statement's parameter types would follow the values
        cur = await conn.execute(
            "SELECT pg_typeof(%s)::text AS type, pg_typeof(%s)::text AS small,"
            " %s::bigint[] AS back, %s::bigint[] AS empty",
            (values, Int8s([1, 2]), values, Int8s()),
        )
        row = await cur.fetchone()
    finally:
        await conn.close()
    assert row is not None
    assert (row["type"], row["small"]) == ("bigint[]", "bigint[]")
    assert (row["back"], row["empty"]) == ([3, -1, 2**62, 0], [])
