"""A token bucket: a rate on average, bursts up to a cap, on a monotonic clock.

Two kinds of user: one that cannot refuse what arrives (an agent's link, in bytes: a
received chunk is taken with :meth:`TokenBucket.consume`, which may run into debt, and the
reader waits the debt off) and one that refuses what does not fit (the sidecar's arrivals
per tenant token: :meth:`TokenBucket.try_take` takes a batch whole or not at all, and says
how long until it would fit).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class TokenBucket:
    """``rate`` tokens/s on average, bursts up to ``burst`` tokens; full at creation."""

    def __init__(
        self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError("rate and burst must be > 0")
        self.rate, self.burst, self._clock = float(rate), float(burst), clock
        self._tokens, self._stamp = float(burst), clock()

    @property
    def tokens(self) -> float:
        self._refill()
        return self._tokens

    def consume(self, n: float) -> float:
        """Take ``n`` tokens now, into debt if need be; return the seconds to wait until the
        balance is >= 0."""
        self._refill()
        self._tokens -= n
        return max(0.0, -self._tokens / self.rate)

    def try_take(self, n: float) -> float:
        """Take ``n`` tokens if the bucket holds them (return 0.0); else take none and return
        the seconds until it would (``inf`` when ``n`` is over the burst: never)."""
        self._refill()
        if n > self.burst:
            return math.inf
        if n <= self._tokens:
            self._tokens -= n
            return 0.0
        return (n - self._tokens) / self.rate

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + max(now - self._stamp, 0.0) * self.rate)
        self._stamp = now
