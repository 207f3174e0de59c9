"""No password reaches a message, whatever the connection string's shape: the CLI's
target echo and error lines, and the exceptions (with their chained causes) that
``AsyncClient(url)`` / ``Client(url)`` raise. SQLAlchemy-style URLs are accepted."""

from __future__ import annotations

import asyncio
import traceback
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from psycopg.conninfo import conninfo_to_dict

import awa
from awa.adapters._pg import conninfo
from awa.entrypoints.cli import cli

pytestmark = pytest.mark.postgres

SECRET = "S3cr3t"


def shapes(host: str, port: str, dbname: str) -> dict[str, str]:
    """One string per shape users write, each with a password. A socket directory as
    ``host`` (an embedded server's) goes in the URLs' query, where libpq reads it."""
    if host.startswith("/"):
        where = f"/{dbname}?host={quote(host, safe='')}&port={port}"
        query = f"{where}&password={SECRET}"
    else:
        where = f"{host}:{port}/{dbname}"
        query = f"{where}?password={SECRET}"
    return {
        "url": f"postgresql://postgres:{SECRET}@{where}",
        "url-query": f"postgres://postgres@{query}",
        "sqlalchemy-psycopg": f"postgresql+psycopg://postgres:{SECRET}@{where}",
        "sqlalchemy-asyncpg": f"postgresql+asyncpg://postgres:{SECRET}@{where}",
        "kv-spaced": f"host={host} port={port} dbname={dbname} user=postgres password = {SECRET}",
        "kv-quoted": f"host={host} port={port} dbname={dbname} user=postgres "
        f"password='{SECRET} pass'",
    }


MALFORMED = {
    "bad-scheme": f"postgresql+psycopg//app:{SECRET}@localhost/db",
    "unterminated": f"host=localhost password='{SECRET}",
    "bare-word": f"{SECRET}",
    "bad-query": f"postgresql://app:{SECRET}@localhost/db?nonsense=1",
}


def _clean(text: str) -> None:
    assert SECRET not in text
    assert "pass'" not in text


def _reachable(migrated_database_url: str) -> dict[str, str]:
    params = conninfo_to_dict(migrated_database_url)
    return shapes(
        str(params.get("host", "127.0.0.1")), str(params.get("port", "5432")), str(params["dbname"])
    )


def test_display_uses_the_form_given_and_drops_every_secret() -> None:
    found = {name: conninfo.display(url) for name, url in shapes("h", "5432", "db").items()}
    assert found == {
        "url": "postgresql://postgres@h:5432/db",
        "url-query": "postgres://postgres@h:5432/db",
        "sqlalchemy-psycopg": "postgresql://postgres@h:5432/db",
        "sqlalchemy-asyncpg": "postgresql://postgres@h:5432/db",
        "kv-spaced": "host=h port=5432 user=postgres dbname=db",
        "kv-quoted": "host=h port=5432 user=postgres dbname=db",
    }
    for url in MALFORMED.values():
        _clean(conninfo.display(url))


@pytest.mark.parametrize("text", [*shapes("h", "1", "d").values(), *MALFORMED.values()])
def test_scrub_removes_the_password_from_free_text(text: str) -> None:
    if text != MALFORMED["bare-word"]:
        # By shape alone (a driver message quoting a string nobody told us about).
        _clean(conninfo.scrub(f'failed near "{text}" here'))
    # Knowing the string, also by its literal secret.
    _clean(conninfo.scrub(f"prefix {text}", text))


@pytest.mark.parametrize("shape", sorted(shapes("h", "1", "d")))
def test_cli_on_a_reachable_database_echoes_no_password(
    shape: str, migrated_database_url: str
) -> None:
    url = _reachable(migrated_database_url)[shape]
    result = CliRunner().invoke(cli, ["--database-url", url, "migrate"])
    assert result.exit_code == 0, result.output
    assert "awa: database " in result.stderr
    _clean(result.output)
    listed = CliRunner().invoke(cli, ["job", "list", "--database-url", url])
    assert listed.exit_code == 0
    _clean(listed.output)


@pytest.mark.parametrize(
    "url", [*shapes("127.0.0.1", "1", "nowhere").values(), *MALFORMED.values()]
)
def test_cli_on_an_unreachable_or_malformed_target_echoes_no_password(url: str) -> None:
    for args in (["job", "list"], ["health"], ["context"], ["queue", "pause", "q"]):
        result = CliRunner().invoke(cli, ["--database-url", url, *args], env={"DATABASE_URL": None})
        assert result.exit_code != 0
        _clean(result.output)
    debug = CliRunner().invoke(cli, ["--debug", "--database-url", url, "job", "list"])
    assert debug.exception is not None
    _clean("".join(traceback.format_exception(debug.exception)))


@pytest.mark.parametrize(
    "url", [*shapes("127.0.0.1", "1", "nowhere").values(), *MALFORMED.values()]
)
def test_client_errors_carry_no_password(url: str) -> None:
    # A malformed string fails at construction, an unreachable one at the first call.
    with pytest.raises(awa.DatabaseError) as raised:
        client = awa.Client(url)
        try:
            client.list_jobs()
        finally:
            client.close()
    _clean(str(raised.value))
    _clean("".join(traceback.format_exception(raised.value)))

    async def first_call() -> None:
        async with awa.AsyncClient(url) as client:
            await client.list_jobs()

    with pytest.raises(awa.DatabaseError) as raised:
        asyncio.run(first_call())
    _clean(str(raised.value))
    _clean("".join(traceback.format_exception(raised.value)))


@pytest.mark.parametrize("shape", ["sqlalchemy-psycopg", "sqlalchemy-asyncpg"])
@pytest.mark.anyio
async def test_sqlalchemy_style_urls_are_accepted(shape: str, migrated_database_url: str) -> None:
    url = _reachable(migrated_database_url)[shape]
    async with awa.AsyncClient(url) as client:
        job = await client.insert({"n": 1}, kind="sqlalchemy_url")
        assert (await client.get_job(job.id)).kind == "sqlalchemy_url"
        assert client.database_url.startswith("postgresql://")
