"""The hand-written parts of the blocking clients.

``Client`` (the blocking client, with the same method names as ``AsyncClient``) and
``RawClient`` are generated into ``_client_sync_generated.py`` from ``AsyncClient``'s
coroutine methods; this module holds what is not a plain blocking call. Each blocking
client owns one event loop running in a background daemon thread; every call is submitted
to it and waited for, so the client works from any thread (including one that is itself
running an event loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import weakref
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Self, TypeVar

from awa.domain.errors import DatabaseError
from awa.entrypoints.client_async import AsyncClient
from awa.entrypoints.transaction import SyncTransaction

if TYPE_CHECKING:
    from awa.entrypoints._client_sync_generated import Client

R = TypeVar("R")

log = logging.getLogger("awa.client")

#: How long closing a blocking client that was never closed may take at interpreter exit.
EXIT_CLOSE_TIMEOUT = 1.0


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="awa-client-loop", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        if self.loop.is_closed() or not self._thread.is_alive():
            coro.close()
            raise DatabaseError("attempted to acquire a connection on a closed pool")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()

    def close_abandoned(self, client: AsyncClient) -> None:
        """Close ``client`` and stop the loop for a blocking client nobody closed (it was
        garbage collected, or the interpreter is exiting): bounded by
        ``EXIT_CLOSE_TIMEOUT`` so a program that fails still exits promptly."""
        if self.loop.is_closed() or not self._thread.is_alive():
            return
        if threading.current_thread() is self._thread:
            # Collected on the loop thread itself: it cannot wait for itself.
            self.loop.call_soon(self.loop.stop)
            return
        future = asyncio.run_coroutine_threadsafe(client.close(), self.loop)
        try:
            future.result(timeout=EXIT_CLOSE_TIMEOUT)
        except concurrent.futures.TimeoutError:
            future.cancel()
            log.debug("closing an abandoned client took over %s s", EXIT_CLOSE_TIMEOUT)
        except Exception:
            log.debug("closing an abandoned client failed", exc_info=True)
        self._cancel_remaining()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(EXIT_CLOSE_TIMEOUT)
        if not self._thread.is_alive():
            self.loop.close()

    def _cancel_remaining(self) -> None:
        """Cancel whatever still runs on the loop and give it one short chance to end,
        so no task is destroyed pending."""

        async def cancel_all() -> None:
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=EXIT_CLOSE_TIMEOUT / 2)

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(
                timeout=EXIT_CLOSE_TIMEOUT
            )
        except Exception:
            log.debug("cancelling an abandoned client's tasks failed", exc_info=True)


class BlockingClientBase:
    """What every blocking client has: its loop thread, the context manager, ``close`` and
    ``transaction``."""

    def __init__(
        self, database_url: str, max_connections: int = 10, *, pooler: str | None = None
    ) -> None:
        self._async = AsyncClient(database_url, max_connections, pooler=pooler)
        self._loop = _LoopThread()
        # Closes the client if the program never does: at interpreter exit (a script
        # that raised before close()) or when the client is garbage collected.
        self._finalizer = weakref.finalize(self, self._loop.close_abandoned, self._async)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        return self._loop.run(coro)

    def close(self) -> None:
        """Close every connection; later calls raise ``DatabaseError``. Idempotent."""
        self._finalizer.detach()
        try:
            if not self._loop.loop.is_closed():
                self._run(self._async.close())
        finally:
            self._loop.stop()

    def transaction(self) -> SyncTransaction:
        """Begin a transaction (``with client.transaction() as tx``)."""
        return SyncTransaction(self._run(self._async.transaction()), self._run)


class RawClientBase(AsyncClient):
    """An ``AsyncClient`` whose ``*_sync`` methods run on a blocking twin of their own, so
    they work from plain threads while the async methods stay on the caller's loop."""

    def __init__(self, database_url: str, max_connections: int = 10) -> None:
        super().__init__(database_url, max_connections)
        self._twin: Client | None = None
        self._twin_args = (database_url, max_connections)

    def _blocking(self) -> Client:
        if self._twin is None:
            from awa.entrypoints._client_sync_generated import Client

            self._twin = Client(*self._twin_args)
        return self._twin

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            twin, self._twin = self._twin, None
            if twin is not None:
                await asyncio.to_thread(twin.close)

    def close_sync(self) -> None:
        """Close the blocking twin's connections (``close`` closes both)."""
        twin, self._twin = self._twin, None
        if twin is not None:
            twin.close()

    def transaction_sync(self) -> SyncTransaction:
        """A blocking transaction on the twin (``with raw.transaction_sync() as tx``)."""
        return self._blocking().transaction()
