"""How a loop that fails on every iteration logs: one warning per cause, not a flood.

A dispatcher polls every 200 ms; while the database or its pooler is unreachable every
claim fails, and logging each one with a traceback buries the one line an operator needs.
:class:`FailureLog` is the single rule every per-iteration loop (claims, override reads,
heartbeats, completion flushes, leader election, maintenance duties, the runtime
snapshot) follows:

* the first failure of a kind (exception type + SQLSTATE + cause class) logs a WARNING
  with the traceback and a hint naming the likely cause and the fix;
* repeats of that kind are counted, not logged; once :data:`WINDOW_SECONDS` have passed
  since the kind was last reported, the next failure logs one line
  ``N more <what> failures (same cause) in the last 30 s``;
* the first success after failures logs one INFO line: ``<what> recovered after N
  failures over T s``.

The cause classes come from SQLSTATEs where the server sent one and, for failures that
happened before any server answered (connection refused, a pooler turning the client
away, a pool out of connections), from the driver's message: those carry no SQLSTATE.
The class only chooses the hint and groups repeats; it never changes what the loop does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs

#: How long repeats of one cause stay silent before a summary line counts them.
WINDOW_SECONDS = 30.0

_CHECK = "check DATABASE_URL, that Postgres (or the pooler in front of it) is running"
_LIMITS = "check max_connections, the pooler's pool size and the worker's max_connections"

#: SQLSTATE -> (cause class, hint). Class 08 is every connection exception.
_SQLSTATE_CAUSES: dict[str, tuple[str, str]] = {
    "53300": ("too many connections", f"the server refused a connection: {_LIMITS}"),
    "53400": ("too many connections", f"a configuration limit was exceeded: {_LIMITS}"),
    "57P01": (
        "connection terminated",
        f"the server ended the session (shutdown, restart or pg_terminate_backend): {_CHECK}",
    ),
    "57P02": ("server crashed", f"Postgres is restarting after a crash: {_CHECK}"),
    "57P03": ("server starting", "Postgres is not accepting connections yet (starting up)"),
}
_SQLSTATE_CLASS_CAUSES: dict[str, tuple[str, str]] = {
    "08": ("connection failure", f"the database connection failed: {_CHECK}"),
}
# Failures before the server answered carry no SQLSTATE; the driver's message is all
# there is. Lower-case fragments, checked in order.
_MESSAGE_CAUSES: tuple[tuple[str, str, str], ...] = (
    ("too many clients", "too many connections", f"the server refused a connection: {_LIMITS}"),
    (
        "too many connections",
        "too many connections",
        f"the server refused a connection: {_LIMITS}",
    ),
    (
        "no more connections allowed",
        "pooler refused",
        "the pooler refused a client connection: check its max_client_conn and pool size",
    ),
    (
        "pgbouncer",
        "pooler refused",
        "the pooler refused the connection: check the pooler, its databases and pool size",
    ),
    (
        "couldn't get a connection",
        "pool exhausted",
        f"every pooled connection was busy: {_LIMITS}",
    ),
    ("connection pool unavailable", "pool exhausted", f"the pool gave no connection: {_LIMITS}"),
    ("connection refused", "connection refused", f"nothing accepts connections: {_CHECK}"),
    ("could not translate host name", "unknown host", f"the host does not resolve: {_CHECK}"),
    ("name or service not known", "unknown host", f"the host does not resolve: {_CHECK}"),
    ("timeout expired", "connection timeout", f"connecting timed out: {_CHECK}"),
    ("server closed the connection", "connection lost", f"the connection dropped: {_CHECK}"),
    ("connection failed", "connection failure", f"the database connection failed: {_CHECK}"),
)


@attrs.frozen
class FailureKind:
    """What groups repeats: the exception's type, the SQLSTATE found on it or on its
    causes, and the cause class; ``hint`` says what to check."""

    type_name: str
    sqlstate: str | None
    cause: str
    hint: str | None


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def classify(exc: BaseException) -> FailureKind:
    """The kind of ``exc``: SQLSTATE first (on it or any exception it was raised from),
    then the message of a failure the server never answered."""
    chain = _chain(exc)
    sqlstate: str | None = None
    for item in chain:
        found = getattr(item, "sqlstate", None)
        if isinstance(found, str) and found:
            sqlstate = found
            break
    cause, hint = "other", None
    if sqlstate is not None:
        known = _SQLSTATE_CAUSES.get(sqlstate) or _SQLSTATE_CLASS_CAUSES.get(sqlstate[:2])
        if known is not None:
            cause, hint = known
        else:
            cause = f"SQLSTATE {sqlstate}"
    else:
        text = " ".join(str(item) for item in chain).lower()
        for fragment, name, said in _MESSAGE_CAUSES:
            if fragment in text:
                cause, hint = name, said
                break
        else:
            if any(isinstance(item, ConnectionError) for item in chain):
                cause, hint = "connection failure", f"the connection failed: {_CHECK}"
    return FailureKind(type(exc).__name__, sqlstate, cause, hint)


@attrs.define
class _Streak:
    reported_at: float
    unreported: int = 0


class FailureLog:
    """Throttled logging for one loop's repeated failures of one operation (``what``,
    e.g. ``"claim"``; ``prefix`` names the loop, e.g. ``"queue email: "``). Call
    :meth:`failed` from the ``except`` block and :meth:`succeeded` after the operation
    worked; ``clock`` reads monotonic seconds (the runtime's ``Clock.monotonic``)."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        prefix: str = "",
        window: float = WINDOW_SECONDS,
        clock: Callable[[], float],
    ) -> None:
        self._log = logger
        self.what = what
        self.prefix = prefix
        self.window = window
        self._clock = clock
        self._streaks: dict[FailureKind, _Streak] = {}
        #: failures since the last success
        self.failures = 0
        self._first_failure_at: float | None = None

    def failed(self, exc: BaseException, detail: str = "") -> None:
        """Record one failure of ``exc``; log it if it is the first of its kind, or a
        summary if the kind's window passed. ``detail`` is added to the first line
        (e.g. ``"; retrying"``)."""
        now = self._clock()
        self.failures += 1
        if self._first_failure_at is None:
            self._first_failure_at = now
        kind = classify(exc)
        streak = self._streaks.get(kind)
        if streak is None:
            self._streaks[kind] = _Streak(reported_at=now)
            cause = kind.cause if kind.sqlstate is None else f"{kind.cause}, {kind.sqlstate}"
            hint = "" if kind.hint is None else f"; {kind.hint}"
            self._log.warning(
                "%s%s failed (%s: %s)%s%s; repeats of this cause are counted for %g s",
                self.prefix,
                self.what,
                kind.type_name,
                cause,
                detail,
                hint,
                self.window,
                exc_info=exc,
            )
            return
        streak.unreported += 1
        if now - streak.reported_at >= self.window:
            self._log.warning(
                "%s%d more %s failures (same cause: %s) in the last %.0f s",
                self.prefix,
                streak.unreported,
                self.what,
                kind.cause,
                now - streak.reported_at,
            )
            streak.reported_at = now
            streak.unreported = 0

    def succeeded(self) -> None:
        """The operation worked: after failures, log one recovery line and start over."""
        if self.failures == 0:
            return
        started = self._first_failure_at
        elapsed = 0.0 if started is None else self._clock() - started
        self._log.info(
            "%s%s recovered after %d failure%s over %.1f s",
            self.prefix,
            self.what,
            self.failures,
            "" if self.failures == 1 else "s",
            elapsed,
        )
        self.failures = 0
        self._first_failure_at = None
        self._streaks.clear()
