"""The worker module ``benchmarks.leader_failover`` runs (``awa worker --module``): one
no-op handler on queue ``ticks`` and ``start()`` keywords from ``AWA_BENCH_START`` (JSON)."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from awa import AsyncClient, Job

start_options: dict[str, Any] = json.loads(os.environ.get("AWA_BENCH_START") or "{}")


@dataclasses.dataclass
class Tick:
    n: int


def create_client(database_url: str | None) -> AsyncClient:
    if database_url is None:
        raise RuntimeError("DATABASE_URL is required")
    client = AsyncClient(database_url, max_connections=6)

    @client.task(Tick, kind="tick", queue="ticks")
    async def tick(job: Job[Tick]) -> None:
        return None

    return client
