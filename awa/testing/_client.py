"""``AwaTestClient`` and the assertions on what was enqueued."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Unpack

from awa.entrypoints.args import kind_for_type, to_json_value
from awa.entrypoints.client_async import AsyncClient
from awa.entrypoints.insert_options import ClientInsertOptions
from awa.entrypoints.job import Job
from awa.testing._run import WorkResult, drain, registry_for, work_next

DEFAULT_DATABASE_URL = "postgres://postgres:test@localhost:5432/awa_test"


def get_database_url() -> str:
    """``DATABASE_URL`` from the environment, or the conventional local test database.

    The fixtures do not use it as a database: they create their own (see
    :mod:`awa.testing`)."""
    return os.environ.get("DATABASE_URL", DEFAULT_DATABASE_URL)


async def enqueued(
    client: AsyncClient,
    kind: str | type[Any] | None = None,
    *,
    queue: str | None = None,
    state: str | None = None,
    limit: int = 1000,
) -> list[Job[Any]]:
    """Jobs in the client's database, oldest first, optionally of one kind (a kind
    name or an args class), queue or state."""
    name = kind_for_type(kind, None) if isinstance(kind, type) else kind
    jobs = await client.list_jobs(state=state, kind=name, queue=queue, limit=limit)
    return sorted(jobs, key=lambda j: j.id)


def _matches(job: Job[Any], args: Mapping[str, Any] | None, extra: Mapping[str, Any]) -> bool:
    if args is not None:
        stored = job.record.args
        if not isinstance(stored, Mapping) or any(
            k not in stored or stored[k] != v for k, v in args.items()
        ):
            return False
    return all(getattr(job, key) == value for key, value in extra.items())


async def assert_enqueued(
    client: AsyncClient,
    kind: str | type[Any],
    *,
    args: Any = None,
    queue: str | None = None,
    state: str | None = None,
    count: int | None = None,
    **fields: Any,
) -> list[Job[Any]]:
    """Assert that jobs of ``kind`` were enqueued; returns the matching ones.

    ``args`` (a dict, or an args object compared by its JSON form) must be a subset of a
    job's arguments; ``queue`` and ``state`` filter; other keywords (``priority=1``,
    ``tags=[...]``) must equal the job's attribute. ``count`` asks for exactly that many
    matches (default: at least one). The failure message lists what was enqueued."""
    expected = None if args is None else to_json_value(args)
    jobs = await enqueued(client, kind, queue=queue, state=state)
    found = [j for j in jobs if _matches(j, expected, fields)]
    if (count is None and found) or (count is not None and len(found) == count):
        return found
    everything = await enqueued(client)
    seen = "\n".join(
        f"  #{j.id} kind={j.kind} queue={j.queue} priority={j.priority} args={j.record.args}"
        for j in everything[:50]
    )
    wanted = f"{count} job(s)" if count is not None else "a job"
    name = kind if isinstance(kind, str) else kind_for_type(kind, None)
    raise AssertionError(
        f"expected {wanted} of kind {name!r}"
        + (f" in queue {queue!r}" if queue else "")
        + (f" in state {state}" if state else "")
        + (f" with args {expected}" if expected is not None else "")
        + (f" and {fields}" if fields else "")
        + f", found {len(found)}; enqueued:\n{seen or '  (nothing)'}"
    )


async def assert_nothing_enqueued(client: AsyncClient, *, queue: str | None = None) -> None:
    """Assert that no job (in ``queue``, when given) exists."""
    jobs = await enqueued(client, queue=queue)
    if jobs:
        listed = ", ".join(f"#{j.id} {j.kind}" for j in jobs[:20])
        raise AssertionError(f"expected no jobs, found {len(jobs)}: {listed}")


class AwaTestClient:
    """A test helper around an :class:`AsyncClient` (the ``awa_client`` fixture)."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    @property
    def client(self) -> AsyncClient:
        return self._client

    async def insert(self, args: Any, **options: Unpack[ClientInsertOptions]) -> Job[Any]:
        """Insert a job (``AsyncClient.insert``)."""
        return await self._client.insert(args, **options)

    async def migrate(self) -> None:
        """Apply schema migrations."""
        await self._client.migrate()

    async def clean(self) -> None:
        """Delete every job, DLQ entry, unique claim and queue setting of the client's
        database, whichever database that is (as awa-pg's helper does: programs call it
        in their own fixtures). The storage engine is left as it is."""
        await (await self._client._engine()).reset()

    async def work_next(self, queue: str = "default", *, kind: str | None = None) -> WorkResult:
        """Run the next job of ``queue`` with the client's registered handler."""
        return await work_next(self._client, queue, kind=kind)

    async def drain(self, queue: str = "default", *, max_jobs: int = 10_000) -> list[WorkResult]:
        """Work ``queue`` until nothing is available (see :func:`awa.testing.drain`)."""
        return await drain(self._client, queue, max_jobs=max_jobs)

    async def work_one(
        self,
        args_type: type[Any],
        handler: Callable[[Job[Any]], Awaitable[Any] | Any],
        *,
        kind: str | None = None,
        queue: str = "default",
    ) -> WorkResult:
        """Claim one job of ``args_type``'s kind from ``queue`` and run ``handler`` (async
        or plain ``def``) on it with a real :class:`~awa.Job`; ``outcome="no_job"`` when
        nothing of that kind is available."""
        resolved = kind_for_type(args_type, kind)
        registry = registry_for(args_type, handler, kind=resolved, queue=queue)
        return await work_next(self._client, queue, kind=resolved, handlers=registry)

    async def enqueued(self, kind: str | type[Any] | None = None, **filters: Any) -> list[Job[Any]]:
        """See :func:`awa.testing.enqueued`."""
        return await enqueued(self._client, kind, **filters)

    async def assert_enqueued(self, kind: str | type[Any], **expected: Any) -> list[Job[Any]]:
        """See :func:`awa.testing.assert_enqueued`."""
        return await assert_enqueued(self._client, kind, **expected)
