"""A token bucket that caps the bytes per second moved over one link."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    """``rate`` bytes/s on average, bursts up to ``burst`` bytes.

    :meth:`consume` may take more tokens than are present (a received chunk cannot be
    refused); the debt is paid by waiting the returned delay before reading more.
    """

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

    def consume(self, nbytes: int) -> float:
        """Take ``nbytes`` tokens now; return the seconds to wait until the balance is >= 0."""
        self._refill()
        self._tokens -= nbytes
        return max(0.0, -self._tokens / self.rate)

    async def acquire(self, nbytes: int) -> None:
        """Take ``nbytes`` tokens, sleeping until the link's budget allows it."""
        delay = self.consume(nbytes)
        if delay > 0:
            await asyncio.sleep(delay)

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
