"""Postgres for the test suite: find or start a server, then hand out isolated databases.

Server discovery (:func:`provision`), first match wins:

1. ``env``: ``AWA_TEST_DATABASE_URL``, then ``DATABASE_URL``, used as given.
2. ``local``: a server answering on ``127.0.0.1:5432`` as user ``postgres``.
3. ``docker``: a ``testcontainers`` Postgres container, when a Docker engine answers.
4. ``embedded``: a throw-away server from the ``pgserver`` wheel in a temp directory.

``AWA_TEST_PG_PROVIDER`` (one of the four names) skips discovery and forces that branch,
e.g. ``AWA_TEST_PG_PROVIDER=embedded`` reproduces a machine without any Postgres.

Isolation (:class:`DatabaseFactory`): every test gets its own database, cloned with
``CREATE DATABASE ... TEMPLATE`` from a per-session template built from ``template0``, or
a released one put back to its template's image (``tests/support/db_image.py``).
See ``ADRs/0003-test-database-provisioning.md``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import attrs
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.support import db_image

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
#: Connections :meth:`DatabaseFactory.close` drops the rest with, at once.
CLOSE_DROP_CONNECTIONS = 8
#: Where :meth:`DatabaseFactory.close` tells the process it hands its drops to the server.
DROP_URL_VAR = "AWA_TEST_DROP_SERVER_URL"
ROOT = Path(__file__).resolve().parents[2]


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


#: Called with the name of each database a factory releases or drops, before the factory
#: puts it back to its template or drops it: whatever a process remembers having done to
#: that database (``tests.support.engines.prepare_once``) stops holding, since a released
#: database comes back under the same name as a fresh clone.
_ON_RELEASE: list[Callable[[str], None]] = []


def on_release(forget: Callable[[str], None]) -> None:
    """Call ``forget(name)`` whenever a factory releases or drops the database ``name``."""
    if forget not in _ON_RELEASE:
        _ON_RELEASE.append(forget)


class DatabaseFactory:
    """Creates per-test databases on one server by cloning per-session templates.

    Templates are built from ``template0`` (so objects someone left in ``template1`` on a
    shared server never leak in) and dropped by :meth:`close`.

    Two costs are kept off a test's own time (ADR 0003):

    - ``DROP DATABASE`` forces a checkpoint and waits for it: 0.2 s on a quiet server, tens
      of seconds while other runs write. :meth:`release` closes the database's
      connections at once and leaves the drop to a background thread, which drops every
      database released meanwhile at the same time, so one checkpoint serves all of them.
    - Cloning writes the whole template through the WAL (16 MB migrated). Each
      :meth:`create` from a template starts the next clone of it in the background, which
      the next :meth:`create` from that template takes.

    Most of both is not paid at all (``reuse``, the default): a released clone is put
    back to its template's image in the background (:mod:`tests.support.db_image`) and
    handed to the next :meth:`create` of that template; only a clone whose schema,
    privileges or settings a test changed is dropped.
    """

    def __init__(self, server_url: str, *, drop_connections: int = 4, reuse: bool = True) -> None:
        self.server_url = server_url
        self._session = uuid.uuid4().hex[:10]
        self._templates: dict[str, str] = {}
        self._drop_connections = drop_connections
        self._lock = threading.Lock()
        self._released: list[str] = []
        self._released_roles: list[str] = []
        #: The dropper's current batch (databases, roles) until it is dropped.
        self._in_flight: tuple[list[str], list[str]] = ([], [])
        self._wake = threading.Condition(self._lock)
        self._closing = False
        self._dropper: threading.Thread | None = None
        self._drop_errors: list[BaseException] = []
        self._cloner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="awa-test-clone")
        #: Templates being built in the background (:meth:`template_soon`).
        self._builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="awa-test-template")
        self._building: dict[str, Future[str]] = {}
        self._spares: dict[str, Future[str]] = {}
        #: The process :meth:`close` handed the last drops to, if it did not wait.
        self._handed_off: subprocess.Popen[bytes] | None = None
        self._reuse = reuse
        #: Each template's image (None: its clones cannot be put back), when reusing.
        self._images: dict[str, db_image.TemplateImage | None] = {}
        #: The template each database handed out was cloned from.
        self._origin: dict[str, str] = {}
        self._resetter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="awa-test-reset")
        #: Per template, released clones being put back: each gives its name, or None
        #: when it could not be put back (and went to the dropper instead).
        self._returned: dict[str, deque[Future[str | None]]] = {}

    def _admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.server_url, autocommit=True, connect_timeout=10)

    def template(self, key: str = "empty", setup: Callable[[str], None] | None = None) -> str:
        """Name of this session's template ``key``, built on first use by ``setup(url)``
        (or taken from its build in the background, :meth:`template_soon`)."""
        existing = self._templates.get(key)
        if existing is not None:
            return existing
        with self._lock:
            pending = self._building.pop(key, None)
        if pending is not None:
            try:
                return pending.result()
            except Exception:
                pass  # built again here, which reports why it fails
        return self._build_template(key, setup)

    def template_soon(self, key: str, setup: Callable[[str], None] | None = None) -> None:
        """Start building template ``key`` on a thread of its own, for a test later in
        the session: a template whose setup takes seconds (another program's migrations)
        is then not built on a test's time. The build waits for nothing the tests use."""
        with self._lock:
            if key in self._templates or key in self._building:
                return
            self._building[key] = self._builder.submit(self._build_template, key, setup)

    def _build_template(self, key: str, setup: Callable[[str], None] | None) -> str:
        name = f"{TEMPLATE_PREFIX}{self._session}_{key}"
        with self._admin() as conn:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name))
            )
        try:
            if setup is not None:
                setup(with_database(self.server_url, name))
            if self._reuse:
                with psycopg.connect(with_database(self.server_url, name)) as conn:
                    self._images[name] = db_image.capture(conn)
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
        name = self._take_returned(source)
        if name is None:
            spare = self._spares.pop(source, None)
            if spare is not None:
                try:
                    name = spare.result()
                except Exception:
                    name = None  # the background clone failed: clone here, which reports why
            if name is None:
                name = self._clone(source)
            self._spares[source] = self._cloner.submit(self._clone, source)
        self._origin[name] = source
        return with_database(self.server_url, name)

    def _take_returned(self, source: str) -> str | None:
        """A released clone of ``source`` put back to its image, waiting for one being
        put back (a few hundredths of a second) rather than cloning anew."""
        while True:
            with self._lock:
                queue = self._returned.get(source)
                if not queue:
                    return None
                future = queue.popleft()
            name = future.result()
            if name is not None:
                return name

    def _clone(self, source: str) -> str:
        name = f"{TEST_DB_PREFIX}{uuid.uuid4().hex[:16]}"
        with self._admin() as conn:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(source)
                )
            )
        return name

    def drop(self, database_url: str) -> None:
        """Drop the database behind ``database_url`` now, disconnecting anyone still on it."""
        name = self._own(database_url)
        self._forget(name)
        self._origin.pop(name, None)
        self._drop(name)

    def release(self, database_url: str, *, roles: Sequence[str] = ()) -> None:
        """Done with the database behind ``database_url``: disconnect anyone still on it
        now (a client a test left running stops here, as a drop would stop it), then, in
        the background, put it back to its template's image for the next :meth:`create`
        (when reusing) or else drop it soon, together with the others released meanwhile.

        ``roles`` (named with :data:`TEST_DB_PREFIX`, e.g. the owner of a least-privilege
        database) are dropped in the background too, after the databases of their batch:
        a role that owns a database cannot go before it."""
        name = self._own(database_url)
        for role in roles:
            if not role.startswith(TEST_DB_PREFIX):
                raise ValueError(f"refusing to drop a role this suite did not create: {role!r}")
        self._forget(name)
        with self._admin() as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
        source = self._origin.pop(name, None)
        image = self._images.get(source) if source is not None else None
        if source is not None and image is not None and not roles:
            future = self._resetter.submit(self._put_back, name, image)
            with self._lock:
                self._returned.setdefault(source, deque()).append(future)
            return
        self._queue_drop(name, roles)

    def _put_back(self, name: str, image: db_image.TemplateImage) -> str | None:
        try:
            self._await_disconnected(name)
            with psycopg.connect(with_database(self.server_url, name), connect_timeout=10) as conn:
                if db_image.restore(conn, image):
                    return name
        except psycopg.Error:
            pass  # whatever a test left that stops the reset, the drop removes
        except BaseException:
            self._queue_drop(name, ())
            raise  # a fault of the reset itself: the next create() reports it
        self._queue_drop(name, ())
        return None

    def _await_disconnected(self, name: str, timeout: float = 10.0) -> None:
        """Until the sessions :meth:`release` terminated have exited (an exiting session
        still drops its temporary tables)."""
        deadline = time.monotonic() + timeout
        with self._admin() as conn:
            while conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
                " AND backend_type = 'client backend'",
                (name,),
            ).fetchone():
                if time.monotonic() > deadline:
                    raise psycopg.OperationalError(f"sessions on {name} did not exit")
                time.sleep(0.01)

    def _queue_drop(self, name: str, roles: Sequence[str]) -> None:
        with self._wake:
            self._released.append(name)
            self._released_roles.extend(roles)
            if self._dropper is None:
                self._dropper = threading.Thread(
                    target=self._drop_released, name="awa-test-drop", daemon=True
                )
                self._dropper.start()
            self._wake.notify()

    @staticmethod
    def _forget(name: str) -> None:
        for forget in _ON_RELEASE:
            forget(name)

    def _own(self, database_url: str) -> str:
        name = psycopg.conninfo.conninfo_to_dict(database_url).get("dbname")
        if not isinstance(name, str) or not name.startswith(TEST_DB_PREFIX):
            raise ValueError(f"refusing to drop a database this factory did not create: {name!r}")
        return name

    def _drop_released(self) -> None:
        while True:
            with self._wake:
                while not self._released and not self._closing:
                    self._wake.wait()
                batch, self._released = self._released, []
                roles, self._released_roles = self._released_roles, []
                if not batch and self._closing:
                    return
                self._in_flight = (batch, roles)
            try:
                self._drop_all(batch)
                self._drop_roles(roles)
            except BaseException as exc:  # reported by close(); the thread keeps going
                self._drop_errors.append(exc)
            finally:
                with self._wake:
                    self._in_flight = ([], [])

    def _drop_all(self, names: list[str], connections: int | None = None) -> None:
        # Each DROP DATABASE waits for a checkpoint that starts after it asked; the ones
        # waiting together share it.
        limit = self._drop_connections if connections is None else connections
        with ThreadPoolExecutor(max_workers=max(1, min(len(names), limit))) as pool:
            for result in [pool.submit(self._drop, name) for name in names]:
                result.result()

    def _drop(self, name: str) -> None:
        with self._admin() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def _drop_roles(self, roles: list[str]) -> None:
        if not roles:
            return
        with self._admin() as conn:
            for role in roles:
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))

    def close(self, *, wait: bool = True) -> None:
        """Drop every database released and not yet dropped, the spare clones and every
        template this factory built, all at once (they share one checkpoint); raise the
        first error a background drop met.

        ``wait=False`` (the session's own factory) does not wait for the drops: it hands
        whatever is not dropped yet, the dropper's current batch included, to a detached
        process (:func:`main`) and returns. A ``DROP DATABASE`` waits for a checkpoint,
        which on a busy shared server takes minutes; no test needs to see these go."""
        # A template still being built is waited for, so close drops it with the others.
        self._builder.shutdown(wait=True)
        # The clones being put back finish first: one that cannot be goes to the dropper.
        self._resetter.shutdown(wait=True)
        with self._lock:
            returned = [f for queue in self._returned.values() for f in queue]
            self._returned.clear()
        spares = list(self._spares.values())
        self._spares.clear()
        self._cloner.shutdown(wait=True)
        with self._wake:
            self._closing = True
            leftovers, self._released = self._released, []
            roles, self._released_roles = self._released_roles, []
            if not wait:
                leftovers += self._in_flight[0]
                roles += self._in_flight[1]
            self._wake.notify()
            dropper = self._dropper
        leftovers += [f.result() for f in spares if f.exception() is None]
        leftovers += [name for f in returned if (name := f.result()) is not None]
        templates = list(self._templates.values())
        self._templates.clear()
        if not wait:
            self._hand_off(leftovers + templates, roles)
        else:
            try:
                # No clone is being made any more (the cloner is shut down), so the
                # templates go in the same batch as the databases: the drops wait on one
                # checkpoint.
                if leftovers or templates:
                    self._drop_all(leftovers + templates, connections=CLOSE_DROP_CONNECTIONS)
            finally:
                if dropper is not None:
                    dropper.join()
            # After the dropper: a role released with a database it is still dropping
            # waits for that drop.
            self._drop_roles(roles)
        if self._drop_errors:
            raise self._drop_errors[0]

    def _hand_off(self, names: list[str], roles: list[str]) -> subprocess.Popen[bytes] | None:
        if not names and not roles:
            return None
        # The server URL goes through the environment: it may carry a password.
        env = {**os.environ, DROP_URL_VAR: self.server_url}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self._handed_off = subprocess.Popen(
            [sys.executable, "-m", "tests.support.pg", *names, *(f"--role={r}" for r in roles)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # outlives this process and its process group
        )
        return self._handed_off


def main(argv: Sequence[str]) -> None:
    """``python -m tests.support.pg NAME... --role=ROLE...``: drop the databases, all at
    once, then the roles, on the server named by ``AWA_TEST_DROP_SERVER_URL``; what
    :meth:`DatabaseFactory.close` hands off when it does not wait."""
    names = [arg for arg in argv if not arg.startswith("--role=")]
    roles = [arg.removeprefix("--role=") for arg in argv if arg.startswith("--role=")]
    factory = DatabaseFactory(os.environ[DROP_URL_VAR])
    try:
        for name in [*names, *roles]:
            if not name.startswith(TEST_DB_PREFIX) and not name.startswith(TEMPLATE_PREFIX):
                raise SystemExit(f"refusing to drop {name!r}: not made by the test suite")
        if names:
            factory._drop_all(names, connections=len(names))
        factory._drop_roles(roles)
    finally:
        factory._cloner.shutdown()
        factory._resetter.shutdown()


def database_exists(server_url: str, name: str) -> bool:
    with psycopg.connect(server_url, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    return row is not None


if __name__ == "__main__":
    main(sys.argv[1:])
