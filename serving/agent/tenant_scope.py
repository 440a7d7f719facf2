"""What a tenant token may do on an agent's HTTP API.

A tenant token (the agent config's ``tenant_tokens:``) is the credential of a client that
works for some tenants only, such as a KV connector reading and writing its tenants' blocks
on this node. The guard (:class:`~kvcast.serving.http.auth.BearerTokenGuard`) lets it reach
:data:`TENANT_ROUTES` only; every other guarded route (replicate, pin, unpin, removals,
engine-stats, hold) needs the shared token, which the sidecar holds (403 otherwise): a
replication or a pin takes room from every tenant (an active block is never displaced), and so
does a hold (a held replica outlives its TTL and keeps its share of the speculative quota,
which every tenant's replicas share), the removals log names every tenant's blocks, and a
node's queue depth steers replication for all of them. The handlers narrow the routes it may
reach to its tenants with the functions here (the shared token keeps every right):

- evict, release: a command naming another tenant is refused whole (403 naming it), nothing
  done; its evictions are logged for the sidecar (``GET /v1/removals``,
  ``evicted_by_tenant``), which did not order them;
- ``PUT /v1/blocks``: a block of one of its tenants, cached (``active`` is the shared
  token's: 403), and within its entry's ``max_bytes`` when set (:func:`upload_cap`: the bytes
  its tenants' blocks take on the agent, replicas included, checked by the store as it puts
  the block; past it, 409, nothing stored), so that its uploads cannot push every other
  tenant's cached blocks and replicas out;
- inventory: its tenants' blocks only (a ``tenant`` filter naming another tenant is a 403).

Its command ids are its own: a ``command_id`` it sends is remembered apart from the shared
token's and other tokens' (:func:`command_scope`), in a small log of its own, so it can
neither replay, block nor push out a command of the sidecar's.

Its pulls over the transfer protocol are narrowed by the transfer server
(:mod:`~kvcast.serving.agent.tcp_server`): blocks of its tenants only.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import HTTPException

from kvcast.serving.agent.blocks import OverTenantCap
from kvcast.serving.agent.config import AgentTenantToken
from kvcast.serving.http.auth import Identity

TENANT_ROUTES = ("/v1/evict", "/v1/release", "/v1/inventory", "/v1/blocks")


class TenantRefused(HTTPException):
    """A tenant token's request refused by a handler, with the reason it is counted under
    (``kvcast_agent_http_tenant_refusals_total``, beside ``route``, counted by the guard):
    ``tenant`` (another tenant's blocks), ``state`` (an ``active`` upload)."""

    def __init__(self, detail: str, reason: str) -> None:
        super().__init__(403, detail)
        self.reason = reason


def check_tenant(tenant: str, who: Identity, where: str = "body.tenant") -> None:
    """Raise a 403 (naming ``where`` the tenant was read) unless ``who`` speaks for
    ``tenant``."""
    if not who.speaks_for(tenant):
        mine = sorted(who.tenants or ())
        raise TenantRefused(
            f"{where}: this token may not act on blocks of tenant {tenant!r} (its tenants: "
            f"{mine}); nothing was done", "tenant",
        )  # fmt: skip


def check_upload(tenant: str, state: str, who: Identity, where: str = "body.tenant") -> None:
    """Raise a 403 for an upload ``who`` may not make: a block of another tenant
    (:func:`check_tenant`), or an ``active`` one by a tenant token."""
    check_tenant(tenant, who, where)
    if state != "cached" and not who.all_tenants:
        raise TenantRefused(
            f"state: a tenant token may upload cached blocks only, not {state!r} (an "
            "active block is never evicted to make room, for any tenant: the shared token's); "
            "nothing was stored", "state",
        )  # fmt: skip


def upload_cap(
    who: Identity, entries: Sequence[AgentTenantToken]
) -> tuple[frozenset[str], int] | None:
    """The cap on ``who``'s uploads, as :meth:`~.block_store.BlockStore.put` takes it: its
    tenants and its entry's ``max_bytes`` (``entries``: the config's ``tenant_tokens``); None
    when it has none (the shared token never has)."""
    if who.token is None or who.tenants is None:
        return None
    cap = entries[who.token].max_bytes
    return None if cap is None else (who.tenants, cap)


def over_cap(err: OverTenantCap) -> HTTPException:
    """The 409 for an upload over its token's ``max_bytes`` (counted by the store:
    ``kvcast_agent_store_rejections_total{reason="tenant_cap"}``)."""
    return HTTPException(
        409, f"this token's tenants' blocks take {err.held} bytes on this agent; a new block "
        f"of {err.nbytes} would pass its max_bytes of {err.cap}; evict some first; nothing "
        "was stored",
    )  # fmt: skip


def visible_tenants(tenant: str | None, who: Identity) -> frozenset[str] | None:
    """The tenants an inventory shows to ``who`` (None: every tenant): ``tenant`` if given
    (a 403 if ``who`` does not speak for it), else ``who``'s tenants."""
    if tenant is not None:
        check_tenant(tenant, who, "query.tenant")
        return frozenset({tenant})
    return who.tenants


def command_scope(who: Identity) -> str:
    """The namespace of ``who``'s command ids: the shared token's, or one per tenant token."""
    return "" if who.all_tenants else f"tenant-token-{who.token}"
