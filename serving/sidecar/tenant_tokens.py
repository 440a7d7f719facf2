"""Tenant tokens: bearer tokens of the sidecar's API that speak for some tenants only.

The config's ``tenant_tokens:`` section lists entries of ``tenants`` and ``token_env``, the
name of the environment variable holding that entry's secret: secrets are never written in
YAML. :func:`read_tenant_tokens` reads them at start-up (``kvcast serve sidecar``, where the
shared token is read from ``KVCAST_TOKEN``: validating a config never reads the environment,
so a config with tenant tokens validates the same anywhere) and refuses what would weaken the
API: a variable unset or blank, two entries with the same token (neither could be told from
the other), a tenant token equal to the shared token (it would have every right), and tenant
tokens without a shared token (nothing would then guard the routes they may not use: KV
events, mode, model). Errors name the entry and its variable, never a secret.

An entry may cap the arrivals its token posts (``max_arrivals_per_s``, bursts up to
``burst_arrivals``; :mod:`.arrival_rates`), so that one tenant's router cannot fill the
shared ingestion queue; unset, it is unlimited. The shared token never is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated

from pydantic import Field, model_validator

from kvcast.config import FiniteConfig
from kvcast.serving.agent.api_models import Tenant

EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=256)]
BURST_SECONDS = 2.0  # burst_arrivals left unset: this many seconds of arrivals at the rate


class TenantTokenConfig(FiniteConfig):
    """One tenant token: the tenants it speaks for, the variable that holds it, the arrivals
    per second it may post (None: unlimited) and its share of the ingestion queue."""

    tenants: tuple[Tenant, ...] = Field(min_length=1)
    token_env: EnvName
    max_arrivals_per_s: float | None = Field(None, gt=0, le=1e9)
    burst_arrivals: int | None = Field(None, ge=1, le=10**12)  # None: BURST_SECONDS at the rate
    # the most of the ingestion queue (queue_events) its arrivals may hold at once
    max_queue_share: float = Field(0.5, gt=0, le=1)

    @model_validator(mode="after")
    def _consistent(self) -> TenantTokenConfig:
        twice = sorted({t for t in self.tenants if self.tenants.count(t) > 1})
        if twice:
            raise ValueError(f"tenants named twice: {twice}")
        if self.burst_arrivals is not None and self.max_arrivals_per_s is None:
            raise ValueError("burst_arrivals needs max_arrivals_per_s (without it the token "
                             "is unlimited)")  # fmt: skip
        return self

    @property
    def burst(self) -> int | None:
        """The most arrivals posted at once (None: unlimited): ``burst_arrivals``, else
        ``BURST_SECONDS`` of arrivals at ``max_arrivals_per_s``, at least one."""
        if self.max_arrivals_per_s is None:
            return None
        if self.burst_arrivals is not None:
            return self.burst_arrivals
        return max(1, math.ceil(BURST_SECONDS * self.max_arrivals_per_s))


def read_tenant_tokens(
    entries: Sequence[TenantTokenConfig], shared: str | None, environ: Mapping[str, str]
) -> dict[str, frozenset[str]]:
    """token -> the tenants it speaks for, in the entries' order, read from ``environ``; a
    ValueError naming the entry (``tenant_tokens[i]``) and its variable when one is missing,
    blank or not unique."""
    if not entries:
        return {}
    if shared is None:
        raise ValueError(
            "tenant_tokens need a shared token (token:, or KVCAST_TOKEN / --token-env): it is "
            "what guards the routes a tenant token may not use (KV events, mode, model)"
        )
    out: dict[str, frozenset[str]] = {}
    owner: dict[str, str] = {}  # token -> the entry that has it
    for i, entry in enumerate(entries):
        where = f"tenant_tokens[{i}] ({entry.token_env})"
        value = environ.get(entry.token_env)
        if value is None:
            raise ValueError(f"tenant_tokens[{i}]: its token_env {entry.token_env} is not set")
        if not value.strip():
            raise ValueError(f"tenant_tokens[{i}]: its token_env {entry.token_env} is empty")
        if value == shared:
            raise ValueError(f"{where}: its token is the shared token; a tenant token must be "
                             "a secret of its own")  # fmt: skip
        if (other := owner.setdefault(value, where)) != where:
            raise ValueError(f"{other} and {where} have the same token: give each its own")
        out[value] = frozenset(entry.tenants)
    return out
