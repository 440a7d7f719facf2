"""What a tenant token may post and see on the sidecar's API.

The guard (:class:`~kvcast.serving.http.auth.BearerTokenGuard`) lets a tenant token reach
:data:`TENANT_ROUTES` only; the handlers narrow those to its tenants with the functions here
(the shared token keeps every right: each is the identity for it; so is each for the ingest
token, which speaks for every tenant, on the one of these routes the guard lets it reach:
``POST /v1/requests``):

- arrivals (``POST /v1/requests``): a batch is taken only when every arrival's tenant is one
  of the token's; else it is refused whole (403 naming the first other tenant), nothing
  ingested. A batch carrying ``queue_depth`` is refused whole too (403 naming the field): a
  node's queue is a node-level fact that steers replication for every tenant, for the shared
  token or the ingest token (the router's) alone to report. A ``ts_ms`` later than the
  sidecar's clock is taken as the time received (:func:`~.translate.arrival_events`): the
  stream is kept in order, so an arrival stamped ahead would move every tenant's later events
  ahead with it;
- decisions (``GET /v1/decisions``): those of its tenants' chains only (an eviction names no
  tenant: never shown); ``total`` counts its tenants' decisions among those kept;
- a block's locations (``GET /v1/blocks/{hash}``): the block is its tenants' when an arrival
  of one of them named it (as :class:`~.block_tenants.BlockTenants` remembers, by exact
  tenant name: the most recently named ``max_tracked_blocks`` blocks, within the features'
  horizon; a forgotten block is a 404 until its tenants name it again) or this sidecar
  placed a replica of it for one of them; then its GPU and lower-tier holders are
  shown as to the shared token (an engine's cache, and so its KV events, knows a hash, not a
  tenant), and its tenants' replicas only. Any other block is a 404, as an unknown one. A
  public prefix is no exception: *public* lets the decider copy a prefix to other tenants'
  nodes, it does not publish where other tenants' requests are cached; a tenant that uses
  the prefix sends it, and sees it from then on.
"""

from __future__ import annotations

from collections.abc import Iterable

from fastapi import HTTPException

from kvcast.serving.http.auth import Identity
from kvcast.serving.sidecar.api_models import ArrivalBatch
from kvcast.serving.sidecar.decisions import Decision
from kvcast.serving.sidecar.replicas import ReplicaTracker

TENANT_ROUTES = ("/v1/requests", "/v1/decisions", "/v1/blocks/{block_hash}")


def foreign_arrival(batch: ArrivalBatch, who: Identity) -> HTTPException | None:
    """The 403 for a batch with an arrival of a tenant ``who`` does not speak for (None:
    every arrival is its tenants')."""
    if who.tenants is None:  # the shared token: every tenant
        return None
    for i, arrival in enumerate(batch.requests):
        if arrival.tenant not in who.tenants:
            return HTTPException(
                403, f"body.requests.{i}.tenant: this token may not post arrivals of tenant "
                f"{arrival.tenant!r} (its tenants: {sorted(who.tenants)}); nothing was taken",
            )  # fmt: skip
    return None


def queue_report(batch: ArrivalBatch, who: Identity) -> HTTPException | None:
    """The 403 for a tenant token's batch that reports a node's queue depth (None: the
    shared token or the ingest token, or no arrival carries one)."""
    if who.all_tenants:
        return None
    for i, arrival in enumerate(batch.requests):
        if arrival.queue_depth is not None:
            return HTTPException(
                403, f"body.requests.{i}.queue_depth: a tenant token may not report a node's "
                "queue depth (it steers replication for every tenant): only the shared token "
                "or the ingest token may; leave it out; nothing was taken",
            )  # fmt: skip
    return None


def own_decisions(kept: Iterable[Decision], who: Identity) -> list[Decision]:
    """Those of ``kept`` of chains of ``who``'s tenants, in order."""
    return [d for d in kept if who.speaks_for(d.tenant)] if not who.all_tenants else list(kept)


def own_replicas(replicas: ReplicaTracker, block: int, who: Identity) -> list[int]:
    """The nodes holding a live replica of ``block`` placed for one of ``who``'s tenants."""
    nodes = replicas.nodes_of(block)
    if who.all_tenants:
        return nodes
    return [n for n in nodes if who.speaks_for(replicas.tenant(n, block) or "")]
