"""Postgres for the test suite: find or start a server, then hand out isolated databases.

Server discovery (:func:`provision`), first match wins:

1. ``env``: ``AWA_TEST_DATABASE_URL``, then ``DATABASE_URL``, used as given.
2. ``local``: a server answering on ``127.0.0.1:5432`` as user ``postgres``.
3. ``docker``: a ``testcontainers`` Postgres container, when a Docker engine answers.
4. ``embedded``: a throw-away server from the ``pgserver`` wheel in a temp directory.

``AWA_TEST_PG_PROVIDER`` (one of the four names) skips discovery and forces that branch,
e.g. ``AWA_TEST_PG_PROVIDER=embedded`` reproduces a machine without any Postgres.

Isolation (:class:`DatabaseFactory`): every test gets its own database, cloned with
``CREATE DATABASE ... TEMPLATE`` from a per-session template built from ``template0``.
See ``ADRs/0003-test-database-provisioning.md``.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import attrs
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

Provider = Literal["env", "local", "docker", "embedded"]
PROVIDERS: tuple[Provider, ...] = get_args(Provider)

ENV_VARS = ("AWA_TEST_DATABASE_URL", "DATABASE_URL")
FORCE_VAR = "AWA_TEST_PG_PROVIDER"
LOCAL_HOST = "127.0.0.1"
LOCAL_PORT = 5432
LOCAL_URL = f"postgresql://postgres@{LOCAL_HOST}:{LOCAL_PORT}/postgres"
DOCKER_IMAGE = "postgres:16-alpine"
TEST_DB_PREFIX = "awa_test_"
TEMPLATE_PREFIX = "awa_tpl_"


class ProvisioningError(RuntimeError):
    """No Postgres server could be found or started for the requested branch."""


@attrs.frozen
class PgServer:
    """A reachable server: a URL for its maintenance database and how it was obtained."""

    url: str
    provider: Provider
    stop: Callable[[], None] = attrs.field(repr=False, eq=False)


# ---------------------------------------------------------------- probes


def env_url(environ: Mapping[str, str] | None = None) -> str | None:
    """The first non-empty override among :data:`ENV_VARS`."""
    env = os.environ if environ is None else environ
    for name in ENV_VARS:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def local_server_answers(
    host: str = LOCAL_HOST, port: int = LOCAL_PORT, timeout: float = 0.5
) -> bool:
    """True when a Postgres server accepts ``postgres`` on ``host:port`` right now.

    A raw TCP probe first so a closed port costs well under a second, then a real login.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError:
        return False
    try:
        with psycopg.connect(
            f"postgresql://postgres@{host}:{port}/postgres", connect_timeout=2
        ) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def docker_engine_answers(timeout: float = 2.0) -> bool:
    """True when a Docker engine responds to a ping within ``timeout`` seconds."""
    try:
        import docker

        client = docker.from_env(timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        # Any failure (no socket, no daemon, no permission, no package) means "no Docker".
        return False


# ---------------------------------------------------------------- branches


def _start_env() -> PgServer:
    url = env_url()
    if url is None:
        raise ProvisioningError(f"none of {', '.join(ENV_VARS)} is set")
    return PgServer(url=url, provider="env", stop=lambda: None)


def _start_local() -> PgServer:
    if not local_server_answers():
        raise ProvisioningError(f"no Postgres server answers on {LOCAL_HOST}:{LOCAL_PORT}")
    return PgServer(url=LOCAL_URL, provider="local", stop=lambda: None)


def _start_docker() -> PgServer:
    if not docker_engine_answers():
        raise ProvisioningError("no Docker engine answers")
    from testcontainers.postgres import PostgresContainer

    container: Any = PostgresContainer(
        DOCKER_IMAGE, username="postgres", password="postgres", dbname="postgres", driver=None
    )
    container.start()
    url = str(container.get_connection_url())
    return PgServer(url=url, provider="docker", stop=container.stop)


def _start_embedded() -> PgServer:
    with warnings.catch_warnings():
        # platformdirs warns at import time when XDG_RUNTIME_DIR is unset; harmless here.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
        from pgserver.postgres_server import get_server

    workdir = Path(tempfile.mkdtemp(prefix="awa-pg-"))
    try:
        server: Any = get_server(workdir / "pgdata", cleanup_mode="delete")
        url = str(server.get_uri())
    except Exception as exc:
        shutil.rmtree(workdir, ignore_errors=True)
        raise ProvisioningError(f"embedded Postgres failed to start: {exc}") from exc

    def stop() -> None:
        try:
            server.cleanup()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    return PgServer(url=url, provider="embedded", stop=stop)


_STARTERS: dict[Provider, Callable[[], PgServer]] = {
    "env": _start_env,
    "local": _start_local,
    "docker": _start_docker,
    "embedded": _start_embedded,
}


def forced_provider(environ: Mapping[str, str] | None = None) -> Provider | None:
    """The branch named by ``AWA_TEST_PG_PROVIDER``, if any."""
    env = os.environ if environ is None else environ
    value = env.get(FORCE_VAR, "").strip()
    if not value:
        return None
    for provider in PROVIDERS:
        if provider == value:
            return provider
    raise ValueError(f"{FORCE_VAR}={value!r}; expected one of {PROVIDERS}")


def start_server(force: Provider | None = None) -> PgServer:
    """Find or start a server.

    ``force`` (or else ``AWA_TEST_PG_PROVIDER``) skips discovery and uses exactly that branch.
    """
    if force is None:
        force = forced_provider()
    if force is not None:
        if force not in _STARTERS:
            raise ValueError(f"unknown provider {force!r}; expected one of {PROVIDERS}")
        return _STARTERS[force]()
    if env_url() is not None:
        return _start_env()
    if local_server_answers():
        return _start_local()
    if docker_engine_answers():
        return _start_docker()
    return _start_embedded()


@contextmanager
def provision(force: Provider | None = None) -> Iterator[PgServer]:
    """A server for the duration of the block; started servers are stopped afterwards."""
    server = start_server(force)
    try:
        yield server
    finally:
        server.stop()


# ---------------------------------------------------------------- databases


def with_database(url: str, dbname: str) -> str:
    """``url`` pointed at another database; URLs stay URLs, key=value strings stay so."""
    if not url.startswith(("postgresql://", "postgres://")):
        return make_conninfo(url, dbname=dbname)
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "dbname"]
    return urlunsplit(
        (parts.scheme, parts.netloc, "/" + quote(dbname, safe=""), urlencode(query), "")
    )


class DatabaseFactory:
    """Creates per-test databases on one server by cloning per-session templates.

    Templates are built from ``template0`` (so objects someone left in ``template1`` on a
    shared server never leak in) and dropped by :meth:`close`.
    """

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self._session = uuid.uuid4().hex[:10]
        self._templates: dict[str, str] = {}

    def _admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.server_url, autocommit=True, connect_timeout=10)

    def template(self, key: str = "empty", setup: Callable[[str], None] | None = None) -> str:
        """Name of this session's template ``key``, built on first use by ``setup(url)``."""
        existing = self._templates.get(key)
        if existing is not None:
            return existing
        name = f"{TEMPLATE_PREFIX}{self._session}_{key}"
        with self._admin() as conn:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name))
            )
        try:
            if setup is not None:
                setup(with_database(self.server_url, name))
            # A clone fails while anyone is connected to its template.
            with self._admin() as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = %s AND pid <> pg_backend_pid()",
                    (name,),
                )
        except BaseException:
            self._drop(name)
            raise
        self._templates[key] = name
        return name

    def create(self, template: str | None = None) -> str:
        """A new database cloned from ``template`` (default: the empty one); returns its URL."""
        source = template if template is not None else self.template()
        name = f"{TEST_DB_PREFIX}{uuid.uuid4().hex[:16]}"
        with self._admin() as conn:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(source)
                )
            )
        return with_database(self.server_url, name)

    def drop(self, database_url: str) -> None:
        """Drop the database behind ``database_url``, disconnecting anyone still on it."""
        name = psycopg.conninfo.conninfo_to_dict(database_url).get("dbname")
        if not isinstance(name, str) or not name.startswith(TEST_DB_PREFIX):
            raise ValueError(f"refusing to drop a database this factory did not create: {name!r}")
        self._drop(name)

    def _drop(self, name: str) -> None:
        with self._admin() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def close(self) -> None:
        """Drop every template this factory built."""
        while self._templates:
            _, name = self._templates.popitem()
            self._drop(name)


def database_exists(server_url: str, name: str) -> bool:
    with psycopg.connect(server_url, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    return row is not None
