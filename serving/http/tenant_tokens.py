"""Tenant tokens: bearer tokens that speak for some tenants only, beside the shared token.

The sidecar's API and the agents' (their HTTP routes and their transfer server) take them. A
config's ``tenant_tokens:`` section lists entries of ``tenants`` and ``token_env``, the name of
the environment variable holding that entry's secret: secrets are never written in YAML.
:func:`read_tenant_tokens` reads them at start-up (``kvcast serve sidecar`` / ``agent``, where
the shared token is read from ``KVCAST_TOKEN``: validating a config never reads the
environment, so a config with tenant tokens validates the same anywhere) and refuses what
would weaken the service: a variable unset or blank, a token with leading or trailing
whitespace (a bearer header's token is read stripped, so it could pass for another), two
entries with the same token (neither could be told from the other), a tenant token equal to
the shared token (it would have every right) or to the ingest token (:mod:`.ingest_token`:
it would reach the other's routes), a token longer than the service can carry
(``max_bytes``: an agent's must fit a transfer ``Hello``), and tenant tokens without a shared
token (nothing would then guard what they may not do). Errors name the entry and its
variable, never a secret. A ``token_env`` that is no variable's name (the secret itself,
pasted in) is refused by the config, naming the entry's tenants, never shown
(:mod:`.token_env`).
:func:`given_tenant_tokens` checks that the secrets a service is handed are its config's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Annotated

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from kvcast.config import FiniteConfig
from kvcast.serving.http.token_env import NOT_A_NAME, is_env_name
from kvcast.serving.http.token_text import token_problem
from kvcast.serving.token_bucket import TokenBucket

# a tenant's name, as every API takes it: printable, 1-256 characters
Tenant = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")]
BURST_SECONDS = 2.0  # a burst left unset: this many seconds at the rate
TenantTokens = Mapping[str, frozenset[str]]  # secret -> the tenants it speaks for


class TenantToken(FiniteConfig):
    """One tenant token: the tenants it speaks for and the variable that holds it."""

    # a validation error's text never shows a value (token_env may be the secret, pasted in)
    model_config = ConfigDict(hide_input_in_errors=True)

    tenants: tuple[Tenant, ...] = Field(min_length=1)
    token_env: str

    @field_validator("token_env")
    @classmethod
    def _names_a_variable(cls, name: str, info: ValidationInfo) -> str:
        """A ValueError naming the entry's tenants, never ``name``, when it is not a
        variable's name (:func:`~kvcast.serving.http.token_env.is_env_name`)."""
        if not is_env_name(name):
            tenants = info.data.get("tenants")  # (absent when they were refused)
            entry = f"the entry for tenants {list(tenants)}" if tenants else "the entry"
            raise ValueError(f"{entry}: its token_env {NOT_A_NAME}")
        return name

    @model_validator(mode="after")
    def _tenants_once(self) -> TenantToken:
        twice = sorted({t for t in self.tenants if self.tenants.count(t) > 1})
        if twice:
            raise ValueError(f"tenants named twice: {twice}")
        return self


def burst_needs_rate(rate: float | None, burst: int | None, rate_key: str, burst_key: str) -> None:
    """A ValueError naming both keys for a burst set without its rate."""
    if burst is not None and rate is None:
        raise ValueError(f"{burst_key} needs {rate_key} (without it the token is unlimited)")


def rate_buckets(
    limits: Iterable[tuple[float | None, int | None]], clock: Callable[[], float] = time.monotonic
) -> dict[int, TokenBucket]:
    """Per tenant token (its position, as ``Identity.token``) with a rate, a bucket of its
    (rate, burst) from ``limits``, in the tokens' order; tokens without a rate have none."""
    return {
        i: TokenBucket(rate, burst, clock)
        for i, (rate, burst) in enumerate(limits)
        if rate is not None and burst is not None
    }


def burst_of(rate: float | None, burst: int | None) -> int | None:
    """The most a rate-limited token may take at once: ``burst``, else ``BURST_SECONDS`` at
    ``rate``, at least one (None: no rate, unlimited)."""
    if rate is None:
        return None
    return burst if burst is not None else max(1, math.ceil(BURST_SECONDS * rate))


def read_tenant_tokens(
    entries: Sequence[TenantToken],
    shared: str | None,
    environ: Mapping[str, str],
    max_bytes: int | None = None,
    ingest: str | None = None,
) -> dict[str, frozenset[str]]:
    """token -> the tenants it speaks for, in the entries' order, read from ``environ``; a
    ValueError naming the entry (``tenant_tokens[i]``) and its variable when one is missing,
    blank, not unique, the shared token or the ``ingest`` token, or over ``max_bytes`` in
    UTF-8."""
    if not entries:
        return {}
    if shared is None:
        raise ValueError(
            "tenant_tokens need a shared token (token:, or KVCAST_TOKEN / --token-env): it is "
            "what guards everything a tenant token may not do"
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
        if (problem := token_problem(value)) is not None:
            raise ValueError(f"{where}: its token {problem}")
        if value == shared:
            raise ValueError(f"{where}: its token is the shared token; a tenant token must be "
                             "a secret of its own")  # fmt: skip
        if value == ingest:
            raise ValueError(f"{where}: its token is the ingest token; a tenant token must be "
                             "a secret of its own")  # fmt: skip
        if max_bytes is not None and (n := len(value.encode())) > max_bytes:
            raise ValueError(f"{where}: its token is {n} bytes (UTF-8), over {max_bytes}")
        if (other := owner.setdefault(value, where)) != where:
            raise ValueError(f"{other} and {where} have the same token: give each its own")
        out[value] = frozenset(entry.tenants)
    return out


def given_tenant_tokens(
    given: TenantTokens | None, entries: Sequence[TenantToken]
) -> dict[str, frozenset[str]]:
    """``given`` (secret -> tenants) as a dict, checked to be one per entry of ``entries``, in
    their order, with their tenants (a ValueError otherwise): what a service is handed must be
    what its config says it has."""
    out = dict(given or {})
    if list(out.values()) != [frozenset(e.tenants) for e in entries]:
        raise ValueError(
            f"the tenant tokens given ({len(out)}) do not match the config's {len(entries)} "
            "tenant_tokens entries: one per entry, in its order, with its tenants "
            "(read_tenant_tokens reads them)"
        )
    return out
