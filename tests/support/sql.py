"""One-off SQL against a test database, outside any engine under test."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row


async def sql(url: str, query: str, *params: Any) -> list[dict[str, Any]]:
    """Run ``query`` with ``params`` on a fresh autocommit connection to ``url``; its rows
    as dicts (none for a statement that returns no rows)."""
    async with await psycopg.AsyncConnection.connect(
        url, autocommit=True, row_factory=dict_row
    ) as conn:
        cur = await conn.execute(query.encode(), params)
        return list(await cur.fetchall()) if cur.description else []
