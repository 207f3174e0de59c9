"""Property-based API test: schemathesis generates requests from ``/api/openapi.json`` and
checks that nothing answers 5xx and that every response matches the document."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from awa.entrypoints.web.app import create_app
from awa.entrypoints.web.config import ServerConfig
from tests.conftest import migrate_template
from tests.integration.web.conftest import seed
from tests.support.pg import DatabaseFactory

pytestmark = pytest.mark.postgres

EXAMPLES = 8
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def api_schema(pg_databases: DatabaseFactory) -> Iterator[Any]:
    url = pg_databases.create(pg_databases.template("migrated", migrate_template))
    seed(url)
    # Schemathesis calls the app as Host "testserver".
    app = create_app(ServerConfig(database_url=url, cache_ttl=0.0, allowed_hosts=("testserver",)))
    try:
        yield schemathesis.openapi.from_asgi("/api/openapi.json", app)
    finally:
        asgi.shutdown_lifespans()
        pg_databases.release(url)


# Driven by hand over every operation (rather than through the pytest plugin's lazy
# fixture mode) so it runs on any pytest version the project supports.
def test_every_endpoint_conforms(api_schema: Any) -> None:
    failures: list[str] = []
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) > 30

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            derandomize=True,
        )
        def check(case: Any) -> None:
            case.call_and_validate(checks=CHECKS)

        try:
            check()
        except Exception as exc:
            failures.append(f"{operation.label}: {exc}")
    assert not failures, "\n\n".join(failures)
