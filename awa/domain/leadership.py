"""The maintenance leader's lease: what an answer from the lease store means and when a
holder may act, renew or try again. Pure: times are passed in (seconds on the caller's
monotonic clock); see ADR 0014."""

from __future__ import annotations

import attrs

from awa.domain.errors import ValidationError

#: How long a lease lasts after each renewal unless ``leader_lease_ttl_ms`` says otherwise.
DEFAULT_LEASE_TTL = 6.0
#: A holder renews once this share of the lease has passed since its last renewal.
RENEW_FRACTION = 1 / 3
#: A follower tries again this long after the holder's lease was due to end (the round
#: trip and scheduling slack of the follower's own wake-up).
RETRY_SLACK = 0.05
#: The shortest lease accepted: a renewal needs a few round trips to spare.
MIN_LEASE_TTL = 0.2


class LeaseLapsed(Exception):
    """The holder's lease ran out before its next action: it steps down instead."""


@attrs.frozen
class Lease:
    """One answer of the lease store.

    ``held``: the asking candidate holds the lease now (taken or renewed). ``expires_in``:
    seconds until the lease ends, counted on the store's clock when it answered: for the
    holder the full ttl; for a follower, the current holder's remaining time (0 when the
    lease is free, which makes the next try immediate). ``term`` counts how often the lease
    changed hands (a fencing token: a new holder always has a larger one); ``holder``
    names who holds it (``None`` when nobody does)."""

    held: bool
    expires_in: float
    term: int = 0
    holder: str | None = None


def validate_lease_ttl(seconds: float) -> float:
    """The lease ttl, refused below :data:`MIN_LEASE_TTL`."""
    if seconds < MIN_LEASE_TTL:
        raise ValidationError(
            "leader_lease_ttl_ms",
            f"must be at least {int(MIN_LEASE_TTL * 1000)} ms (a renewal needs round trips "
            f"to spare), got {int(seconds * 1000)}",
            value=seconds,
        )
    return seconds


@attrs.frozen
class LeasePolicy:
    """When a holder may act, must renew, and when a follower tries again."""

    ttl: float = DEFAULT_LEASE_TTL

    @property
    def renew_every(self) -> float:
        """How long after a renewal the holder renews again."""
        return self.ttl * RENEW_FRACTION

    def valid_until(self, asked_at: float, lease: Lease) -> float | None:
        """Until when (caller's clock) a holder may act on ``lease``, asked for at
        ``asked_at``: counted from before the request left, so the holder stops no later
        than the store lets anyone else take over. ``None`` when not held."""
        if not lease.held:
            return None
        return asked_at + min(lease.expires_in, self.ttl)

    def may_act(self, now: float, valid_until: float | None) -> bool:
        """Whether a holder may start a maintenance action now."""
        return valid_until is not None and now < valid_until

    def retry_in(self, lease: Lease, election_interval: float) -> float:
        """How long a follower waits before trying again: until just after the holder's
        lease would end, and never longer than ``election_interval``."""
        return min(election_interval, max(0.0, lease.expires_in) + RETRY_SLACK)

    def takeover_bound(self, election_interval: float) -> float:
        """The longest time from a holder's stop to a follower's takeover (one ttl after
        its last renewal, plus the follower's wake-up slack)."""
        return self.ttl + min(election_interval, RETRY_SLACK)
