"""Every public insert path either stores a job exactly as given or refuses it with a
named error and writes nothing.

The values are arbitrary JSON-ish data with lone surrogates, NUL bytes, non-string keys,
NaN, infinities and huge integers mixed in, fed to ``insert``, ``insert_many_copy``,
``enqueue_many_copy``, a transaction's ``insert`` / ``insert_many`` (after which the
transaction must still commit its other work) and the bridge's ``insert_job_sync``, on
both Postgres engines.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa import Client
from awa.bridge import insert_job_sync
from awa.domain.errors import ValidationError
from tests.conftest import migrate_template
from tests.support.pg import DatabaseFactory

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(600)]

# A few dozen examples per engine keep the default run short; other profiles use theirs.
_DEFAULT_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default") == "default"
_SETTINGS = settings(
    max_examples=30 if _DEFAULT_PROFILE else settings().max_examples,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    deadline=None,
)

_PIECES = st.sampled_from(["a", "é", "✓", "\x00", "\ud800", "\udfff", " ", "0"])
texts = st.one_of(
    st.text(max_size=8),
    st.lists(_PIECES, max_size=5).map("".join),
    st.text(st.characters(exclude_categories=()), max_size=4),
)
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 2**63, -(2**63), 1e308, -0.0, 5e-324]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
keys = st.one_of(texts, texts, texts, st.integers(-3, 3), st.none())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)),
    max_leaves=8,
)
args_dicts = st.dictionaries(keys, values, max_size=4)
tag_lists = st.one_of(st.none(), st.lists(texts, max_size=3), texts)
metadata_dicts = st.one_of(st.none(), st.dictionaries(keys, values, max_size=2))

PATHS = ["insert", "insert_many_copy", "enqueue_many_copy", "tx_insert", "tx_insert_many", "bridge"]


@pytest.fixture(scope="module", params=["postgres_canonical", "postgres_queue_storage"])
def client(
    request: pytest.FixtureRequest, pg_databases: DatabaseFactory
) -> Iterator[tuple[Client, str]]:
    url = pg_databases.create(pg_databases.template("migrated", migrate_template))
    try:
        with Client(url) as c:
            if request.param == "postgres_queue_storage":
                c.install_queue_storage()
            yield c, url
    finally:
        pg_databases.release(url)


_kinds = itertools.count()


def _stored(client: Client, kind: str) -> list[Any]:
    return client.list_jobs(kind=kind, limit=10)


def _insert(client: Client, url: str, path: str, kind: str, options: dict[str, Any]) -> None:
    args = options.pop("args")
    if path == "insert":
        client.insert(args, kind=kind, **options)
    elif path == "insert_many_copy":
        client.insert_many_copy([args], kind=kind, **options)
    elif path == "enqueue_many_copy":
        client.enqueue_many_copy([args], kind=kind, **options)
    elif path in ("tx_insert", "tx_insert_many"):
        refused: Exception | None = None
        with client.transaction() as tx:
            # Work done in the transaction before and after a refused insert commits.
            tx.insert({"marker": True}, kind=kind + "_marker")
            try:
                if path == "tx_insert":
                    tx.insert(args, kind=kind, **options)
                else:
                    tx.insert_many([args], kind=kind, **options)
            except Exception as exc:
                refused = exc
            tx.insert({"marker": True}, kind=kind + "_marker")
        if refused is not None:
            raise refused
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            insert_job_sync(conn, args, kind=kind, **options)


def _same_json(stored: Any, given: Any) -> bool:
    """Equal as JSON values. jsonb keeps numbers as decimals and prints a float with no
    fraction without one (``1e20`` comes back as the integer ``100000000000000000000``),
    so a float equals the number read back when that number, as a float, is it."""
    if isinstance(given, float) and not isinstance(stored, bool):
        return isinstance(stored, int | float) and float(stored) == given
    if isinstance(given, dict):
        return (
            isinstance(stored, dict)
            and stored.keys() == given.keys()
            and all(_same_json(stored[k], v) for k, v in given.items())
        )
    if isinstance(given, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(given)
            and all(_same_json(a, b) for a, b in zip(stored, given, strict=True))
        )
    return type(stored) is type(given) and stored == given


def _assert_named(exc: BaseException) -> None:
    if isinstance(exc, ValidationError):
        assert exc.field in ("args", "tags", "metadata"), exc
        return
    assert isinstance(exc, TypeError | ValueError), repr(exc)
    text = str(exc)
    assert any(name in text for name in ("args", "tags", "metadata", "NUL")), text


@_SETTINGS
@given(path=st.sampled_from(PATHS), args=args_dicts, tags=tag_lists, metadata=metadata_dicts)
def test_every_insert_path_round_trips_or_refuses_with_a_named_error(
    client: tuple[Client, str], path: str, args: dict[Any, Any], tags: Any, metadata: Any
) -> None:
    sync, url = client
    kind = f"prop_{next(_kinds)}"
    options: dict[str, Any] = {"args": args, "tags": tags, "metadata": metadata}
    try:
        _insert(sync, url, path, kind, dict(options))
    except Exception as exc:
        if isinstance(exc, ValidationError) and exc.field == "enqueue_many_copy":
            # The fast path refuses canonical storage as a whole (as awa-pg does).
            assert json.loads(sync.storage_status())["active_engine"] == "canonical"
        else:
            _assert_named(exc)
        assert _stored(sync, kind) == [], f"{path} wrote a refused job"
        if path.startswith("tx_"):
            assert len(_stored(sync, kind + "_marker")) == 2, "the transaction was lost"
        return
    (job,) = _stored(sync, kind)
    assert _same_json(job.args, args), (job.args, args)
    assert list(job.tags) == list(tags or [])
    assert _same_json(job.metadata, metadata or {}), (job.metadata, metadata)
