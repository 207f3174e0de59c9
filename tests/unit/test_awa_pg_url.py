"""URLs handed to awa-pg 0.6.9 (tests/differential/run.py): its parser refuses libpq's
socket form (a user before an empty host, the directory in ``?host=``), so the directory
goes into the host, percent-encoded; libpq reads both forms as the same server."""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict

from tests.differential.run import awa_pg_url

SOCKET_URL = "postgresql://postgres:@/awa_tpl?host=%2Ftmp%2Fawa-pg-x%2Fpgdata"


def test_a_socket_url_puts_the_directory_in_the_host() -> None:
    assert awa_pg_url(SOCKET_URL) == "postgresql://postgres@%2Ftmp%2Fawa-pg-x%2Fpgdata/awa_tpl"


def test_libpq_reads_the_rewritten_url_as_the_same_connection() -> None:
    assert conninfo_to_dict(awa_pg_url(SOCKET_URL)) == {
        "user": "postgres",
        "host": "/tmp/awa-pg-x/pgdata",
        "dbname": "awa_tpl",
    }


def test_a_tcp_url_keeps_its_parts_and_options() -> None:
    url = "postgresql://app:s%40cret@db.example.com:6432/jobs?sslmode=require"
    assert awa_pg_url(url) == url


def test_a_keyword_string_and_a_database_override_become_a_url() -> None:
    url = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
    assert awa_pg_url(url, dbname="awa_diff_1") == (
        "postgresql://postgres@127.0.0.1:5432/awa_diff_1"
    )
