"""The agent's HTTP control API (FastAPI) for the router sidecar.

Routes that move, store, delete, pin or hold data, or list what is held or was (replicate,
PUT blocks, evict, pin, unpin, hold, release, inventory, removals, engine-stats), require the
shared token when one is configured, or for some of them a tenant token, on its tenants'
blocks only (:mod:`.tenant_scope`); health, readiness, telemetry and metrics stay open. The
ingest token (the engines': ``KVCAST_INGEST_TOKEN``, :mod:`~kvcast.serving.http.ingest_token`)
reaches :data:`INGEST_ROUTES` only (an engine reporting its queue depth); every other guarded
route is 403 to it, counted, and the transfer server never knows it (a pull with it is
refused as an unknown token's). No route returns block contents. Handlers are ``async``: they
run on the event loop that owns the block store.
Middleware, outer first: command counting by status, the token guard (401 before the body is
read, 403 for a tenant token or the ingest token on another route), each tenant token's
request rate (429), body size.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query, Request, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from starlette.responses import Response

from kvcast import __version__
from kvcast.serving.agent.agent_metrics import COMMAND_PATHS, agent_families
from kvcast.serving.agent.api_models import (
    BlockEntry,
    BlockRefs,
    EngineStats,
    EvictResult,
    Health,
    HoldRequest,
    HoldResult,
    Inventory,
    PinResult,
    Readiness,
    ReleaseRequest,
    ReleaseResult,
    Removals,
    ReplicateRequest,
    ReplicateResult,
    Telemetry,
    Tenant,
)
from kvcast.serving.agent.block_upload import OPENAPI, put_block, upload_limit
from kvcast.serving.agent.control import AgentControl, CommandConflict
from kvcast.serving.agent.tenant_scope import (
    TENANT_ROUTES,
    TenantRefused,
    check_tenant,
    command_scope,
    visible_tenants,
)
from kvcast.serving.http.auth import BearerTokenGuard, Who
from kvcast.serving.http.errors import error_responses, http_error_handler, install_error_handlers
from kvcast.serving.http.limits import BodySizeLimit
from kvcast.serving.http.metrics import StatusCounter, live_registry, metrics_response
from kvcast.serving.http.request_rates import TenantRequestRates
from kvcast.serving.http.tenant_tokens import TenantTokens, rate_buckets

MAX_BODY_BYTES = 4 << 20  # a replicate of 8192 hex hashes of 64 bytes is about 1.1 MB
BODY_REFUSALS = (411, 413)  # no Content-Length; body over MAX_BODY_BYTES
INGEST_ROUTES = (("POST", "/v1/engine-stats"),)  # the ingest token's
bearer_scheme = HTTPBearer(
    auto_error=False,
    description="The shared token (KVCAST_TOKEN): every route. Or the ingest token "
    "(KVCAST_INGEST_TOKEN, the engines'): POST /v1/engine-stats only; any other guarded route "
    "is 403 (and it pulls nothing over the transfer port). Or a tenant token (the config's "
    "tenant_tokens): POST /v1/evict and /v1/release, PUT /v1/blocks (cached blocks, within its "
    "max_bytes: else 409) for its tenants' blocks only, and GET /v1/inventory narrowed to its "
    "tenants; any other guarded route, or another tenant's blocks, is 403; over its "
    "max_requests_per_s, 429 with Retry-After.",
)


def _refusals() -> dict[int | str, dict[str, Any]]:
    """What every guarded route may answer besides its own refusals: 401 (no known token),
    403 (a tenant token or the ingest token: a route it may not use), 429 (a tenant token
    over its rate), 422."""
    out = error_responses(401, 403, 422, 429)
    out[429]["headers"] = {"Retry-After": {
        "description": "seconds until the token's rate admits a request (rounded up)",
        "schema": {"type": "integer", "minimum": 1},
    }}  # fmt: skip
    return out


def _guarded_routes(control: AgentControl) -> APIRouter:
    router = APIRouter(prefix="/v1", dependencies=[Security(bearer_scheme)], responses=_refusals())

    @router.post("/replicate", responses=error_responses(409, *BODY_REFUSALS))
    async def replicate(body: ReplicateRequest) -> ReplicateResult:
        """Pull blocks from a peer agent (verified, then stored); idempotent by command id
        (409 when the id was used for a different command).
        Answers when the pull is over: read ``status`` (ok, partial, failed, refused,
        deadline_exceeded) and the per-block lists."""
        return await control.replicate(body)

    @router.post("/evict", responses=error_responses(403, 409, *BODY_REFUSALS))
    async def evict(body: BlockRefs, who: Who) -> EvictResult:
        """Remove blocks of one tenant; active (pinned) blocks are refused and listed.
        A ``command_id`` (optional) makes a retry a no-op, as for pin and unpin."""
        check_tenant(body.tenant, who)
        return await control.evict(body, command_scope(who))

    @router.post("/pin", responses=error_responses(409, *BODY_REFUSALS))
    async def pin(body: BlockRefs) -> PinResult:
        """Mark blocks of one tenant active: never evicted until unpinned."""
        return await control.pin(body, pin=True)

    @router.post("/unpin", responses=error_responses(409, *BODY_REFUSALS))
    async def unpin(body: BlockRefs) -> PinResult:
        """Release one pin per block; at zero pins a block becomes cached."""
        return await control.pin(body, pin=False)

    @router.post("/hold", responses=error_responses(*BODY_REFUSALS))
    async def hold(body: HoldRequest) -> HoldResult:
        """Hold speculative replicas of one tenant for a request routed to this node: no
        expiry, no evict command, evicted for room only after every cached block, until
        released or ``hold_s`` passes (then their TTL applies again)."""
        return control.hold(body)

    @router.post("/release", responses=error_responses(403, *BODY_REFUSALS))
    async def release(body: ReleaseRequest, who: Who) -> ReleaseResult:
        """End a routed request's holds (its engine stored the blocks)."""
        check_tenant(body.tenant, who)
        return control.release(body)

    @router.get("/inventory", responses=error_responses(403))
    async def inventory(who: Who, tenant: Annotated[Tenant | None, Query()] = None) -> Inventory:
        """Every block held (tenant, hash, state, size, checksum; never contents), for the
        sidecar's recovery; ``tenant`` filters (a tenant token sees its tenants' only)."""
        return control.inventory(visible_tenants(tenant, who))

    @router.get("/removals")
    async def removals(since: Annotated[int, Query(ge=0)] = 0) -> Removals:
        """Blocks the agent removed on its own (evicted to make room, or expired) or on a
        tenant token's command, numbered from ``since`` on, oldest first: how the sidecar
        learns that a replica it placed is gone. Telemetry's ``removals_next`` says whether
        there is anything new."""
        return control.removals(since)

    @router.put(
        "/blocks", responses=error_responses(403, 409, *BODY_REFUSALS), openapi_extra=OPENAPI
    )
    async def put_block_route(request: Request, who: Who) -> BlockEntry:
        """The local engine stores one block's bytes (JSON with base64, or octet-stream with
        X-Kvcast-* headers); the checksum is verified first. Writes only, never reads."""
        return await put_block(control, request, who)

    @router.post("/engine-stats", status_code=204, responses=error_responses(*BODY_REFUSALS))
    async def engine_stats(body: EngineStats) -> Response:
        """An engine on this node reports its queue depth (shown in telemetry): the shared
        token or the ingest token."""
        control.report_engine(body)
        return Response(status_code=204)

    return router


def _open_routes(control: AgentControl) -> APIRouter:
    router = APIRouter()
    registry = live_registry(lambda: agent_families(control))
    registry.register(control.agent.gc.pauses)

    @router.get("/v1/telemetry")
    async def telemetry() -> Telemetry:
        """Memory watermark: bytes and blocks by state, quota, engine queue depth."""
        return control.telemetry()

    @router.get("/healthz")
    async def healthz() -> Health:
        return Health(status="ok", node_id=control.node_id)

    @router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
    async def readyz() -> JSONResponse:
        """200 while the transfer server listens and the agent accepts commands, else 503."""
        address = control.transfer_address
        ready = control.accepting and address is not None
        body = Readiness(ready=ready, transfer_address=address or "")
        return JSONResponse(body.model_dump(), status_code=200 if ready else 503)

    @router.get("/metrics", response_class=Response)
    async def metrics() -> Response:
        """Prometheus text exposition."""
        return metrics_response(registry)

    return router


async def _conflict(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=409)


async def _tenant_refused(request: Request, exc: Exception) -> Response:
    """A handler's refusal of a tenant token: counted by reason, answered as any other."""
    assert isinstance(exc, TenantRefused)
    request.app.state.control.tenant_refusals[exc.reason] += 1
    return await http_error_handler(request, exc)


def build_app(
    control: AgentControl, token: str | None = None, tenant_tokens: TenantTokens | None = None,
    ingest_token: str | None = None,
) -> FastAPI:  # fmt: skip
    """The ASGI app for ``control``'s agent; ``token`` (None: open) guards the data routes,
    ``tenant_tokens`` (secret -> its tenants; they need ``token``) reach some of them for
    their tenants only (:mod:`.tenant_scope`), ``ingest_token`` (it needs ``token``)
    :data:`INGEST_ROUTES` only."""
    app = FastAPI(
        title="kvcast transfer agent",
        version=__version__,
        description="Control API of a KV transfer agent. Block bytes never cross HTTP.",
    )
    install_error_handlers(app)
    app.add_exception_handler(CommandConflict, _conflict)
    app.add_exception_handler(TenantRefused, _tenant_refused)
    guarded = _guarded_routes(control)
    app.include_router(guarded)
    app.include_router(_open_routes(control))
    protected = {route.path for route in guarded.routes}  # type: ignore[attr-defined]
    uploads = {"/v1/blocks": upload_limit(control.agent.config.max_block_bytes)}
    app.add_middleware(BodySizeLimit, max_bytes=MAX_BODY_BYTES, per_path=uploads)
    rates = rate_buckets(
        (e.max_requests_per_s, e.burst) for e in control.agent.config.tenant_tokens
    )
    app.add_middleware(TenantRequestRates, buckets=rates, on_limited=control.note_rate_limited)
    app.add_middleware(
        BearerTokenGuard, token=token, protected=protected, on_refused=control.note_auth_failure,
        tenant_tokens=tenant_tokens, tenant_paths=TENANT_ROUTES,
        on_forbidden=control.note_forbidden, ingest_token=ingest_token,
        ingest_routes=INGEST_ROUTES, on_ingest_forbidden=control.note_ingest_forbidden,
    )  # fmt: skip
    app.add_middleware(StatusCounter, paths=set(COMMAND_PATHS), counts=control.requests)
    app.state.control = control
    return app
