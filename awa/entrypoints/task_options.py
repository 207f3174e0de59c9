"""The keywords of ``@client.task`` (and its deprecated alias ``worker``), declared once
as TypedDicts the signatures unpack (ADR 0027), and how the per-kind policies among them
reach the registry the lifecycle reads (ADR 0028).

A per-kind policy is a field of :class:`PolicyOptions` named as its part of
:class:`~awa.domain.kind_policies.KindPolicy`: :func:`policy_parts` hands every such
option to the registry, so adding one is a field here and one there."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from awa.domain.keywords import keywords_of
from awa.domain.kind_policies import KindPolicy
from awa.domain.policies import RetryPolicy


class PolicyOptions(TypedDict, total=False):
    """A kind's policies; an option left out (or ``None``) is that policy's default."""

    retry: RetryPolicy | None
    """The kind's :class:`~awa.RetryPolicy` (attempt budget, backoff, jitter, longest
    delay), used for its handler failures and, by the maintenance leader of a process
    that registered it, for its rescues. Default: awa-pg's retry."""


class WorkerOptions(PolicyOptions, total=False):
    """The keywords of the deprecated ``client.worker()``."""

    kind: str | None
    """The job kind (default: derived from the args class, as for inserts)."""
    queue: str
    """The queue the handler serves (default ``"default"``)."""


class TaskOptions(WorkerOptions, total=False):
    """The keywords of ``@client.task``."""

    store_result: bool
    """Store what the handler returns when it completes, for ``client.wait_for``
    (default False)."""


def policy_parts(options: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a kind's policy that a task's ``options`` declare, every policy option
    included (left out: its default), checked now: a value of the wrong type raises
    ``ValidationTypeError`` naming the option."""
    parts = {key: options.get(key) for key in keywords_of(PolicyOptions)}
    KindPolicy(**parts)
    return parts
