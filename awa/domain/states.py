"""Job states and the table of legal state changes."""

from __future__ import annotations

import enum
import functools

from awa.domain.errors import IllegalTransition


class JobState(enum.IntEnum):
    """The eight job states, numbered in the order of the ``awa.job_state`` SQL enum.

    ``str()`` gives the snake_case name used in SQL and JSON.
    """

    Scheduled = 0
    Available = 1
    Running = 2
    Completed = 3
    Retryable = 4
    Failed = 5
    Cancelled = 6
    WaitingExternal = 7

    def __str__(self) -> str:
        return _SQL_NAMES[self]

    def __repr__(self) -> str:
        return f"JobState.{self.name}"

    @property
    def sql_name(self) -> str:
        """The ``awa.job_state`` enum label."""
        return _SQL_NAMES[self]

    @classmethod
    def parse(cls, value: str | int | JobState) -> JobState:
        """Accept a ``JobState``, its int value, its snake_case label or its member name."""
        if isinstance(value, JobState):
            return value
        if isinstance(value, int):
            return cls(value)
        state = _BY_LABEL.get(value)
        if state is None:
            state = _BY_LABEL.get(value.strip())
        if state is None:
            raise ValueError(f"unknown job state: {value!r}")
        return state

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES

    @property
    def is_live_attempt(self) -> bool:
        """A claimed attempt exists (it holds a run lease)."""
        return self in LIVE_STATES


_SQL_NAMES: dict[JobState, str] = {
    JobState.Scheduled: "scheduled",
    JobState.Available: "available",
    JobState.Running: "running",
    JobState.Completed: "completed",
    JobState.Retryable: "retryable",
    JobState.Failed: "failed",
    JobState.Cancelled: "cancelled",
    JobState.WaitingExternal: "waiting_external",
}
#: Every spelling ``JobState.parse`` accepts: the SQL label and the member name.
_BY_LABEL: dict[str, JobState] = {
    **{label: state for state, label in _SQL_NAMES.items()},
    **{state.name: state for state in JobState},
}

TERMINAL_STATES = frozenset({JobState.Completed, JobState.Failed, JobState.Cancelled})
#: The states of a job whose claimed attempt is still open (it holds a run lease).
LIVE_STATES = frozenset({JobState.Running, JobState.WaitingExternal})
DEFERRED_STATES = frozenset({JobState.Scheduled, JobState.Retryable})
PENDING_STATES = frozenset(
    {JobState.Scheduled, JobState.Available, JobState.Retryable, JobState.WaitingExternal}
)

S = JobState

#: Every legal change of state. Anything else is refused by :func:`check_transition`.
LEGAL_TRANSITIONS: frozenset[tuple[JobState, JobState]] = frozenset(
    {
        # promotion of the deferred backlog
        (S.Scheduled, S.Available),
        (S.Retryable, S.Available),
        # claim
        (S.Available, S.Running),
        # handler outcomes and rescue
        (S.Running, S.Completed),
        (S.Running, S.Retryable),
        (S.Running, S.Scheduled),  # snooze
        (S.Running, S.Failed),
        (S.Running, S.Cancelled),
        (S.Running, S.WaitingExternal),
        # external callbacks
        (S.WaitingExternal, S.Running),  # resume
        (S.WaitingExternal, S.Completed),
        (S.WaitingExternal, S.Retryable),
        (S.WaitingExternal, S.Failed),
        (S.WaitingExternal, S.Cancelled),
        # retry_external, and an operator retry of a waiting attempt: a fresh start
        (S.WaitingExternal, S.Available),
        (S.Running, S.Available),
        # operator cancel / drain of pending work
        (S.Scheduled, S.Cancelled),
        (S.Available, S.Cancelled),
        (S.Retryable, S.Cancelled),
        # operator retry
        (S.Scheduled, S.Available),
        (S.Failed, S.Available),
        (S.Cancelled, S.Available),
        (S.Completed, S.Available),
        # operator repair
        (S.Available, S.Scheduled),
        # a waiting job whose parent failed, under the ``dlq`` policy (ADR 0032)
        (S.Scheduled, S.Failed),
        # ... and back to waiting when the failed parent is retried
        (S.Cancelled, S.Scheduled),
    }
)


def is_legal_transition(old: JobState, new: JobState) -> bool:
    return (old, new) in LEGAL_TRANSITIONS


def check_transition(old: JobState, new: JobState) -> None:
    """Raise :class:`IllegalTransition` unless ``old -> new`` is in the table."""
    if (old, new) not in LEGAL_TRANSITIONS:
        raise IllegalTransition(old=str(old), new=str(new))


# ---- unique-state masks (bit i = JobState(i)) ----

DEFAULT_UNIQUE_STATES = 0b0001_1111  # scheduled, available, running, completed, retryable


def states_to_mask(states: set[JobState] | frozenset[JobState]) -> int:
    mask = 0
    for state in states:
        mask |= 1 << int(state)
    return mask


def mask_to_states(mask: int) -> frozenset[JobState]:
    if not 0 <= mask <= 0xFF:
        raise ValueError(f"unique state mask must fit in 8 bits, got {mask}")
    return frozenset(s for s in JobState if mask & (1 << int(s)))


def mask_contains(mask: int, state: JobState) -> bool:
    return bool(mask & (1 << int(state)))


def mask_to_bitstring(mask: int) -> str:
    """Render a mask as the SQL ``bit(8)`` literal used by ``awa.job_unique_claims``.

    Bit position 0 of the SQL string is the scheduled state, so the string reads
    left-to-right in ``JobState`` order.
    """
    return "".join("1" if mask & (1 << i) else "0" for i in range(8))


@functools.lru_cache(maxsize=512)
def bitstring_to_mask(bits: str) -> int:
    if len(bits) != 8 or set(bits) - {"0", "1"}:
        raise ValueError(f"expected an 8-character bit string, got {bits!r}")
    return sum(1 << i for i, ch in enumerate(bits) if ch == "1")
