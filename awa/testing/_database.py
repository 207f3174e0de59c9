"""Throw-away databases for tests: created empty and migrated, dropped afterwards.

The server comes from ``AWA_TEST_DATABASE_URL``, else ``DATABASE_URL``, else a local
``postgresql://postgres@localhost:5432/postgres``. That URL is used only to issue
``CREATE DATABASE`` / ``DROP DATABASE``; nothing is read from or written to the database
it names. The created database is called ``awa_throwaway_<random>``.

Migrating a database from nothing takes seconds. So the first migrated database a process
asks for on a server is made as a template (``awa_throwaway_template_<random>``), migrated
once, and every throw-away database is a copy of it (``CREATE DATABASE ... TEMPLATE``, a
fraction of a second); the template is dropped when the process exits.

Dropping a database makes the server take a checkpoint and wait for it (a fraction of a
second on a quiet server, tens of seconds on a busy one). :func:`temporary_database` and
the pytest plugin's ``awa_database_url`` do not wait for it: they end the database's
sessions at once and leave the drop to the server in the background (it finishes even
after the process exits). ``drop_database(url)`` waits, unless ``wait=False``.
"""

from __future__ import annotations

import atexit
import os
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from psycopg.conninfo import make_conninfo

from awa.adapters._pg import conninfo
from awa.adapters._pg import databases as pg_databases
from awa.domain.errors import DatabaseError
from awa.entrypoints import bootstrap

LOCAL_SERVER = "postgresql://postgres@localhost:5432/postgres"
PREFIX = "awa_throwaway_"
#: Databases this process created; only these may be dropped.
_CREATED: set[str] = set()
#: Per server (the URL throw-away databases are created through): the migrated template
#: this process copies them from.
_TEMPLATES: dict[str, str] = {}


def server_url(environ: Mapping[str, str] | None = None) -> str:
    """The server throw-away databases are created on."""
    env = os.environ if environ is None else environ
    for key in ("AWA_TEST_DATABASE_URL", "DATABASE_URL"):
        value = env.get(key, "").strip()
        if value:
            return conninfo.normalize(value)
    return LOCAL_SERVER


async def create_database(server: str | None = None, *, migrate: bool = True) -> str:
    """Create ``awa_throwaway_<random>`` on ``server`` (migrated unless ``migrate=False``:
    a copy of this process's migrated template) and return its connection string."""
    base = server or server_url()
    template = await _migrated_template(base) if migrate else None
    name = f"{PREFIX}{uuid.uuid4().hex[:16]}"
    await _create(base, name, template)
    _CREATED.add(name)
    return make_conninfo(base, dbname=name)


async def _create(base: str, name: str, template: str | None = None) -> None:
    try:
        await pg_databases.create_database(base, name, template=template)
    except DatabaseError as exc:
        raise RuntimeError(
            f"cannot create a test database on {conninfo.display(base)}: {exc} (set "
            "AWA_TEST_DATABASE_URL to a server where this role may CREATE DATABASE)"
        ) from None


async def _migrated_template(base: str) -> str:
    """This process's migrated template on ``base``, made and migrated on first use."""
    found = _TEMPLATES.get(base)
    if found is not None:
        return found
    name = f"{PREFIX}template_{uuid.uuid4().hex[:16]}"
    await _create(base, name)
    try:
        await bootstrap.migrate(make_conninfo(base, dbname=name))
    except BaseException:
        _drop_templates({base: name})
        raise
    if base in _TEMPLATES:
        # Another task of this process made one meanwhile: keep that one.
        _drop_templates({base: name})
        return _TEMPLATES[base]
    if not _TEMPLATES:
        atexit.register(_drop_templates, _TEMPLATES)
    _TEMPLATES[base] = name
    return name


def _drop_templates(templates: dict[str, str]) -> None:
    """Hand the drop of ``templates`` to the server and wait until it is sent."""
    for base, name in list(templates.items()):
        pg_databases.drop_database_in_background(base, name)
        templates.pop(base, None)
    pg_databases.wait_sent()


async def drop_database(url: str, *, wait: bool = True) -> None:
    """Drop a database made by :func:`create_database` in this process (refuses any
    other).

    ``wait=False`` ends the database's sessions now and returns; the ``DROP DATABASE``
    (and the checkpoint it waits for) goes on in the background, finishing even if the
    process exits first. A failure there is logged on the ``awa.testing`` logger."""
    name = conninfo.parse(url).get("dbname", "")
    if name not in _CREATED:
        raise ValueError(f"refusing to drop {name!r}: not a database the test helpers created")
    admin = make_conninfo(url, dbname="postgres")
    if wait:
        await pg_databases.drop_database(admin, name)
    else:
        await pg_databases.disconnect_database(admin, name)
        pg_databases.drop_database_in_background(admin, name)
    _CREATED.discard(name)


@asynccontextmanager
async def temporary_database(server: str | None = None) -> AsyncIterator[str]:
    """A migrated throw-away database for the duration of the ``async with`` block;
    on leaving it, its sessions end and it is dropped in the background."""
    url = await create_database(server)
    try:
        yield url
    finally:
        await drop_database(url, wait=False)
