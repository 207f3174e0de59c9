"""The worker module of ``benchmarks.concurrent_backlog`` (``awa worker -m``): a no-op
handler of its jobs."""

from __future__ import annotations

import awa
from benchmarks.concurrent_backlog import QUEUE, BacklogNoop


def create_client(database_url: str | None) -> awa.AsyncClient:
    client = awa.AsyncClient(database_url or "", max_connections=8)

    @client.task(BacklogNoop, queue=QUEUE)
    async def _noop(job: object) -> None:
        return None

    return client
