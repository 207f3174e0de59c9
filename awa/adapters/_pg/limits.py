"""The connection limits Postgres applies to this role on this database."""

from __future__ import annotations

import attrs

from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictPool
from awa.adapters._pg.sql import load_queries


@attrs.frozen
class ConnectionLimit:
    """One limit a new connection must fit under: what it applies to (``role "app"``),
    how to change it, how many connections it allows and how many count against it now."""

    scope: str
    remedy: str
    limit: int
    in_use: int


async def connection_limits(pool: DictPool) -> list[ConnectionLimit]:
    """The limits a connection of this role to this database counts against: the role's
    and the database's ``CONNECTION LIMIT`` (when set; superusers are exempt) and the
    server's ``max_connections`` (less the slots reserved for superusers, for others)."""
    query = load_queries("awa.adapters._pg", "limits.sql")["connection_limits"]
    async with translated_errors(), pool.connection() as conn:
        cur = await conn.execute(query.encode())
        row = await cur.fetchone()
    if row is None:
        return []
    superuser = bool(row["superuser"])
    role, database = row["role_name"], row["database_name"]
    limits: list[ConnectionLimit] = []
    if not superuser and row["role_limit"] >= 0:
        limits.append(
            ConnectionLimit(
                scope=f'role "{role}"',
                remedy=f'ALTER ROLE "{role}" CONNECTION LIMIT <n>',
                limit=int(row["role_limit"]),
                in_use=int(row["role_in_use"]),
            )
        )
    if not superuser and row["database_limit"] >= 0:
        limits.append(
            ConnectionLimit(
                scope=f'database "{database}"',
                remedy=f'ALTER DATABASE "{database}" CONNECTION LIMIT <n>',
                limit=int(row["database_limit"]),
                in_use=int(row["database_in_use"]),
            )
        )
    reserved = 0 if superuser else int(row["reserved_connections"])
    limits.append(
        ConnectionLimit(
            scope="the server",
            remedy="the server's max_connections setting",
            limit=int(row["max_connections"]) - reserved,
            in_use=int(row["server_in_use"]),
        )
    )
    return limits
