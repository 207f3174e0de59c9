"""What every request handler shares: settings, the client, the cache and the write guard."""

from __future__ import annotations

import logging
import time
from typing import Any

import attrs
from starlette.requests import Request

from awa.entrypoints import bootstrap
from awa.entrypoints.client_async import AsyncClient
from awa.entrypoints.web.cache import ReadCache
from awa.entrypoints.web.config import ServerConfig
from awa.entrypoints.web.errors import ApiError
from awa.entrypoints.web.reads import AdminReads

log = logging.getLogger("awa.web")

#: How long a write-access probe is trusted (a replica may be promoted, grants change).
PROBE_MAX_AGE = 30.0


class WriteGuard:
    """Read-only mode: forced by configuration, or detected from the database."""

    def __init__(self, database_url: str, *, forced: bool) -> None:
        self._url = database_url
        self.forced = forced
        self._detected_reason: str | None = None
        self._probed_at: float | None = None

    async def refresh(self, *, max_age: float = PROBE_MAX_AGE) -> None:
        if self.forced:
            return
        now = time.monotonic()
        if self._probed_at is not None and now - self._probed_at < max_age:
            return
        access = await bootstrap.probe_write_access(self._url)
        if not access.writable and self._detected_reason != access.reason:
            log.warning("read-only mode: %s", access.reason)
        self._detected_reason = access.reason
        self._probed_at = now

    @property
    def read_only(self) -> bool:
        return self.forced or self._detected_reason is not None

    @property
    def reason(self) -> str | None:
        if self.forced:
            return "started with --read-only"
        return self._detected_reason

    async def require_writable(self) -> None:
        """Raise 503 when mutations are refused."""
        await self.refresh()
        if self.read_only:
            raise ApiError(503, f"read-only mode: {self.reason}; mutations are disabled")


@attrs.define
class WebState:
    config: ServerConfig
    client: AsyncClient
    cache: ReadCache
    reads: AdminReads
    guard: WriteGuard
    extra: dict[str, Any] = attrs.field(factory=dict)

    @classmethod
    def open(cls, config: ServerConfig) -> WebState:
        client = AsyncClient(config.database_url, config.pool_max, pool_options=config.pool)
        cache = ReadCache(config.cache_ttl)
        return cls(
            config=config,
            client=client,
            cache=cache,
            reads=AdminReads(client, cache),
            guard=WriteGuard(config.database_url, forced=config.read_only),
        )

    async def mutated(self) -> None:
        """After a mutation: cached reads no longer hold."""
        self.cache.invalidate()


def web_state(request: Request) -> WebState:
    state: WebState = request.app.state.awa
    return state
