"""Run the admin app on a real uvicorn server in a background thread (browser tests)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from awa.entrypoints.web.app import create_app
from awa.entrypoints.web.config import ServerConfig
from tests.support.waits import until_sync


@contextmanager
def live_server(config: ServerConfig) -> Iterator[str]:
    """Serve ``config`` on an ephemeral loopback port; yields the base URL."""
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config), host="127.0.0.1", port=0, log_level="warning", lifespan="on"
        )
    )
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    until_sync(
        lambda: server.started or not thread.is_alive(), "the admin server started", timeout=20
    )
    if not server.started:
        raise RuntimeError("the admin server did not start")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
