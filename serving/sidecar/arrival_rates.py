"""Arrivals per second per tenant token: a token bucket per ``tenant_tokens`` entry that sets
``max_arrivals_per_s``, so that one tenant's router cannot fill the shared ingestion queue
and push other tenants' events out of it.

Counted in arrivals, not requests: a batch of N arrivals takes N tokens, whole or not at all.
A batch that does not fit is refused (429, ``Retry-After``: the seconds until it would fit,
rounded up), nothing ingested; one larger than the entry's burst never fits, and is refused
with 400 asking the client to split it. Refused batches take nothing. The shared token and
entries without a rate are never limited. Buckets start full, on a monotonic clock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from fastapi import HTTPException

from kvcast.serving.http.auth import Identity
from kvcast.serving.http.tenant_tokens import rate_buckets
from kvcast.serving.sidecar.tenant_tokens import TenantTokenConfig


class ArrivalRates:
    """The bucket of each rate-limited entry, by its position in ``tenant_tokens``."""

    def __init__(
        self, entries: Sequence[TenantTokenConfig], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.buckets = rate_buckets(((e.max_arrivals_per_s, e.burst) for e in entries), clock)

    def oversize(self, who: Identity, arrivals: int) -> HTTPException | None:
        """The 400 for a batch larger than ``who``'s burst (it never fits; checked before any
        other limit, so that the client learns at once to split it), else None."""
        bucket = None if who.token is None else self.buckets.get(who.token)
        if bucket is None or arrivals <= bucket.burst:
            return None
        rate, burst = f"{bucket.rate:g} arrivals/s", int(bucket.burst)
        return HTTPException(
            400, f"a batch of {arrivals} arrivals is over this token's burst of {burst} "
            f"({rate}): it never fits; split it into batches of at most {burst}; nothing "
            "was taken",
        )  # fmt: skip

    def admit(self, who: Identity, arrivals: int) -> HTTPException | None:
        """Take ``arrivals`` from ``who``'s bucket; else the refusal to answer (429 with
        ``Retry-After``, or 400 for a batch over the burst), having taken nothing. None when
        taken, or ``who`` is not limited."""
        bucket = None if who.token is None else self.buckets.get(who.token)
        if bucket is None:
            return None
        wait_s = bucket.try_take(arrivals)
        if wait_s == 0.0:
            return None
        if math.isinf(wait_s):
            return self.oversize(who, arrivals)
        rate, burst = f"{bucket.rate:g} arrivals/s", int(bucket.burst)
        retry_s = max(1, math.ceil(wait_s))
        return HTTPException(
            429, f"this token's rate limit ({rate}, bursts of {burst}) is spent: the batch of "
            f"{arrivals} arrivals fits in {wait_s:.3g} s; nothing was taken",
            headers={"Retry-After": str(retry_s)},
        )  # fmt: skip
