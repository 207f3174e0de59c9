"""A TCP proxy in front of Postgres that reads the protocol it forwards and counts round
trips, for tests that hold a path to a number of round trips (not to a time).

:class:`WireCounter` listens on a free local port and forwards every connection to the
server. On each connection it records the client's messages (``P`` Parse, ``B`` Bind,
``E`` Execute, ``S`` Sync, ``Q`` a simple query, ...) grouped in *bursts*: what the client
sends before the server answers anything. A burst is one round trip: the client sent it
and waits for the answer before sending more. From the server it records the
notifications (``A``) and how many ``ReadyForQuery`` answers came, so a test can wait
until nothing is outstanding. Connect through it without TLS or GSS encryption
(:meth:`WireCounter.url`): the proxy must read the messages.

Everything is counted on the event loop the proxy runs on, in the order the bytes pass
through it; a test in the same loop reads the counts at the instant its own code runs.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import Callable

import attrs
from psycopg.conninfo import conninfo_to_dict, make_conninfo

#: The request codes a client may send before its startup message.
_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104
_CANCEL_REQUEST = 80877102
#: How long closing the proxy waits for its connections to end (seconds).
_CLOSE_TIMEOUT = 5.0


@attrs.define
class Message:
    """One protocol message from the client: its type, and for Parse and Query the
    statement's text, for Bind the prepared statement it runs."""

    kind: str
    statement: str = ""
    text: str = ""


@attrs.define
class Burst:
    """What one client sent before the server answered: one round trip."""

    link: int
    #: Position of the burst among every connection's bursts, in the order they began.
    seq: int
    messages: list[Message] = attrs.field(factory=list)

    def kinds(self) -> str:
        return "".join(m.kind for m in self.messages)

    @property
    def executes(self) -> int:
        """Statements the burst runs (Execute and simple Query messages)."""
        return sum(1 for m in self.messages if m.kind in "EQ")

    def texts(self, named: dict[str, str]) -> list[str]:
        """The text of every statement the burst runs: a Query's, or for an Execute the
        statement its Bind names (``named``: the link's prepared statements) or the one
        its Parse just sent."""
        found: list[str] = []
        last = ""
        for m in self.messages:
            if m.kind == "P":
                last = m.text
            elif m.kind == "B":
                last = named.get(m.statement, last) if m.statement else last
            elif m.kind == "E":
                found.append(last)
            elif m.kind == "Q":
                found.append(m.text)
        return found


@attrs.define
class Link:
    """One proxied connection."""

    id: int
    bursts: list[Burst] = attrs.field(factory=list)
    #: The text of each prepared statement by name, as Parse messages named them.
    named: dict[str, str] = attrs.field(factory=dict)
    #: (channel, position among every connection's bursts when it arrived)
    notifications: list[tuple[str, int]] = attrs.field(factory=list)
    #: Syncs and simple queries sent, ReadyForQuery answers received.
    asked: int = 0
    answered: int = 0
    answered_since_burst: bool = True
    closed: bool = False


def _cstring(data: bytes, at: int) -> tuple[str, int]:
    end = data.index(b"\0", at)
    return data[at:end].decode(errors="replace"), end + 1


class WireCounter:
    """A counting proxy to ``target_url``'s server; use as an async context manager."""

    def __init__(self, target_url: str) -> None:
        params = conninfo_to_dict(target_url)
        self._target_url = target_url
        self._host = str(params.get("host") or "127.0.0.1")
        self._port = int(params.get("port") or 5432)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._ids = itertools.count(1)
        self._seq = itertools.count()
        self.links: list[Link] = []
        #: Called after every message the server sends, with the link and its type.
        self.on_server_message: Callable[[Link, str], None] | None = None
        self.port = 0

    async def __aenter__(self) -> WireCounter:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        # Closing both ends lets every connection's forwarding end by itself; one that
        # does not within the bound is cancelled.
        for writer in list(self._writers):
            writer.close()
        if self._tasks:
            _done, stuck = await asyncio.wait(set(self._tasks), timeout=_CLOSE_TIMEOUT)
            for task in stuck:
                task.cancel()

    def url(self) -> str:
        """``target_url`` through the proxy, with TLS and GSS encryption off."""
        return make_conninfo(
            self._target_url,
            host="127.0.0.1",
            port=str(self.port),
            sslmode="disable",
            gssencmode="disable",
        )

    # ----------------------------------------------------------------- reading
    def mark(self) -> int:
        """A position: the bursts that begin after it are :meth:`since` it."""
        return sum(len(link.bursts) for link in self.links)

    def since(self, mark: int) -> list[Burst]:
        """Every burst begun after ``mark``, in the order they began."""
        found = [b for link in self.links for b in link.bursts if b.seq >= mark]
        return sorted(found, key=lambda b: b.seq)

    def link(self, burst: Burst) -> Link:
        return next(link for link in self.links if link.id == burst.link)

    def idle(self) -> bool:
        """Whether every open connection has had every request answered."""
        return all(link.closed or link.asked == link.answered for link in self.links)

    # ----------------------------------------------------------------- proxying
    async def _open_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the server: over TCP, or for a host that is a directory (as
        libpq reads it: the embedded provider's server listens only there) over the Unix
        socket ``.s.PGSQL.<port>`` in it."""
        if self._host.startswith("/"):
            return await asyncio.open_unix_connection(f"{self._host}/.s.PGSQL.{self._port}")
        return await asyncio.open_connection(self._host, self._port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        link = Link(next(self._ids))
        self.links.append(link)
        try:
            up_reader, up_writer = await self._open_upstream()
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(
                self._client_side(link, reader, up_writer),
                self._server_side(link, up_reader, writer),
            )
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            link.closed = True
            for w in (writer, up_writer):
                w.close()
                self._writers.discard(w)
            self._tasks.discard(task)

    async def _client_side(
        self, link: Link, reader: asyncio.StreamReader, upstream: asyncio.StreamWriter
    ) -> None:
        # Before the startup message: untyped, length first.
        while True:
            head = await reader.readexactly(8)
            length, code = struct.unpack("!ii", head)
            rest = await reader.readexactly(length - 8)
            upstream.write(head + rest)
            await upstream.drain()
            if code in (_SSL_REQUEST, _GSSENC_REQUEST):
                raise AssertionError("connect through WireCounter.url(): no TLS or GSS")
            if code == _CANCEL_REQUEST:
                return
            break
        await _relay(reader, upstream, lambda kind, body: self._client_message(link, kind, body))

    def _client_message(self, link: Link, kind: str, body: bytes) -> None:
        if kind == "p":  # password and SASL messages, before any query
            return
        if link.answered_since_burst or not link.bursts:
            link.bursts.append(Burst(link.id, next(self._seq)))
            link.answered_since_burst = False
        message = Message(kind)
        if kind == "P":
            message.statement, at = _cstring(body, 0)
            message.text, _ = _cstring(body, at)
            if message.statement:
                link.named[message.statement] = message.text
        elif kind == "B":
            _portal, at = _cstring(body, 0)
            message.statement, _ = _cstring(body, at)
        elif kind == "Q":
            message.text, _ = _cstring(body, 0)
        if kind in "SQ":
            link.asked += 1
        link.bursts[-1].messages.append(message)

    async def _server_side(
        self, link: Link, upstream: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await _relay(upstream, writer, lambda kind, body: self._server_message(link, kind, body))

    def _server_message(self, link: Link, kind: str, body: bytes) -> None:
        if kind == "A":
            channel, _ = _cstring(body, 4)
            link.notifications.append((channel, self.mark()))
        else:
            link.answered_since_burst = True
        if kind == "Z" and link.bursts:
            link.answered += 1
        if self.on_server_message is not None:
            self.on_server_message(link, kind)


async def _relay(
    source: asyncio.StreamReader,
    sink: asyncio.StreamWriter,
    on_message: Callable[[str, bytes], None],
) -> None:
    """Pass bytes from ``source`` to ``sink`` as they come, showing ``on_message`` each
    whole typed message (kind, body) on the way; close ``sink`` at the end of ``source``."""
    buffer = b""
    while True:
        chunk = await source.read(65536)
        if not chunk:
            sink.close()
            return
        buffer += chunk
        while len(buffer) >= 5:
            kind = chr(buffer[0])
            (length,) = struct.unpack("!i", buffer[1:5])
            if len(buffer) < 1 + length:
                break
            body, buffer = buffer[5 : 1 + length], buffer[1 + length :]
            on_message(kind, body)
        sink.write(chunk)
        await sink.drain()
