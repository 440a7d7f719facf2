"""The sidecar's tenant tokens: what :mod:`kvcast.serving.http.tenant_tokens` reads (the
tenants each speaks for, its variable), plus the limits on the arrivals each may post.

An entry may cap the arrivals its token posts (``max_arrivals_per_s``, bursts up to
``burst_arrivals``; :mod:`.arrival_rates`), so that one tenant's router cannot fill the
shared ingestion queue; unset, it is unlimited. The shared token never is. Its share of the
ingestion queue is capped too (``max_queue_share``, :mod:`.queue_shares`).
"""

from __future__ import annotations

from pydantic import Field, model_validator

from kvcast.serving.http.tenant_tokens import TenantToken, burst_needs_rate, burst_of


class TenantTokenConfig(TenantToken):
    """One tenant token of the sidecar: the tenants it speaks for, the variable that holds it,
    the arrivals per second it may post (None: unlimited) and its share of the ingestion
    queue."""

    # at least one arrival in 1,000 s: a Retry-After stays a number of seconds
    max_arrivals_per_s: float | None = Field(None, ge=1e-3, le=1e9)
    burst_arrivals: int | None = Field(None, ge=1, le=10**12)  # None: BURST_SECONDS at the rate
    # the most of the ingestion queue (queue_events) its arrivals may hold at once
    max_queue_share: float = Field(0.5, gt=0, le=1)

    @model_validator(mode="after")
    def _burst_has_rate(self) -> TenantTokenConfig:
        burst_needs_rate(
            self.max_arrivals_per_s, self.burst_arrivals, "max_arrivals_per_s", "burst_arrivals"
        )
        return self

    @property
    def burst(self) -> int | None:
        """The most arrivals posted at once (None: unlimited): ``burst_arrivals``, else
        ``BURST_SECONDS`` of arrivals at ``max_arrivals_per_s``, at least one."""
        return burst_of(self.max_arrivals_per_s, self.burst_arrivals)
