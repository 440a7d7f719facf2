"""The ingest token: the bearer token of the router and the engines, which report what
happened (arrivals, KV events, an engine's queue depth) and call no command.

Beside the shared token (every right: switch the sidecar's mode, load a model, replicate,
evict or pin blocks, pull them between agents) and the tenant tokens, a service may know one
ingest token (``--ingest-token-env``, ``KVCAST_INGEST_TOKEN`` by default). It speaks for
every tenant, as the shared token does, but :class:`~kvcast.serving.http.auth.BearerTokenGuard`
lets it reach only the routes of a service's ``INGEST_ROUTES`` (the sidecar's
``POST /v1/requests`` and ``POST /v1/kv-events``, an agent's ``POST /v1/engine-stats``);
every other guarded route answers it 403, and an agent's transfer port never knows it (a
``Hello`` with it is refused as an unknown token's). So a router or an engine whose token
leaks calls no command and reads no KV data; but the sidecar decides from its reports, so in
active mode invented arrivals and KV events steer what is replicated, held and evicted (as a
router's reports always did), and an arrival naming a tenant and a block lets that tenant's
token look the block up: it is the router's and the engines' token, no one else's.

:func:`check_ingest_token` refuses what would weaken a service: an ingest token without a
shared token (nothing would guard the routes it may not use), one equal to the shared token
or to a tenant token (it could not be told from it; compared as a bearer header carries
them, stripped), and one with leading or trailing
whitespace (a bearer header's token is read stripped, so it could pass for another). Its
errors name where each token came from (a variable, or a config key), never a secret.
"""

from __future__ import annotations

from collections.abc import Collection

from kvcast.serving.http.token_text import token_problem


def check_ingest_token(
    ingest: str | None,
    shared: str | None,
    tenant_tokens: Collection[str] = (),
    name: str = "the ingest token",
    shared_name: str = "the shared token",
) -> None:
    """A ValueError when ``ingest`` (None: none) may not stand beside ``shared`` (the shared
    token; None: none) and the ``tenant_tokens`` (their secrets); ``name`` and
    ``shared_name`` say where each comes from (``KVCAST_INGEST_TOKEN``, ``ingest_token``)."""
    if ingest is None:
        return
    if (problem := token_problem(ingest)) is not None:  # (blank ones first: "set but empty")
        raise ValueError(f"{name} {problem}")
    if shared is None:
        raise ValueError(
            f"{name} is set but {shared_name} is not: the ingest token needs a shared token, "
            "which guards every route it may not use"
        )
    if ingest == shared.strip():  # (a bearer header's token is read stripped)
        raise ValueError(
            f"{name} is the same as {shared_name}: the ingest token must be a secret of its "
            "own (it may only report; the shared token commands)"
        )
    if ingest in {t.strip() for t in tenant_tokens}:
        raise ValueError(
            f"{name} is the same as a tenant token: the ingest token must be a secret of its own"
        )
