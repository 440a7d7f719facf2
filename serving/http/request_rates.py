"""Requests per second per tenant token on an HTTP API: ASGI middleware with a token bucket
per rate-limited token, so that one tenant's client cannot take a service's event loop from
the others (an agent's also serves the transfers every tenant's replicas ride on).

It sits inside :class:`~kvcast.serving.http.auth.BearerTokenGuard` and reads the identity
the guard admitted: a request of a tenant token whose bucket is spent is refused with 429 and
``Retry-After`` (the seconds until one request fits, rounded up) before its body is read, and
counted (``on_limited(path)``). The shared token, unguarded routes and tokens without a rate
are never limited. Buckets start full, on a monotonic clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from starlette.types import ASGIApp, Receive, Scope, Send

from kvcast.serving.http.auth import IDENTITY, refuse
from kvcast.serving.token_bucket import TokenBucket


class TenantRequestRates:
    """``buckets``: tenant token (its position, as ``Identity.token``) -> its bucket, in
    requests."""

    def __init__(
        self,
        app: ASGIApp,
        buckets: Mapping[int, TokenBucket],
        on_limited: Callable[[str], None] = lambda path: None,
    ) -> None:
        self.app, self.buckets, self.on_limited = app, dict(buckets), on_limited

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.buckets:
            who = scope.get("state", {}).get(IDENTITY)
            bucket = None if who is None or who.token is None else self.buckets.get(who.token)
            if bucket is not None and (wait_s := bucket.try_take(1)) > 0.0:
                self.on_limited(scope["path"])
                rate, burst = f"{bucket.rate:g} requests/s", int(bucket.burst)
                retry = str(max(1, math.ceil(wait_s)))
                detail = (f"this token's rate limit ({rate}, bursts of {burst}) is spent: the "
                          f"next request fits in {wait_s:.3g} s; nothing was done")  # fmt: skip
                await refuse(send, 429, detail, [(b"retry-after", retry.encode())])
                return
        await self.app(scope, receive, send)
