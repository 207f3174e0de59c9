"""What every request handler shares: settings, the client, the cache and the write guard."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
from starlette.requests import Request

from awa.entrypoints import bootstrap
from awa.entrypoints.client_async import AsyncClient
from awa.entrypoints.web.cache import ReadCache
from awa.entrypoints.web.config import ServerConfig
from awa.entrypoints.web.errors import ApiError
from awa.entrypoints.web.reads import AdminReads
from awa.entrypoints.web.sessions import LoginThrottle, SeenSignatures, SessionStore

if TYPE_CHECKING:
    from awa.adapters._pg.access import ReplicaLag

log = logging.getLogger("awa.web")

#: How long a write-access probe is trusted (a replica may be promoted, grants change).
PROBE_MAX_AGE = 30.0
#: On a replica the probe also measures replay lag, so it is trusted for less long.
REPLICA_PROBE_MAX_AGE = 5.0


class WriteGuard:
    """Read-only mode: forced by configuration, or detected from the database."""

    def __init__(self, database_url: str, *, forced: bool) -> None:
        self._url = database_url
        self.forced = forced
        self._detected_reason: str | None = None
        self._probed_at: float | None = None
        self.replica: ReplicaLag | None = None

    async def refresh(self, *, max_age: float = PROBE_MAX_AGE) -> None:
        """Probe the database again when the last answer is older than ``max_age``.

        Even with ``--read-only`` the probe runs, so the pages can say how far a replica
        trails its primary."""
        now = time.monotonic()
        if self.replica is not None:
            max_age = min(max_age, REPLICA_PROBE_MAX_AGE)
        if self._probed_at is not None and now - self._probed_at < max_age:
            return
        access = await bootstrap.probe_write_access(self._url)
        if not access.writable and self._detected_reason != access.reason:
            log.warning("read-only mode: %s", access.reason)
        elif access.writable and self._detected_reason is not None and not self.forced:
            log.warning(
                "the database accepts writes again (it was: %s); mutations are enabled",
                self._detected_reason,
            )
        self._detected_reason = access.reason
        self.replica = access.replica
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


def replica_json(lag: ReplicaLag | None) -> dict[str, Any] | None:
    """How far a replica trails its primary, for the API (``None`` on a primary)."""
    if lag is None:
        return None
    return {
        "streaming": lag.streaming,
        "behind_seconds": lag.behind_seconds,
        "pending_bytes": lag.pending_bytes,
        "last_replayed_at": None
        if lag.last_replayed_at is None
        else lag.last_replayed_at.isoformat(),
        "summary": lag.describe(),
    }


@attrs.define
class WebState:
    config: ServerConfig
    client: AsyncClient
    cache: ReadCache
    reads: AdminReads
    guard: WriteGuard
    #: Page sessions (``None`` without ``--auth-token``).
    sessions: SessionStore | None = None
    throttle: LoginThrottle = attrs.field(factory=LoginThrottle)
    seen_signatures: SeenSignatures = attrs.field(factory=SeenSignatures)
    #: Wall-clock Unix seconds (sessions, login waits, callback timestamps); tests move it.
    clock: Callable[[], float] = time.time
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
            sessions=(
                None
                if config.auth_token is None
                else SessionStore(config.auth_token, config.session_ttl)
            ),
        )

    async def mutated(self) -> None:
        """After a mutation: cached reads no longer hold."""
        self.cache.invalidate()


def web_state(request: Request) -> WebState:
    state: WebState = request.app.state.awa
    return state
