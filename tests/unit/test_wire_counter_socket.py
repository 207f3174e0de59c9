"""The round-trip counting proxy (tests/support/wire.py) reaches a server that listens on
a Unix socket, as the embedded provider's does: the host of such a URL is the socket's
directory and the socket is ``.s.PGSQL.<port>`` in it, as libpq reads it."""

from __future__ import annotations

import asyncio
import shutil
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.wire import WireCounter

pytestmark = pytest.mark.anyio

_READY = b"Z" + struct.pack("!i", 5) + b"I"


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # Short on purpose: a Unix socket path is limited to about 100 bytes.
    path = Path(tempfile.mkdtemp(prefix="awa-wire-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_the_proxy_forwards_to_a_unix_socket_server(socket_dir: Path) -> None:
    received: list[bytes] = []

    async def fake_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # The startup message, then one ReadyForQuery per request.
        (length,) = struct.unpack("!i", await reader.readexactly(4))
        received.append(await reader.readexactly(length - 4))
        writer.write(_READY)
        await writer.drain()
        head = await reader.readexactly(5)
        received.append(await reader.readexactly(struct.unpack("!i", head[1:])[0] - 4))
        writer.write(_READY)
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(fake_server, str(socket_dir / ".s.PGSQL.5433"))
    url = f"postgresql://postgres@/app?host={socket_dir}&port=5433"
    try:
        async with WireCounter(url) as wire:
            reader, writer = await asyncio.open_connection("127.0.0.1", wire.port)
            startup = struct.pack("!i", 196608) + b"user\0postgres\0\0"
            writer.write(struct.pack("!i", len(startup) + 4) + startup)
            assert await reader.readexactly(6) == _READY
            query = b"SELECT 1\0"
            writer.write(b"Q" + struct.pack("!i", len(query) + 4) + query)
            assert await reader.readexactly(6) == _READY
            writer.close()
    finally:
        server.close()
        await server.wait_closed()

    assert received == [startup, query]
    [link] = wire.links
    assert [m.text for burst in link.bursts for m in burst.messages] == ["SELECT 1"]
    assert link.asked == link.answered == 1
