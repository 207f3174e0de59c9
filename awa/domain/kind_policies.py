"""Per-kind policies the lifecycle consults, and the effects a transition carries to
other jobs.

A process registers a kind's policies where it registers its handler (``@client.task``):
its :class:`~awa.domain.policies.RetryPolicy`, and, for features that act on other
jobs when an attempt ends, an :data:`EffectRule`. Every engine of the process holds
the same :class:`KindPolicies` and hands it to the lifecycle, which reads it for
retryable failures and rescues (:func:`awa.domain.lifecycle.retry`,
:func:`~awa.domain.lifecycle.rescue`) and for the effects of an attempt that ended
(:func:`~awa.domain.lifecycle.effects`).

The stated fallback (ADR 0028): a kind this process did not register (the maintenance
leader rescuing another deployment's job) retries as awa-pg does, with the default
exponential backoff and the budget persisted with the job (its ``max_attempts``), and
its attempts carry no effects.

Effects are values (:class:`ChangeJob`); the engine that applies the transition applies
them in the same transaction, so the transition and its effects commit together or not
at all. An effect's own transition carries no further effects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import attrs

from awa.domain.errors import ValidationTypeError
from awa.domain.job import JobRecord
from awa.domain.policies import RetryPolicy

if TYPE_CHECKING:
    from awa.domain.lifecycle import Transition


@attrs.frozen
class ChangeJob:
    """Apply ``transition`` to job ``job_id`` (another job) when the job is in a state
    the transition applies to; a job that is not, or does not exist, is left alone.

    The shape the next features need: a parent's completion makes a waiting child
    ``available``; a parent's failure cancels a child."""

    job_id: int
    transition: Transition


#: An effect on another job. A union as more kinds of effect arrive (batch counters).
Effect = ChangeJob

#: Given a job as an attempt's end left it (its state says how the attempt ended), the
#: effects on other jobs that go with it.
EffectRule = Callable[[JobRecord], Sequence[Effect]]


def _retry_policy(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, RetryPolicy):
        raise ValidationTypeError(
            attribute.name, f"must be an awa.RetryPolicy, got {type(value).__name__}"
        )


def _effect_rule(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not callable(value):
        raise ValidationTypeError(attribute.name, "an effect rule must be callable")


@attrs.frozen
class KindPolicy:
    """What one kind registered: its retry policy and its effect rule (``None``: the
    defaults, awa-pg's retry and no effect). A part of the wrong type is refused with
    ``ValidationTypeError`` naming it (the field's name is the task option's)."""

    retry: RetryPolicy | None = attrs.field(default=None, validator=_retry_policy)
    effects: EffectRule | None = attrs.field(default=None, validator=_effect_rule)


_DEFAULT = KindPolicy()


class KindPolicies:
    """The per-kind policy registry of one process (shared by all its engines).

    Registering is done before work starts (a decorator at import time, usually); a later
    registration replaces that part of the kind's policy for transitions decided after it.
    """

    def __init__(self) -> None:
        self._kinds: dict[str, KindPolicy] = {}

    def update(self, kind: str, parts: Mapping[str, Any]) -> None:
        """Set the parts of ``kind``'s policy that ``parts`` names (fields of
        :class:`KindPolicy`; ``None`` is that part's default), keeping the others."""
        self._set(kind, attrs.evolve(self.get(kind), **parts))

    def set_retry(self, kind: str, retry: RetryPolicy | None) -> None:
        """Give ``kind`` ``retry`` (``None``: back to awa-pg's retry)."""
        self.update(kind, {"retry": retry})

    def set_effects(self, kind: str, rule: EffectRule | None) -> None:
        """Give ``kind`` the effect rule ``rule`` (``None``: no effects)."""
        self.update(kind, {"effects": rule})

    def _set(self, kind: str, policy: KindPolicy) -> None:
        if not isinstance(kind, str) or not kind:
            raise ValueError("kind must be a non-empty string")
        if policy == _DEFAULT:
            self._kinds.pop(kind, None)
        else:
            self._kinds[kind] = policy

    def get(self, kind: str | None) -> KindPolicy:
        """``kind``'s policy; the default one for a kind nobody registered here."""
        if kind is None:
            return _DEFAULT
        return self._kinds.get(kind, _DEFAULT)

    def retry_for(self, kind: str | None) -> RetryPolicy | None:
        return self.get(kind).retry

    def effects_for(self, kind: str | None) -> EffectRule | None:
        return self.get(kind).effects

    @property
    def has_effects(self) -> bool:
        """Whether any kind has an effect rule (engines skip effect reads otherwise)."""
        return any(policy.effects is not None for policy in self._kinds.values())

    def kinds(self) -> Mapping[str, KindPolicy]:
        """Every registered kind's policy (read-only)."""
        return MappingProxyType(dict(self._kinds))
