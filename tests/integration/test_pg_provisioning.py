"""Every branch of test-database provisioning that this machine can reach, plus isolation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from awa.adapters._pg import transition as pg_transition
from awa.adapters._pg.pool import connect
from awa.domain.transition import TransitionState
from tests.conftest import migrate_template
from tests.support.engines import open_engine
from tests.support.pg import (
    LOCAL_URL,
    TEST_DB_PREFIX,
    DatabaseFactory,
    ProvisioningError,
    database_exists,
    docker_engine_answers,
    env_url,
    forced_provider,
    local_server_answers,
    provision,
    start_server,
    with_database,
)
from tests.support.roles import ROLE_PREFIX, owned_database

pytestmark = pytest.mark.postgres


def _select_one(url: str) -> int:
    with psycopg.connect(url, connect_timeout=10) as conn:
        row = conn.execute("SELECT 1").fetchone()
    assert row is not None
    return int(row[0])


def _clear_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWA_TEST_DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("AWA_TEST_PG_PROVIDER", raising=False)


# ---------------------------------------------------------------- pure helpers


def test_env_url_prefers_awa_test_database_url() -> None:
    env = {"AWA_TEST_DATABASE_URL": "postgresql://a/x", "DATABASE_URL": "postgresql://b/y"}
    assert env_url(env) == "postgresql://a/x"
    assert env_url({"DATABASE_URL": "postgresql://b/y"}) == "postgresql://b/y"
    assert env_url({"AWA_TEST_DATABASE_URL": "  ", "DATABASE_URL": "postgresql://b/y"}) == (
        "postgresql://b/y"
    )
    assert env_url({}) is None


def test_with_database_rewrites_urls_and_conninfo_strings() -> None:
    assert with_database("postgresql://u@h:5/postgres", "t1") == "postgresql://u@h:5/t1"
    assert (
        with_database("postgresql://postgres:@/postgres?host=/tmp/s", "t1")
        == "postgresql://postgres:@/t1?host=%2Ftmp%2Fs"
    )
    assert with_database("postgresql://h/x?dbname=x&sslmode=disable", "t1") == (
        "postgresql://h/t1?sslmode=disable"
    )
    conninfo = with_database("host=h dbname=postgres", "t1")
    assert psycopg.conninfo.conninfo_to_dict(conninfo) == {"host": "h", "dbname": "t1"}


def test_forced_provider_comes_from_the_environment() -> None:
    assert forced_provider({}) is None
    assert forced_provider({"AWA_TEST_PG_PROVIDER": "embedded"}) == "embedded"
    assert forced_provider({"AWA_TEST_PG_PROVIDER": " local "}) == "local"
    with pytest.raises(ValueError, match="AWA_TEST_PG_PROVIDER"):
        forced_provider({"AWA_TEST_PG_PROVIDER": "sqlite"})


def test_forced_provider_variable_overrides_discovery(
    monkeypatch: pytest.MonkeyPatch, pg_server_url: str
) -> None:
    monkeypatch.setenv("AWA_TEST_DATABASE_URL", pg_server_url)
    monkeypatch.setenv("AWA_TEST_PG_PROVIDER", "env")
    assert start_server().provider == "env"
    monkeypatch.setenv("AWA_TEST_PG_PROVIDER", "docker")
    if not docker_engine_answers():
        with pytest.raises(ProvisioningError, match="Docker"):
            start_server()


def test_unknown_forced_provider_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown provider"):
        start_server(force="nonsense")  # type: ignore[arg-type]


def test_forcing_env_without_a_variable_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear_env(monkeypatch)
    with pytest.raises(ProvisioningError, match="AWA_TEST_DATABASE_URL"):
        start_server(force="env")


def test_local_probe_says_no_for_a_closed_port() -> None:
    assert local_server_answers(port=1, timeout=0.2) is False


# ---------------------------------------------------------------- branches


def test_session_server_reports_its_provider(pg_provider: str, pg_server_url: str) -> None:
    assert pg_provider in ("env", "local", "docker", "embedded")
    assert _select_one(pg_server_url) == 1


def test_env_branch_uses_the_override(monkeypatch: pytest.MonkeyPatch, pg_server_url: str) -> None:
    _clear_env(monkeypatch)
    monkeypatch.setenv("AWA_TEST_DATABASE_URL", pg_server_url)
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/never")
    with provision() as server:
        assert server.provider == "env"
        assert server.url == pg_server_url
        assert _select_one(server.url) == 1


def test_env_branch_falls_back_to_database_url(
    monkeypatch: pytest.MonkeyPatch, pg_server_url: str
) -> None:
    _clear_env(monkeypatch)
    monkeypatch.setenv("DATABASE_URL", pg_server_url)
    with provision() as server:
        assert server.provider == "env"
        assert server.url == pg_server_url


def test_local_branch_when_a_server_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    if not local_server_answers():
        pytest.skip("no Postgres server answers on 127.0.0.1:5432")
    _clear_env(monkeypatch)
    with provision() as server:
        assert server.provider == "local"
        assert server.url == LOCAL_URL
        assert _select_one(server.url) == 1


def test_docker_branch_when_an_engine_answers() -> None:
    if not docker_engine_answers():
        pytest.skip("no Docker engine answers on this machine")
    with provision(force="docker") as server:
        assert server.provider == "docker"
        assert _select_one(server.url) == 1


def test_embedded_branch_starts_serves_and_stops() -> None:
    with provision(force="embedded") as server:
        assert server.provider == "embedded"
        assert _select_one(server.url) == 1
        host = psycopg.conninfo.conninfo_to_dict(server.url)["host"]
        assert isinstance(host, str)
        socket_dir = Path(host)
        assert socket_dir.exists()
        factory = DatabaseFactory(server.url)
        try:
            url = factory.create()
            assert _select_one(url) == 1
            factory.drop(url)
        finally:
            factory.close()
    assert not socket_dir.exists()
    with pytest.raises(psycopg.OperationalError):
        _select_one(server.url)


# ---------------------------------------------------------------- isolation


@pytest.fixture(scope="module")
def shared_table_name() -> str:
    return "isolation_probe"


def test_isolation_first_database_creates_a_table(
    database_url: str, shared_table_name: str
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {shared_table_name} (id int)")
        conn.execute(f"INSERT INTO {shared_table_name} VALUES (1)")


def test_isolation_second_database_does_not_see_it(
    database_url: str, shared_table_name: str
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass(%s)::text", (shared_table_name,)).fetchone()
    assert row == (None,)


def test_each_test_gets_a_distinct_fresh_database(
    database_url: str, pg_databases: DatabaseFactory, pg_server_url: str
) -> None:
    other = pg_databases.create()
    try:
        assert other != database_url
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("CREATE TABLE mine (id int)")
        with psycopg.connect(other, autocommit=True) as conn:
            row = conn.execute("SELECT to_regclass('mine')::text").fetchone()
            user_tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
            ).fetchone()
        assert row == (None,)
        assert user_tables == (0,)
    finally:
        pg_databases.drop(other)
    name = psycopg.conninfo.conninfo_to_dict(other)["dbname"]
    assert isinstance(name, str)
    assert not database_exists(pg_server_url, name)


def test_database_is_dropped_even_with_open_connections(
    pg_databases: DatabaseFactory, pg_server_url: str
) -> None:
    url = pg_databases.create()
    conn = psycopg.connect(url, autocommit=True)
    try:
        pg_databases.drop(url)
    finally:
        conn.close()
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    assert isinstance(name, str) and name.startswith(TEST_DB_PREFIX)
    assert not database_exists(pg_server_url, name)


def test_factory_refuses_to_drop_foreign_databases(pg_databases: DatabaseFactory) -> None:
    with pytest.raises(ValueError, match="refusing"):
        pg_databases.drop(with_database(pg_databases.server_url, "postgres"))


def test_custom_template_is_built_once_and_cloned(
    pg_databases: DatabaseFactory, pg_server_url: str
) -> None:
    calls: list[str] = []

    def setup(url: str) -> None:
        calls.append(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE seeded (v text)")
            conn.execute("INSERT INTO seeded VALUES ('from template')")

    template = pg_databases.template("seeded_probe", setup)
    assert pg_databases.template("seeded_probe", setup) == template
    assert len(calls) == 1
    first, second = pg_databases.create(template), pg_databases.create(template)
    try:
        with psycopg.connect(first, autocommit=True) as conn:
            conn.execute("INSERT INTO seeded VALUES ('only in first')")
        with psycopg.connect(second, autocommit=True) as conn:
            rows = conn.execute("SELECT v FROM seeded").fetchall()
        assert rows == [("from template",)]
    finally:
        pg_databases.drop(first)
        pg_databases.drop(second)


def test_factory_close_drops_its_templates(pg_server_url: str) -> None:
    factory = DatabaseFactory(pg_server_url)
    template = factory.template()
    assert database_exists(pg_server_url, template)
    factory.close()
    assert not database_exists(pg_server_url, template)


def _name(url: str) -> str:
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    assert isinstance(name, str)
    return name


def test_a_released_database_is_disconnected_at_once_and_dropped_by_close(
    pg_server_url: str,
) -> None:
    factory = DatabaseFactory(pg_server_url)
    try:
        released = [factory.create() for _ in range(3)]
        conn = psycopg.connect(released[0], autocommit=True)
        try:
            for url in released:
                factory.release(url)
            # a client a test left running stops at release, as a drop would stop it
            with pytest.raises(psycopg.OperationalError):
                conn.execute("SELECT 1")
        finally:
            conn.close()
        with pytest.raises(ValueError, match="refusing"):
            factory.release(with_database(pg_server_url, "postgres"))
    finally:
        factory.close()
    assert [database_exists(pg_server_url, _name(url)) for url in released] == [False] * 3


def test_the_next_clone_is_made_ahead_and_close_drops_it(pg_server_url: str) -> None:
    factory = DatabaseFactory(pg_server_url)
    try:
        template = factory.template()
        first = factory.create(template)
        ahead = _name(with_database(pg_server_url, factory._spares[template].result()))
        assert database_exists(pg_server_url, ahead)
        second = factory.create(template)
        assert _name(second) == ahead and second != first
        made_ahead_again = factory._spares[template].result()
        factory.release(first)
        factory.drop(second)
    finally:
        factory.close()
    assert not database_exists(pg_server_url, made_ahead_again)
    assert not database_exists(pg_server_url, _name(first))


def _role_exists(server_url: str, role: str) -> bool:
    with psycopg.connect(server_url, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    return row is not None


def test_an_owned_database_and_its_role_are_released_to_the_factory(pg_server_url: str) -> None:
    factory = DatabaseFactory(pg_server_url)
    try:
        with owned_database(factory) as url:
            parts = psycopg.conninfo.conninfo_to_dict(url)
            role, name = str(parts["user"]), str(parts["dbname"])
            assert role.startswith(ROLE_PREFIX) and _role_exists(pg_server_url, role)
            conn = psycopg.connect(url, autocommit=True)
            conn.execute("CREATE TABLE owned_by_the_role (x int)")
        try:
            # disconnected at release, as the drop would; dropped in the background
            with pytest.raises(psycopg.OperationalError):
                conn.execute("SELECT 1")
        finally:
            conn.close()
        other = factory.create()
        with pytest.raises(ValueError, match="refusing to drop a role"):
            factory.release(other, roles=["postgres"])
        factory.release(other)
    finally:
        factory.close()
    assert not database_exists(pg_server_url, name)
    assert not _role_exists(pg_server_url, role)


def test_close_without_waiting_hands_every_drop_to_a_detached_process(
    pg_server_url: str,
) -> None:
    factory = DatabaseFactory(pg_server_url)
    template = factory.template()
    kept = factory.create(template)
    with owned_database(factory) as owned:
        role = str(psycopg.conninfo.conninfo_to_dict(owned)["user"])
    released = factory.create(template)
    factory.release(released)
    spare = factory._spares[template].result()
    factory.release(kept)
    factory.close(wait=False)
    handed_off = factory._handed_off
    assert handed_off is not None
    assert handed_off.wait(timeout=120) == 0
    for name in [template, spare, _name(kept), _name(released), _name(owned)]:
        assert not database_exists(pg_server_url, name), name
    assert not _role_exists(pg_server_url, role)


# ---------------------------------------------------------------- reuse of released clones


def _seed_reuse_probe(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE seeded (id serial PRIMARY KEY, v text)")
        conn.execute("INSERT INTO seeded (v) VALUES ('from template')")
        conn.execute("CREATE TABLE parent (id int PRIMARY KEY)")
        conn.execute("CREATE TABLE child (id int REFERENCES parent)")
        conn.execute("CREATE TABLE noted (v text)")
        conn.execute(
            "CREATE FUNCTION note() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN INSERT INTO noted VALUES (NEW.v); RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER noting AFTER INSERT ON seeded FOR EACH ROW EXECUTE FUNCTION note()"
        )
        conn.execute("TRUNCATE noted")


def _reuse_probe(factory: DatabaseFactory) -> str:
    return factory.template("reuse_probe", _seed_reuse_probe)


def test_a_released_clone_is_put_back_to_its_template_and_handed_out_again(
    pg_databases: DatabaseFactory,
) -> None:
    template = _reuse_probe(pg_databases)
    url = pg_databases.create(template)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO seeded (v) VALUES ('by the test')")
        conn.execute("UPDATE seeded SET v = 'changed' WHERE id = 1")
        conn.execute("INSERT INTO parent VALUES (1)")
        conn.execute("INSERT INTO child VALUES (1)")
        conn.execute("SELECT nextval('seeded_id_seq')")
    left_open = psycopg.connect(url, autocommit=True)
    try:
        pg_databases.release(url)
        again = pg_databases.create(template)
    finally:
        left_open.close()
    try:
        assert _name(again) == _name(url)
        with psycopg.connect(again, autocommit=True) as conn:
            assert conn.execute("SELECT id, v FROM seeded").fetchall() == [(1, "from template")]
            assert conn.execute("SELECT count(*) FROM parent").fetchone() == (0,)
            assert conn.execute("SELECT count(*) FROM child").fetchone() == (0,)
            # the template's rows went back without firing its triggers
            assert conn.execute("SELECT count(*) FROM noted").fetchone() == (0,)
            assert conn.execute("SELECT nextval('seeded_id_seq')").fetchone() == (2,)
            assert conn.execute(
                "SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'seeded'"
            ).fetchone() in (None, (0,))
    finally:
        pg_databases.drop(again)


def test_a_reused_clone_has_no_statistics_of_what_the_last_test_wrote(
    pg_databases: DatabaseFactory,
) -> None:
    template = _reuse_probe(pg_databases)
    url = pg_databases.create(template)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO parent SELECT generate_series(1, 500)")
        conn.execute("ANALYZE parent")
        assert conn.execute(
            "SELECT count(*) FROM pg_stats WHERE tablename = 'parent'"
        ).fetchone() == (1,)
    pg_databases.release(url)
    again = pg_databases.create(template)
    try:
        assert _name(again) == _name(url)
        with psycopg.connect(again, autocommit=True) as conn:
            stats = conn.execute("SELECT count(*) FROM pg_stats WHERE tablename = 'parent'")
            assert stats.fetchone() == (0,)
    finally:
        pg_databases.drop(again)


def test_a_referenced_table_written_alone_is_emptied_with_its_referencing_tables(
    pg_databases: DatabaseFactory,
) -> None:
    template = _reuse_probe(pg_databases)
    url = pg_databases.create(template)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO parent VALUES (1)")
    pg_databases.release(url)
    again = pg_databases.create(template)
    try:
        assert _name(again) == _name(url)
        with psycopg.connect(again, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM parent").fetchone() == (0,)
    finally:
        pg_databases.drop(again)


#: Changes beyond rows and sequence values: a clone that had one is never handed out again.
SCHEMA_CHANGES = {
    "new table": "CREATE TABLE public.extra (id int)",
    "new schema": "CREATE SCHEMA extra",
    "dropped table": "DROP TABLE noted",
    "new column": "ALTER TABLE seeded ADD COLUMN w int",
    "column default": "ALTER TABLE seeded ALTER COLUMN v SET DEFAULT 'x'",
    "new index": "CREATE INDEX ON seeded (v)",
    "disabled trigger": "ALTER TABLE seeded DISABLE TRIGGER noting",
    "function body": "CREATE OR REPLACE FUNCTION note() RETURNS trigger LANGUAGE plpgsql"
    " AS $$ BEGIN RETURN NEW; END $$",
    "table privilege": "GRANT SELECT ON seeded TO PUBLIC",
    "system function privilege": "REVOKE EXECUTE ON FUNCTION pg_sleep(float8) FROM PUBLIC",
    "schema privilege": "REVOKE CREATE ON SCHEMA public FROM pg_database_owner",
    "database setting": "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET work_mem = ''7MB''',"
    " current_database()); END $$",
    "comment": "COMMENT ON TABLE seeded IS 'changed'",
    "sequence option": "ALTER SEQUENCE seeded_id_seq INCREMENT BY 5",
    "large object": "SELECT lo_create(0)",
    "storage option": "ALTER TABLE seeded SET (fillfactor = 50)",
}


@pytest.mark.parametrize("change", sorted(SCHEMA_CHANGES))
def test_a_clone_whose_schema_a_test_changed_is_not_handed_out_again(
    pg_databases: DatabaseFactory, change: str
) -> None:
    template = _reuse_probe(pg_databases)
    url = pg_databases.create(template)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SCHEMA_CHANGES[change])
    pg_databases.release(url)
    other = pg_databases.create(template)
    try:
        assert _name(other) != _name(url)
        with psycopg.connect(other, autocommit=True) as conn:
            assert conn.execute("SELECT to_regclass('public.extra')").fetchone() == (None,)
    finally:
        pg_databases.drop(other)


def test_without_reuse_a_released_clone_is_dropped(pg_server_url: str) -> None:
    factory = DatabaseFactory(pg_server_url, reuse=False)
    try:
        template = factory.template()
        first = factory.create(template)
        factory.release(first)
        second = factory.create(template)
        assert _name(second) != _name(first)
        factory.release(second)
    finally:
        factory.close()
    assert not database_exists(pg_server_url, _name(first))


async def _routing_mixed_state(url: str) -> TransitionState:
    """The transition state of the database at ``url`` once a routing_mixed engine opened."""
    async with open_engine("routing_mixed", url):
        conn = await connect(url)
        try:
            return (await pg_transition.read_status(conn)).state
        finally:
            await conn.close()


def test_a_reused_database_is_prepared_again_by_the_next_engine_opened_on_it(
    pg_databases: DatabaseFactory,
) -> None:
    """What an engine did once to a database (here: taking it to mixed_transition) is
    forgotten when the database is released: put back to its migrated template, it comes
    back canonical under the same name, and the next engine on it prepares it again."""
    template = pg_databases.template("migrated", migrate_template)
    url = pg_databases.create(template)
    assert asyncio.run(_routing_mixed_state(url)) is TransitionState.MIXED_TRANSITION
    pg_databases.release(url)
    again = pg_databases.create(template)
    try:
        assert _name(again) == _name(url)
        assert asyncio.run(_routing_mixed_state(again)) is TransitionState.MIXED_TRANSITION
    finally:
        pg_databases.release(again)
