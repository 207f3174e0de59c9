"""Shared fixtures.

``pg_server_url``: a Postgres server for the whole session (see ``tests/support/pg.py``
for how it is found or started); ``pg_provider`` says which branch provided it.
``pg_databases``: the session's :class:`~tests.support.pg.DatabaseFactory`.
``database_url``: a fresh, empty database on that server for one test, dropped after it.
``migrated_database_url``: the same, cloned from a template with every migration applied.
``anyio_backend``: async tests run on asyncio (use ``@pytest.mark.anyio``).

Hypothesis profiles: ``default``, ``ci`` and ``deep``, chosen with ``HYPOTHESIS_PROFILE``.
Under ``deep`` no test has a time limit: one model-vs-real run alone takes 4-15 minutes.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from awa.adapters._pg.migrations import migrate
from tests.differential import run as differential
from tests.support import django_venv
from tests.support.pg import DatabaseFactory, PgServer, Provider, provision
from tests.support.pgbouncer import PgBouncer, pgbouncer_path
from tests.support.workers import auto_workers

# A hung test fails with its stacks, async ones included (pytest-timeout's ``thread`` method).
pytest_plugins = ["tests.support.timeouts"]

settings.register_profile("default", deadline=None, max_examples=100)
settings.register_profile(
    "ci",
    deadline=None,
    max_examples=200,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "deep",
    deadline=None,
    max_examples=5000,
    stateful_step_count=100,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The Django tests' second virtualenv builds while the tests before them run.
    if any(item.path.name == "test_django_tasks.py" for item in items):
        django_venv.build_in_background()
    # The per-test limit of pyproject.toml is sized for the default profile.
    if os.environ.get("HYPOTHESIS_PROFILE") == "deep":
        for item in items:
            item.add_marker(pytest.mark.timeout(0))


@pytest.fixture(autouse=True)
def _no_user_cli_contexts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep the developer's own ``~/.config/awa/config.toml`` and ``AWA_CONTEXT`` out of
    every test (a test that wants contexts writes its own file)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
        patch.delenv("AWA_CONFIG", raising=False)
        patch.delenv("AWA_CONTEXT", raising=False)
        yield


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


_PG_SERVER_KEY = pytest.StashKey[PgServer]()


@pytest.fixture(scope="session")
def pg_server(request: pytest.FixtureRequest) -> Iterator[PgServer]:
    with provision() as server:
        request.config.stash[_PG_SERVER_KEY] = server
        yield server


_WORKER_PROVIDERS_KEY = pytest.StashKey[set[str]]()
_AUTO_WORKERS_KEY = pytest.StashKey[tuple[int, int | None]]()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (what ``scripts/test`` passes): see ``tests/support/workers.py``."""
    chosen = auto_workers()
    config.stash[_AUTO_WORKERS_KEY] = chosen
    return chosen[0]


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Under pytest-xdist each worker process provisions its own server: it reports which
    # branch it used to the controlling process, which prints the summary line.
    output: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    server = session.config.stash.get(_PG_SERVER_KEY, None)
    if output is not None and server is not None:
        output["awa_pg_provider"] = server.provider


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    provider = getattr(node, "workeroutput", {}).get("awa_pg_provider")
    if provider:
        node.config.stash.setdefault(_WORKER_PROVIDERS_KEY, set()).add(provider)


def _utf8_safe(text: str) -> str:
    """``text`` with each lone surrogate written as its escape (``\\ud800``)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    # A pytest-xdist worker sends each report to the controlling process as UTF-8. Some
    # tests log text holding a lone surrogate on purpose (bad input a handler raised); in
    # a failure's report it would stop the whole run with an encoding error instead of
    # showing the failure. Escape it in the worker processes.
    outcome: Any = yield
    if not hasattr(item.config, "workerinput"):
        return
    report: pytest.TestReport = outcome.get_result()
    report.sections = [(title, _utf8_safe(text)) for title, text in report.sections]
    if report.longrepr is not None:
        text = str(report.longrepr)
        safe = _utf8_safe(text)
        if safe != text:
            report.longrepr = safe


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    stash = terminalreporter.config.stash
    server = stash.get(_PG_SERVER_KEY, None)
    reported: set[str] = stash.get(_WORKER_PROVIDERS_KEY, set())
    providers = set(reported)
    if server is not None:
        providers.add(server.provider)
    if providers:
        terminalreporter.write_line(f"postgres for tests: {', '.join(sorted(providers))}")
    auto = stash.get(_AUTO_WORKERS_KEY, None)
    if auto is not None:
        workers, limit = auto
        within = "" if limit is None else f" (server max_connections {limit})"
        terminalreporter.write_line(f"-n auto: {workers} workers{within}")


@pytest.fixture(scope="session")
def pg_server_url(pg_server: PgServer) -> str:
    return pg_server.url


@pytest.fixture(scope="session")
def pg_provider(pg_server: PgServer) -> Provider:
    return pg_server.provider


#: Templates whose setup takes seconds, built in the background from the session's start
#: when a test of the session uses the fixture named: (fixture, template key, setup).
SLOW_TEMPLATES: list[tuple[str, str, Callable[[str], None]]] = [
    ("awa_pg_database_url", differential.AWA_PG_TEMPLATE, differential.migrate_with_awa_pg),
]


@pytest.fixture(scope="session")
def pg_databases(pg_server: PgServer, request: pytest.FixtureRequest) -> Iterator[DatabaseFactory]:
    factory = DatabaseFactory(pg_server.url)
    items = request.session.items
    for fixture, key, setup in SLOW_TEMPLATES:
        if any(fixture in getattr(item, "fixturenames", ()) for item in items):
            factory.template_soon(key, setup)
    try:
        yield factory
    finally:
        # The drops left at the session's end go on in a detached process: on a busy
        # server they wait minutes for checkpoints, which no test needs to see.
        factory.close(wait=False)


@pytest.fixture
def database_url(pg_databases: DatabaseFactory) -> Iterator[str]:
    url = pg_databases.create()
    try:
        yield url
    finally:
        pg_databases.release(url)


def migrate_template(url: str) -> None:
    # May be built from inside a running event loop (async fixtures), so migrate on a thread.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(lambda: asyncio.run(migrate(url))).result()


@pytest.fixture
def migrated_database_url(pg_databases: DatabaseFactory) -> Iterator[str]:
    url = pg_databases.create(pg_databases.template("migrated", migrate_template))
    try:
        yield url
    finally:
        pg_databases.release(url)


@pytest.fixture(scope="session")
def pgbouncer(pg_server: PgServer) -> Iterator[PgBouncer]:
    """A real PgBouncer in transaction mode in front of the session's server (see
    ``tests/support/pgbouncer.py``); skipped when pgbouncer is not installed
    (``scripts/test`` installs Debian's package when it runs as root)."""
    executable = pgbouncer_path()
    if executable is None:
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer, or set AWA_PGBOUNCER)")
    bouncer = PgBouncer(executable, pg_server.url)
    try:
        bouncer.start()
        yield bouncer
    finally:
        bouncer.close()


@pytest.fixture
def pgbouncer_running(pgbouncer: PgBouncer) -> Iterator[PgBouncer]:
    """:func:`pgbouncer`, running when the test starts and again after it (a test may
    stop or restart it)."""
    pgbouncer.start()
    yield pgbouncer
    pgbouncer.start()
