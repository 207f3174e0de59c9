"""Per-queue token bucket gating how many jobs a dispatcher may claim."""

from __future__ import annotations

from collections.abc import Callable


class TokenBucket:
    """``rate`` tokens per second, holding at most ``burst``; starts full.

    One token is one claimed job. Tokens taken for a claim that returned fewer jobs are
    refunded, so an idle queue does not burn its budget.
    """

    def __init__(self, rate: float, burst: int, *, monotonic: Callable[[], float]) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._monotonic = monotonic
        self._tokens = float(burst)
        self._stamp = monotonic()

    def _refill(self) -> None:
        now = self._monotonic()
        elapsed = max(0.0, now - self._stamp)
        self._stamp = now
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.rate)

    @property
    def tokens(self) -> float:
        self._refill()
        return self._tokens

    def take(self, wanted: int) -> int:
        """Take up to ``wanted`` whole tokens; returns how many were granted."""
        self._refill()
        granted = max(0, min(wanted, int(self._tokens)))
        self._tokens -= granted
        return granted

    def retune(self, rate: float, burst: int) -> None:
        """Change the rate and the burst from now on; tokens already earned are kept up
        to the new burst."""
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self._refill()
        self.rate = rate
        self.burst = burst
        self._tokens = min(float(burst), self._tokens)

    def refund(self, count: int) -> None:
        if count > 0:
            self._tokens = min(float(self.burst), self._tokens + count)

    def seconds_until_token(self) -> float:
        """How long until at least one whole token is available."""
        self._refill()
        missing = 1.0 - self._tokens
        return 0.0 if missing <= 0 else missing / self.rate
