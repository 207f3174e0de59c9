"""Databases at an older schema, for upgrade tests.

``migrate_as_before(url, version)`` applies the migration stream up to ``version`` the way
the releases before schema files and checksums did (migration 0480): each file and its
``awa.schema_version`` row in one transaction, nothing else. The files of those versions
are the released ones, so the result is the schema such a release left behind.
"""

from __future__ import annotations

import psycopg

from awa.adapters._pg.migrations import CHECKSUM_VERSION, migrations_range

#: The newest version released before schema files and migration checksums.
LAST_VERSION_BEFORE_SCHEMA_FILES = 432


def migrate_as_before(url: str, version: int = LAST_VERSION_BEFORE_SCHEMA_FILES) -> None:
    """Apply the stream up to ``version`` (below :data:`CHECKSUM_VERSION`) as an older
    release did."""
    assert version < CHECKSUM_VERSION
    with psycopg.connect(url, autocommit=True) as conn:
        for number, description, sql in migrations_range(0, version):
            with conn.transaction():
                conn.execute(sql.encode())
                conn.execute(
                    "INSERT INTO awa.schema_version (version, description, applied_at) "
                    "VALUES (%s, %s, clock_timestamp())",
                    (number, description),
                )
