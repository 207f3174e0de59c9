"""The worker side of :class:`~awa.contrib.django.backend.AwaBackend`: the one Awa
handler that runs every Django task, and the loop ``manage.py awa_worker`` runs.

The handler imports the task by its path, calls it (an ``async def`` task on the event
loop, a plain one on a thread, with Django's stale connections closed around it as a
request would), sends Django's ``task_started`` / ``task_finished`` signals, and returns
the task's value, stored as the job's result (in an envelope with what ``TaskResult``
shows, so it reads in full after the job's row is gone). A task that raises has its exception's
class path and traceback recorded on the job, then fails it (or, with ``RETRY_ON_ERROR``,
is retried while attempts remain).
"""

from __future__ import annotations

import inspect
import logging
import signal
import traceback
from collections.abc import Sequence
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
from django.db import close_old_connections
from django.tasks.base import Task, TaskContext, TaskResultStatus
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from awa.contrib.django import _shape
from awa.contrib.django.backend import AwaBackend
from awa.domain.errors import TerminalError
from awa.entrypoints.client import AsyncClient, Job

log = logging.getLogger("awa.contrib.django")


def _call_sync(task: Task, args: list[Any], kwargs: dict[str, Any]) -> Any:
    # A worker thread is like a request: connections left stale by an earlier task on
    # this thread are closed first, and those past CONN_MAX_AGE after.
    close_old_connections()
    try:
        return task.func(*args, **kwargs)
    finally:
        close_old_connections()


def _class_path(exc: BaseException) -> str:
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}"


def handler_for(backend: AwaBackend) -> Any:
    """The Awa handler (``async def``) that runs ``backend``'s Django tasks."""

    async def run_django_task(job: Job[dict[str, Any]]) -> Any:
        path, args, kwargs = _shape.task_call(job.args)
        try:
            task = backend.task_of(job)
        except (ImportError, ValueError) as exc:
            raise TerminalError(f"cannot run the Django task {path!r}: {exc}") from exc
        running = backend.result_of(job)
        if task.takes_context:
            args = [TaskContext(task_result=running), *args]
        task_started.send(sender=type(backend), task_result=running)
        try:
            if inspect.iscoroutinefunction(task.func):
                value = await task.func(*args, **kwargs)
            else:
                value = await anyio.to_thread.run_sync(partial(_call_sync, task, args, kwargs))
            value = normalize_json(value)
        except Exception as exc:
            record = _shape.error_record(
                job.attempt, _class_path(exc), "".join(traceback.format_exception(exc))
            )
            job.update_metadata({_shape.ERRORS_KEY: _shape.with_error(job.progress, record)})
            await job.flush_progress()
            object.__setattr__(running, "status", TaskResultStatus.FAILED)
            task_finished.send(sender=type(backend), task_result=running)
            if backend.retry_on_error:
                raise
            raise TerminalError(f"the Django task {path} raised {_class_path(exc)}: {exc}") from exc
        object.__setattr__(running, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(running, "_return_value", value)
        object.__setattr__(running, "finished_at", timezone.now())
        task_finished.send(sender=type(backend), task_result=running)
        return _shape.envelope(value, **backend.envelope_facts(running))

    return run_django_task


def client_for(backend: AwaBackend, queues: Sequence[str]) -> AsyncClient:
    """An ``AsyncClient`` on the backend's database with the Django task handler
    registered (storing each task's return value as its job's result)."""
    if not queues:
        raise ValueError("a Django task worker needs at least one queue")
    client = AsyncClient(backend.database_url)
    # One kind serves every queue listed at start (only_listed_queues): the registered
    # queue is only where the handler is declared.
    client.task(dict, kind=_shape.KIND, queue=queues[0], store_result=True)(handler_for(backend))
    return client


async def run_worker(
    backend: AwaBackend,
    queues: Sequence[tuple[str, int]],
    *,
    shutdown_timeout_ms: int = 30_000,
    stop: anyio.Event | None = None,
    handle_signals: bool = True,
) -> None:
    """Serve ``queues`` (``(name, max_workers)``) until ``stop`` is set or, with
    ``handle_signals`` (main thread only), the process gets SIGINT / SIGTERM; then shut
    down, letting running tasks finish for up to ``shutdown_timeout_ms``."""
    stop = stop if stop is not None else anyio.Event()
    client = client_for(backend, [name for name, _ in queues])
    async with client:
        await client.start(queues=list(queues), only_listed_queues=True)
        log.info(
            "serving Django tasks of backend %r on %s",
            backend.alias,
            ", ".join(f"{name} ({n} workers)" for name, n in queues),
        )
        async with anyio.create_task_group() as group:

            async def on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for signum in signals:
                        log.info("%s: shutting down", signal.Signals(signum).name)
                        stop.set()
                        return

            if handle_signals:
                group.start_soon(on_signal)
            await stop.wait()
            group.cancel_scope.cancel()
        await client.shutdown(timeout_ms=shutdown_timeout_ms)
