"""Helpers for testing code that enqueues and handles Awa jobs.

Install with ``pip install 'awa-py[testing]'``; the pytest plugin (fixtures
``awa_database_url``, ``awa_client``, ``awa_memory_client``) is then active in every
pytest run. Importing this module needs no pytest.

- :func:`work_next` / :func:`drain`: run the handlers registered on the application's
  client, with the real ``Job`` a worker passes (progress, metadata, callbacks; ``async
  def`` and plain ``def`` handlers alike), and record the outcome as a worker would;
- :func:`enqueued`, :func:`assert_enqueued`, :func:`assert_nothing_enqueued`: what was
  enqueued;
- :func:`temporary_database` / :func:`create_database`: throw-away migrated databases
  (the database named by ``DATABASE_URL`` is never touched, only its server is used);
- :func:`memory_client`: a client on the in-memory engine (no Postgres);
- :class:`AwaTestClient`: the fixture object bundling the above.

Example::

    @pytest.mark.anyio
    async def test_signup_sends_welcome(awa_database_url):
        app = create_client(awa_database_url)     # the application's own client
        await signup(app, "ada@example.com")
        await awa.testing.assert_enqueued(app, SendWelcome, args={"to": "ada@example.com"})
        (result,) = await awa.testing.drain(app, "email")
        assert result.is_completed()
"""

from __future__ import annotations

from typing import Any

# ``HandlerJob``: the 0.6.9 name of the job handlers receive; it is the real ``awa.Job``.
from awa.entrypoints.job import Job as HandlerJob
from awa.testing._client import (
    DEFAULT_DATABASE_URL,
    AwaTestClient,
    assert_enqueued,
    assert_nothing_enqueued,
    enqueued,
    get_database_url,
)
from awa.testing._database import create_database, drop_database, temporary_database
from awa.testing._memory import memory_client
from awa.testing._run import JobRow, NoJob, WorkResult, drain, work_next

__all__ = [
    "DEFAULT_DATABASE_URL",
    "AwaTestClient",
    "HandlerJob",
    "JobRow",
    "NoJob",
    "WorkResult",
    "assert_enqueued",
    "assert_nothing_enqueued",
    "create_database",
    "drain",
    "drop_database",
    "enqueued",
    "get_database_url",
    "memory_client",
    "temporary_database",
    "work_next",
]


def __getattr__(name: str) -> Any:
    # ``from awa.testing import awa_client`` (0.6.9) still works, loading pytest then.
    if name == "awa_client":
        from awa.testing.plugin import awa_client

        return awa_client
    raise AttributeError(f"module 'awa.testing' has no attribute {name!r}")
