"""Bodies of the sidecar's HTTP API: every message between the router, the engines, the
operators and the sidecar (requests validated strictly: no JSON type converted, unknown keys
refused, NaN refused).

Block hashes are JSON integers (u64) or hex strings (bytes hashes, mapped to u64 ids the way
vLLM maps them: big-endian, low 64 bits). Nodes are named by id (0..n-1) or by name. KV events
use vLLM's own field names (its map encoding), so an engine that cannot publish over ZMQ can
post the same events.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from kvcast.features.events import Medium
from kvcast.serving.http.block_hash import JsonBlockHash
from kvcast.serving.http.tenant_tokens import Tenant
from kvcast.serving.sidecar.config import Mode

NodeRef = Annotated[int | str, Field(description="node id (0..n-1) or node name")]
MAX_HASHES = 1 << 16


class Body(BaseModel):
    # strict: a JSON type is never converted (``"node": true`` is not node 1, ``"32"`` not 32)
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class Arrival(Body):
    """One request the router routed."""

    request_id: str = Field(min_length=1, max_length=256)
    node: NodeRef
    tenant: Tenant
    session: str | None = Field(None, min_length=1, max_length=256)
    block_hashes: list[JsonBlockHash] = Field(max_length=MAX_HASHES, description="root first")
    input_tokens: int = Field(ge=0, le=10**8)
    output_tokens: int = Field(0, ge=0, le=10**8)
    public_blocks: int = Field(
        0, ge=0, le=MAX_HASHES, description="leading blocks shareable across tenants"
    )
    ts_ms: float | None = Field(None, ge=0, description="router's unix ms (None: on receipt)")
    queue_depth: int | None = Field(None, ge=0, le=10**9, description="node queue when routed")


class ArrivalBatch(Body):
    requests: list[Arrival] = Field(min_length=1, max_length=10_000)


def _wire_medium(value: object) -> object:
    """As the ZMQ decoder reads it: null is GPU (vLLM's default), any case."""
    if value is None:
        return "GPU"
    return value.upper() if isinstance(value, str) else value


WireMedium = Annotated[Medium, BeforeValidator(_wire_medium)]


class EngineEvent(BaseModel):
    """An event as vLLM writes it (its map encoding): fields kvcast does not read, such as
    ``token_ids``, ``lora_id`` or ``lora_name``, are accepted and ignored, as on ZMQ."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, strict=True)


class StoredEvent(EngineEvent):
    type: Literal["BlockStored"]
    block_hashes: list[JsonBlockHash] = Field(min_length=1, max_length=MAX_HASHES)
    parent_block_hash: JsonBlockHash | None = None
    block_size: int = Field(gt=0, le=1 << 20)
    medium: WireMedium = "GPU"


class RemovedEvent(EngineEvent):
    type: Literal["BlockRemoved"]
    block_hashes: list[JsonBlockHash] = Field(min_length=1, max_length=MAX_HASHES)
    medium: WireMedium = "GPU"


class ClearedEvent(EngineEvent):
    type: Literal["AllBlocksCleared"]


KvEventBody = Annotated[StoredEvent | RemovedEvent | ClearedEvent, Field(discriminator="type")]


class KvEventBatch(Body):
    """A batch of one engine's KV events, in order."""

    node: NodeRef
    ts_ms: float | None = Field(None, ge=0, description="engine's unix ms (None: on receipt)")
    events: list[KvEventBody] = Field(min_length=1, max_length=100_000)


class Accepted(BaseModel):
    accepted: int = Field(description="events queued")
    dropped: int = Field(description="older queued events dropped to make room")
    queue_depth: int
    duplicates: int = Field(
        default=0, description="arrivals whose request id was posted before (not counted again)"
    )


class CostTerms(BaseModel):
    """The decider's inequality for the decision (ms; None where not finite)."""

    p_hit: float | None
    saved_ms: float | None
    transfer_ms: float | None
    congestion_ms: float | None
    memory_ms: float | None
    reclaim_ms: float | None
    holder_queue_ms: float | None
    target_queue_ms: float | None
    net_ms: float | None


class DecisionOut(BaseModel):
    id: str
    tick: int
    ts_ms: float
    mode: Mode
    kind: str = Field(description="replicate | promote | evict")
    source: str | None
    target: str
    tenant: str
    block_hashes: list[int]
    bytes: int
    priority: int
    ttl_ms: float
    deadline_ms: float | None
    p_blocks: list[float | None]
    terms: CostTerms | None
    reason: str
    model: str
    status: str = Field(description="shadow | pending | issued | retried | done | dropped")
    detail: str
    moved_bytes: int
    attempts: int


class DecisionList(BaseModel):
    total: int = Field(
        description="decisions made since start (to a tenant token: its tenants' decisions "
        "among those kept, recent_decisions)"
    )
    decisions: list[DecisionOut] = Field(description="newest first")


class BlockLocation(BaseModel):
    block_hash: int
    gpu: list[str] = Field(description="nodes holding it in GPU memory")
    lower: list[str] = Field(description="nodes holding it in CPU / disk tiers")
    replicas: list[str] = Field(description="nodes holding a live replica this sidecar placed")


class ModeBody(Body):
    mode: Mode


class ModeState(BaseModel):
    mode: Mode


class ModelLoad(Body):
    source: str = Field(min_length=1, max_length=4096, description="ONNX path or models:/...")


class ModelState(BaseModel):
    loaded: bool
    source: str | None = None
    kind: str | None = None
    version: str | None = None
    digest: str | None = None
    registry_version: str | None = Field(
        None, description="the MLflow registry version a models:/ source resolved to"
    )
    spec_digest: str = Field(description="the running feature spec's digest")
    loaded_at: float | None = None
    loads: int
    refused: int


class Health(BaseModel):
    status: str
    sidecar_id: str


class Readiness(BaseModel):
    ready: bool
    checks: dict[str, bool]
