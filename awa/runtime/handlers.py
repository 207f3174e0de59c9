"""The handler registry: which callable runs which job kind, and how its job is built."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from awa.domain.job import DEFAULT_QUEUE, JobRecord
from awa.domain.kind_policies import KindPolicies
from awa.runtime.context import AttemptContext

JobFactory = Callable[[JobRecord, AttemptContext], Any]
"""Builds the object handed to a handler (the public ``Job``) from the claimed record."""

Handler = Callable[[Any], Any]

ResultEncoder = Callable[[Any], Any]
"""Turns a handler's return value into JSON-shaped data for the result store."""


def context_job_factory(record: JobRecord, context: AttemptContext) -> Any:
    """The default factory: hand the :class:`AttemptContext` itself to the handler."""
    return context


def is_async_callable(handler: Handler) -> bool:
    """Whether calling ``handler`` returns a coroutine (``async def`` or such ``__call__``)."""
    target: Any = handler
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.iscoroutinefunction(target):
        return True
    call = getattr(target, "__call__", None)  # noqa: B004 - callable objects, not callable()
    return call is not None and inspect.iscoroutinefunction(call)


@attrs.frozen
class HandlerEntry:
    kind: str
    queue: str
    handler: Handler
    job_factory: JobFactory = context_job_factory
    #: set when the task stores its results (``store_result=True``)
    result_encoder: ResultEncoder | None = None
    #: rebuilds a stored result of this kind as the type the handler returns (for the
    #: children reading it, ``job.parent_results``); ``None``: the JSON value
    result_decoder: Callable[[Any], Any] | None = None
    # Decided once at registration, not per attempt.
    is_async: bool = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "is_async", is_async_callable(self.handler))


class HandlerRegistry:
    """Maps job kind to its handler. Registering a kind again replaces the earlier entry.

    ``policies``: the per-kind policies declared with the handlers (a task's retry
    policy), the registry the client's engines read; the runtime reads it to say what an
    outcome did (retried or exhausted, and after how long)."""

    def __init__(self, policies: KindPolicies | None = None) -> None:
        self._entries: dict[str, HandlerEntry] = {}
        self.policies = policies if policies is not None else KindPolicies()

    def register(
        self,
        kind: str,
        handler: Handler,
        *,
        queue: str = DEFAULT_QUEUE,
        job_factory: JobFactory | None = None,
        result_encoder: ResultEncoder | None = None,
        result_decoder: Callable[[Any], Any] | None = None,
    ) -> HandlerEntry:
        if not isinstance(kind, str) or not kind:
            raise ValueError("kind must be a non-empty string")
        if not isinstance(queue, str) or not queue:
            raise ValueError("queue must be a non-empty string")
        if not callable(handler):
            raise TypeError("handler must be callable")
        entry = HandlerEntry(
            kind=kind,
            queue=queue,
            handler=handler,
            job_factory=job_factory or context_job_factory,
            result_encoder=result_encoder,
            result_decoder=result_decoder,
        )
        self._entries[kind] = entry
        return entry

    def get(self, kind: str) -> HandlerEntry | None:
        return self._entries.get(kind)

    def queues(self) -> set[str]:
        """Queues that have at least one handler."""
        return {entry.queue for entry in self._entries.values()}

    def __contains__(self, kind: object) -> bool:
        return kind in self._entries

    def __iter__(self) -> Iterator[HandlerEntry]:
        return iter(list(self._entries.values()))

    def __len__(self) -> int:
        return len(self._entries)
