"""The sidecar's HTTP API (FastAPI): ingestion, decisions, block locations, mode and model.

Every ``POST`` changes what the sidecar does (what it ingests, whether it acts, what it scores
with), so with a token configured every ``POST`` needs it; so do the lookups of where blocks
are (``GET /v1/blocks/{hash}``, ``GET /v1/decisions``: which tenant's chains went where, as an
agent's inventory says). The other ``GET`` routes (mode, model, probes, metrics) stay open for
operators, probes and scrapers (none returns block contents: the sidecar never holds any).
The shared token may do everything; a tenant token (the config's ``tenant_tokens``) only
posts its tenants' arrivals (without queue depths), at most its entry's rate of them
(:mod:`.arrival_rates`: 429) and its share of the ingestion queue (:mod:`.queue_shares`:
429), and sees its tenants' decisions and blocks
(:mod:`.tenant_scope`), and is refused every other guarded route (403). The ingest token
(the router's and the engines': ``KVCAST_INGEST_TOKEN``, :mod:`~kvcast.serving.http.ingest_token`)
reaches :data:`INGEST_ROUTES` only, posting any tenant's arrivals (queue depths included,
never rate- or share-limited) and KV events as the shared token does; every other guarded
route (mode, model, decisions, block lookups) is 403 to it, counted.
Ingestion handlers only validate and queue: they answer 202 as soon as the events are in the
bounded queue. Middleware, outer first: the token guards (401 before the body is read, 403
for a tenant token or the ingest token on another route), body size.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, FastAPI, HTTPException, Path, Query, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from starlette.responses import Response

from kvcast import __version__
from kvcast.features.spec import SpecMismatch
from kvcast.predictor.model_meta import HorizonMismatch
from kvcast.serving.http.auth import BearerTokenGuard, Who
from kvcast.serving.http.errors import error_responses, install_error_handlers
from kvcast.serving.http.limits import BodySizeLimit
from kvcast.serving.http.metrics import metrics_response
from kvcast.serving.sidecar.api_models import (
    Accepted,
    ArrivalBatch,
    BlockLocation,
    DecisionList,
    Health,
    KvEventBatch,
    ModeBody,
    ModelLoad,
    ModelState,
    ModeState,
    Readiness,
)
from kvcast.serving.sidecar.core import Sidecar
from kvcast.serving.sidecar.tenant_scope import (
    TENANT_ROUTES,
    foreign_arrival,
    own_decisions,
    own_replicas,
    queue_report,
)
from kvcast.serving.sidecar.tick_input import locate
from kvcast.serving.sidecar.translate import (
    arrival_events,
    block_hash_param,
    decision_out,
    invalid,
    kv_events,
)

MAX_BODY_BYTES = 16 << 20
GUARDED = ("/v1/requests", "/v1/kv-events", "/v1/mode", "/v1/model")  # their POSTs
INGEST_ROUTES = (("POST", "/v1/requests"), ("POST", "/v1/kv-events"))  # the ingest token's
LOOKUP_TIMEOUT_S = 5.0
bearer_scheme = HTTPBearer(
    auto_error=False,
    description="The shared token (KVCAST_TOKEN): every route. Or the ingest token "
    "(KVCAST_INGEST_TOKEN, the router's and the engines'): POST /v1/requests (any tenant's "
    "arrivals, queue_depth included, never rate-limited) and POST /v1/kv-events only; any "
    "other guarded route is 403. Or a tenant token (the config's "
    "tenant_tokens): POST /v1/requests with its tenants' arrivals only, without queue_depth "
    "(at most its entry's max_arrivals_per_s, and max_queue_share of the ingestion queue: else "
    "429 with Retry-After), and GET /v1/decisions "
    "and GET /v1/blocks/{block_hash} narrowed to its tenants; any other guarded route is 403.",
)


def _on(names: tuple[str, ...], mask: int) -> list[str]:
    return [n for i, n in enumerate(names) if (mask >> i) & 1]


def _model_state(sc: Sidecar) -> ModelState:
    slot, current = sc.slot, sc.slot.current
    base = {"spec_digest": slot.spec.digest, "loads": slot.loads, "refused": slot.refused}
    if current is None:
        return ModelState(loaded=False, **base)
    i = current.info
    return ModelState(
        loaded=True, source=i.source, kind=i.kind, version=i.version, digest=i.digest,
        loaded_at=i.loaded_at, registry_version=i.registry_version, **base,
    )  # fmt: skip


def _writes(sc: Sidecar) -> APIRouter:
    router = APIRouter(prefix="/v1", dependencies=[Security(bearer_scheme)])
    names = sc.cfg.node_names
    refusals = error_responses(401, 403, 411, 413, 422)
    arrival_refusals = error_responses(400, 401, 403, 411, 413, 422, 429)
    arrival_refusals[429]["headers"] = {"Retry-After": {
        "description": "seconds until the batch would fit the token's rate (rounded up), "
        "or 1 when the token's share of the ingestion queue is full",
        "schema": {"type": "integer", "minimum": 1},
    }}  # fmt: skip

    def accepted(n: int, dropped: int, duplicates: int = 0) -> Accepted:
        return Accepted(
            accepted=n, dropped=dropped, queue_depth=len(sc.queue), duplicates=duplicates
        )

    @router.post("/requests", status_code=202, responses=arrival_refusals)
    async def requests(body: ArrivalBatch, who: Who) -> Accepted:
        """Requests the router routed (one or more), queued for the feature state. A request
        id posted before for its tenant (a retried batch) is not counted again
        (``duplicates``). A tenant token may post its tenants' arrivals only: a batch with
        another tenant's, or with a ``queue_depth`` (a node's queue: the shared or ingest
        token's to report), is refused whole (403), nothing taken; its ``ts_ms`` later than the
        sidecar's clock is taken as the time received. A tenant token whose entry sets
        ``max_arrivals_per_s`` posts at most that many arrivals per second (bursts up to
        ``burst_arrivals``, counted in arrivals, retries included): a batch that does not fit
        is refused whole with 429 and ``Retry-After`` (seconds until it would fit), nothing
        taken; a batch over the burst never fits: 400, split it. A tenant token's arrivals
        waiting in the ingestion queue are at most its entry's ``max_queue_share`` of it: a
        batch that would pass that is refused whole with 429 (``Retry-After``: 1), one over
        the whole share with 400. A refused batch (403, 422, 429, 400) uses none of the rate.
        The shared token and the ingest token (the router's) are never limited, may post any
        tenant's arrivals and report queue depths."""
        if (refusal := foreign_arrival(body, who)) is not None:
            sc.tenant_refusals["tenant"] += 1
            raise refusal
        if (refusal := queue_report(body, who)) is not None:
            sc.tenant_refusals["queue_depth"] += 1
            raise refusal
        events, queues = arrival_events(body, names, sc.clock_ms(), ahead_ok=who.all_tenants)
        if (refusal := sc.arrival_rates.oversize(who, len(body.requests))) is not None:
            sc.tenant_refusals["burst"] += 1
            raise refusal
        seen = sc.seen_requests
        if who.token is not None:  # its share counts what it would queue: not its retries
            new = seen.unseen((e.tenant, e.request_id) for e in events)
            if (refusal := sc.queue_shares.admit(who, new)) is not None:
                sc.tenant_refusals["queue_share"] += 1
                raise refusal
        if (refusal := sc.arrival_rates.admit(who, len(body.requests))) is not None:
            sc.tenant_refusals["rate" if refusal.status_code == 429 else "burst"] += 1
            raise refusal
        for node, depth, ts_ms in queues:  # the shared or the ingest token's only
            sc.loads.note_router_queue(node, depth, ts_ms)
        if sc.block_tenants is not None:  # whose blocks a tenant token may look up
            sc.block_tenants.note(events)
        fresh = [e for e in events if seen.first_time((e.tenant, e.request_id), who.token)]
        sc.claim_routed(fresh)  # active mode: their nodes hold the replicas they count
        if sc.routes_log is not None:
            sc.routes_log.note(fresh)  # written by the next decision tick, off this path
        dropped = sc.queue.put(fresh, "http", who.token)  # a tenant token's share: counted
        return accepted(len(fresh), dropped, len(events) - len(fresh))

    @router.post("/kv-events", status_code=202, responses=refusals)
    async def kv(body: KvEventBatch) -> Accepted:
        """One engine's KV events (vLLM's BlockStored / BlockRemoved / AllBlocksCleared, with
        vLLM's field names), for engines that cannot publish over ZMQ (the shared token or the
        ingest token)."""
        events = kv_events(body, names, sc.clock_ms())
        return accepted(len(events), sc.queue.put(events, "http"))

    @router.post("/mode", responses=refusals)
    async def set_mode(body: ModeBody) -> ModeState:
        """Switch between ``shadow`` (decide and log) and ``active`` (also command agents)."""
        sc.set_mode(body.mode)
        return ModeState(mode=sc.mode)

    @router.post("/model", responses=error_responses(400, 401, 403, 409, 411, 413, 422))
    async def load_model(body: ModelLoad) -> ModelState:
        """Load a model (ONNX path or ``models:/name@alias``) and swap it in; events keep
        flowing meanwhile. 409 when its feature spec differs (the features are named) or it
        predicts within another horizon than the decider's window, 400 when it is not a
        usable kvcast model; either way the current model stays."""
        try:
            await asyncio.to_thread(sc.load_model, body.source)
        except (SpecMismatch, HorizonMismatch) as err:
            raise HTTPException(409, str(err)) from None
        except Exception as err:  # a bad file, a bad URI, an unreachable registry
            why = str(err)  # most name the source already
            named = why if why.startswith(body.source) else f"{body.source}: {why}"
            raise HTTPException(400, f"cannot load {named}") from None
        return _model_state(sc)

    return router


def _lookups(sc: Sidecar) -> APIRouter:
    router = APIRouter(dependencies=[Security(bearer_scheme)], responses=error_responses(401))
    names = sc.cfg.node_names

    @router.get("/v1/decisions")
    async def decisions(
        who: Who,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
        kind: Annotated[str | None, Query(pattern="^(replicate|promote|evict)$")] = None,
    ) -> DecisionList:
        """Recent decisions, newest first, with their cost terms and what became of them. To a
        tenant token, its tenants' only (no evictions: they name no tenant), and ``total``
        counts its tenants' decisions among those kept."""
        if who.all_tenants:
            items, total = sc.recent.latest(limit, kind), sc.recent.total
        else:
            own = own_decisions(sc.recent.latest(sc.cfg.recent_decisions), who)
            items = [d for d in own if kind is None or d.kind == kind][:limit]
            total = len(own)
        out = [decision_out(d, names) for d in items]
        return DecisionList(total=total, decisions=out)

    @router.get("/v1/blocks/{block_hash}", responses=error_responses(404, 422))
    async def block(
        block_hash: Annotated[str, Path(description="decimal u64, or hex bytes", max_length=130)],
        who: Who,
    ) -> BlockLocation:
        """Where a block lives: nodes holding it in GPU memory or lower tiers, and the nodes
        holding a replica this sidecar placed. 404 when no node holds it. To a tenant token,
        only a block an arrival of one of its tenants named (among the most recently named
        ``max_tracked_blocks``, within the features' horizon) or one of its tenants has a
        replica of (else 404, as unknown), and only its tenants' replicas."""
        try:
            h = block_hash_param(block_hash)
        except ValueError as err:
            raise invalid(("path", "block_hash"), str(err)) from None
        named = sc.block_tenants
        theirs = who.all_tenants or (named is not None and named.named_by(h, who.tenants or ()))
        replicas = own_replicas(sc.replicas, h, who)
        whose = "" if who.all_tenants else " for this token's tenants"
        unknown = HTTPException(404, f"block {h} is not known to be held by any node{whose}")
        if not (theirs or replicas):  # not this token's to see: the consumer is not asked
            raise unknown
        future = sc.keeper.ask(lambda k: locate(k, [h])[0])
        loc = await asyncio.wait_for(asyncio.wrap_future(future), LOOKUP_TIMEOUT_S)
        if not (loc.gpu or loc.lower or replicas):
            raise unknown
        return BlockLocation(
            block_hash=h, gpu=_on(names, loc.gpu), lower=_on(names, loc.lower),
            replicas=[names[i] for i in replicas],
        )  # fmt: skip

    return router


def _reads(sc: Sidecar) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/mode")
    async def get_mode() -> ModeState:
        return ModeState(mode=sc.mode)

    @router.get(
        "/v1/model", dependencies=[Security(bearer_scheme)], responses=error_responses(401, 403)
    )
    async def get_model() -> ModelState:
        """The model being served (its source: a path on this host or a registry URI): the
        shared token's when one is configured."""
        return _model_state(sc)

    @router.get("/healthz")
    async def healthz() -> Health:
        return Health(status="ok", sidecar_id=sc.cfg.sidecar_id)

    @router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
    async def readyz() -> JSONResponse:
        """200 when the consumer runs, a model is loaded, ticks are on time and every engine
        feed is alive; else 503 with the failing checks."""
        checks = sc.ready()
        ready = all(checks.values())
        body = Readiness(ready=ready, checks=checks)
        return JSONResponse(body.model_dump(), status_code=200 if ready else 503)

    @router.get("/metrics", response_class=Response)
    async def metrics() -> Response:
        """Prometheus text exposition."""
        return metrics_response(sc.registry)

    return router


def build_app(sc: Sidecar) -> FastAPI:
    app = FastAPI(
        title="kvcast router sidecar",
        version=__version__,
        description="Ingests the router's arrivals and the engines' KV events, scores blocks "
        "with the ONNX model, decides replications and (in active mode) commands the agents.",
    )
    install_error_handlers(app)
    app.include_router(_writes(sc))
    lookups = _lookups(sc)
    app.include_router(lookups)
    app.include_router(_reads(sc))
    app.add_middleware(BodySizeLimit, max_bytes=MAX_BODY_BYTES)

    def refused(path: str) -> None:
        sc.auth_failures += 1

    def forbidden(path: str) -> None:
        sc.tenant_refusals["route"] += 1

    def ingest_forbidden(path: str) -> None:
        sc.ingest_refusals += 1

    looked_up = {route.path for route in lookups.routes}  # type: ignore[attr-defined]
    # GET /v1/model too: its source is a path on this host or a registry URI
    for protected, methods in ((set(GUARDED), {"POST"}), (looked_up | {"/v1/model"}, None)):
        app.add_middleware(
            BearerTokenGuard, token=sc.cfg.token_value, protected=protected,
            on_refused=refused, methods=methods, tenant_tokens=sc.tenant_tokens,
            tenant_paths=TENANT_ROUTES, on_forbidden=forbidden,
            ingest_token=sc.cfg.ingest_token_value, ingest_routes=INGEST_ROUTES,
            on_ingest_forbidden=ingest_forbidden,
        )  # fmt: skip
    app.state.sidecar = sc
    return app
