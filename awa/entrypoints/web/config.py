"""Settings of ``awa serve`` and ``awa callbacks serve``, validated once at startup."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

import attrs

from awa.adapters._pg.pool import PoolOptions
from awa.callback_contract import DEFAULT_PATH_PREFIX, DEFAULT_REPLAY_WINDOW_SECS, SECRET_LENGTH
from awa.domain.errors import ValidationError
from awa.entrypoints.web.limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_SESSION_TTL

_COLOR = re.compile(r"^#(?:[0-9a-fA-F]{3,4}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})$")
_PEER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,62}$")

#: Pages poll no faster than this, and never faster than the cache TTL.
MIN_POLL_INTERVAL_MS = 5000


#: Pool defaults of ``awa serve`` (``--pool-min`` 2, idle 300 s, lifetime 1800 s, acquire 10 s).
SERVE_POOL = PoolOptions(
    min_connections=2, max_idle=300.0, max_lifetime=1800.0, acquire_timeout=10.0
)


@attrs.frozen
class Peer:
    """A link to another ``awa serve`` (another cluster): shown in the header."""

    name: str
    url: str


@attrs.frozen
class ServerConfig:
    """Everything the admin server needs; see ``awa serve --help`` for each field."""

    database_url: str
    host: str = "127.0.0.1"
    port: int = 3000
    pool_max: int = 10
    pool: PoolOptions = attrs.field(factory=lambda: SERVE_POOL)
    cache_ttl: float = 5.0
    read_only: bool = False
    callback_secret: bytes | None = None
    callback_prefix: str = DEFAULT_PATH_PREFIX
    instance_name: str | None = None
    instance_color: str | None = None
    peers: tuple[Peer, ...] = ()
    auth_token: str | None = None
    #: Host names served besides loopback ones (``--allowed-host``); ``"*"`` serves all.
    allowed_hosts: tuple[str, ...] = ()
    #: The largest request body accepted (``--max-body-bytes``); larger ones get 413.
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    #: How long a page login lasts (``--session-ttl``, seconds).
    session_ttl: float = DEFAULT_SESSION_TTL
    #: Refuse callbacks signed over the id alone: each needs a request signature
    #: (``--callback-require-request-signature``; ``awa.callback_contract``).
    callback_require_request_signature: bool = False
    #: How far a request signature's timestamp may be from the server's clock (seconds).
    callback_replay_window: float = DEFAULT_REPLAY_WINDOW_SECS

    @property
    def poll_interval_ms(self) -> int:
        return max(MIN_POLL_INTERVAL_MS, int(self.cache_ttl * 1000))


def parse_secret(value: str | None) -> bytes | None:
    """A callback secret given as 64 hex characters (32 bytes), or ``None``."""
    if value is None or value == "":
        return None
    try:
        secret = bytes.fromhex(value.strip())
    except ValueError:
        raise ValidationError(
            "callback_hmac_secret", "must be hex (64 characters for 32 bytes)"
        ) from None
    if len(secret) != SECRET_LENGTH:
        raise ValidationError(
            "callback_hmac_secret",
            f"must be {SECRET_LENGTH} bytes ({2 * SECRET_LENGTH} hex characters), "
            f"got {len(secret)} bytes",
        )
    return secret


def parse_color(value: str | None) -> str | None:
    """An instance colour ``#rgb``, ``#rgba``, ``#rrggbb`` or ``#rrggbbaa``, or ``None``."""
    if value is None or value == "":
        return None
    if not _COLOR.match(value):
        raise ValidationError(
            "instance_color", f"must be #rgb, #rgba, #rrggbb or #rrggbbaa, got {value!r}"
        )
    return value.lower()


def parse_peer(value: str) -> Peer:
    """``NAME=URL`` with an http(s) URL."""
    name, sep, url = value.partition("=")
    name, url = name.strip(), url.strip()
    if not sep or not name or not url:
        raise ValidationError("peer", f"must be NAME=URL, got {value!r}")
    if not _PEER_NAME.match(name):
        raise ValidationError("peer", f"name {name!r} must be 1-63 letters, digits, ' ._-'")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValidationError("peer", f"URL of {name!r} must be http:// or https://, got {url!r}")
    return Peer(name, url)


def parse_prefix(value: str) -> str:
    """A callback path prefix: leading ``/``, no trailing ``/`` (``""`` for the root)."""
    trimmed = value.strip().strip("/")
    if any(c in trimmed for c in "?#{} "):
        raise ValidationError("path_prefix", f"not a plain URL path: {value!r}")
    return f"/{trimmed}" if trimmed else ""


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
