"""What the admin server remembers about credentials: page sessions, failed logins and
callback request signatures already used. All of it lives in the process: a restart ends
every session (the signing key is new) and forgets the rest.

Time is a parameter (``now``, Unix seconds), so tests move a clock instead of sleeping.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import secrets

import attrs

#: Failed logins a client may make before it has to wait.
FREE_FAILURES = 5
#: The wait after the first failure past :data:`FREE_FAILURES`; it doubles with each one.
FIRST_WAIT_SECS = 1.0
#: The longest wait.
MAX_WAIT_SECS = 900.0
#: A client's failures are forgotten this long after its last one.
FORGET_AFTER_SECS = 3600.0
#: At most this many clients are tracked (the oldest are dropped first).
MAX_TRACKED = 10_000


class SessionStore:
    """Signed, expiring page sessions that logout ends.

    A cookie is ``{id}.{expires}.{mac}``: a random id, its expiry (Unix seconds) and an
    HMAC-SHA256 over both, keyed with a key derived from the token and a random nonce
    drawn when the process starts. Logout records the id as revoked until its expiry."""

    def __init__(self, token: str, ttl: float) -> None:
        nonce = secrets.token_bytes(32)
        self._key = hmac.new(token.encode(), b"awa-ui-session\x00" + nonce, hashlib.sha256).digest()
        self.ttl = ttl
        self._revoked: dict[str, float] = {}

    def _mac(self, session_id: str, expires: int) -> str:
        message = f"{session_id}.{expires}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def issue(self, now: float) -> str:
        """A new session cookie value, valid for ``ttl`` seconds from ``now``."""
        session_id = secrets.token_urlsafe(18)
        expires = int(now + self.ttl)
        return f"{session_id}.{expires}.{self._mac(session_id, expires)}"

    def _parse(self, cookie: str) -> tuple[str, int] | None:
        parts = cookie.split(".")
        if len(parts) != 3 or not parts[1].isdigit() or not parts[1].isascii():
            return None
        session_id, expires = parts[0], int(parts[1])
        mac = parts[2].encode("utf-8", "replace")
        if not hmac.compare_digest(self._mac(session_id, expires).encode(), mac):
            return None
        return session_id, expires

    def valid(self, cookie: str, now: float) -> bool:
        """Whether ``cookie`` was issued here, has not expired and was not logged out."""
        parsed = self._parse(cookie)
        if parsed is None:
            return False
        session_id, expires = parsed
        return now < expires and session_id not in self._revoked

    def revoke(self, cookie: str, now: float) -> bool:
        """End the session of ``cookie``; ``False`` when it was not a live session."""
        self._revoked = {s: e for s, e in self._revoked.items() if e > now}
        if not self.valid(cookie, now):
            return False
        parsed = self._parse(cookie)
        assert parsed is not None
        self._revoked[parsed[0]] = parsed[1]
        return True


@attrs.define
class _Failures:
    count: int = 0
    last: float = 0.0
    locked_until: float = 0.0


class LoginThrottle:
    """Slows down guessing: after :data:`FREE_FAILURES` wrong tokens from one client,
    each further one makes it wait twice as long (1 s, 2 s, 4 s ... up to 15 minutes),
    during which even the right token is refused with 429. A success clears the count."""

    def __init__(self) -> None:
        self._clients: dict[str, _Failures] = {}

    def wait(self, client: str, now: float) -> float:
        """Seconds ``client`` must still wait before trying again (0: it may try)."""
        entry = self._clients.get(client)
        if entry is None:
            return 0.0
        return max(0.0, entry.locked_until - now)

    def failed(self, client: str, now: float) -> float:
        """Record a wrong token; returns the wait it earned (0 while still free)."""
        self._forget_old(now)
        entry = self._clients.pop(client, None) or _Failures()
        self._clients[client] = entry  # most recent last, so the oldest go first
        entry.count += 1
        entry.last = now
        over = entry.count - FREE_FAILURES
        if over <= 0:
            return 0.0
        wait = min(MAX_WAIT_SECS, FIRST_WAIT_SECS * float(2 ** min(over - 1, 30)))
        entry.locked_until = now + wait
        return wait

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)

    def _forget_old(self, now: float) -> None:
        stale = [c for c, e in self._clients.items() if now - e.last > FORGET_AFTER_SECS]
        for client in stale:
            del self._clients[client]
        while len(self._clients) >= MAX_TRACKED:
            del self._clients[next(iter(self._clients))]


class SeenSignatures:
    """Request signatures already accepted, each kept until its timestamp leaves the
    replay window: a captured request cannot be sent again."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._expiry: list[tuple[float, str]] = []

    def first_use(self, signature: str, forget_at: float, now: float) -> bool:
        """Record ``signature``; ``False`` when it was used before."""
        while self._expiry and self._expiry[0][0] <= now:
            self._seen.discard(heapq.heappop(self._expiry)[1])
        key = signature.strip().lower()
        if key in self._seen:
            return False
        self._seen.add(key)
        heapq.heappush(self._expiry, (forget_at, key))
        return True
