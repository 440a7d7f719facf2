"""Bodies of the agent's HTTP control API (requests validated strictly, unknown keys refused).

Block contents never appear here: blocks are described by tenant, hash, state, size and
checksum only. Bytes move agent-to-agent over the framed TCP protocol (serving/messages.py).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kvcast.serving.agent.blocks import BlockState
from kvcast.serving.agent.pull_result import PullStatus
from kvcast.serving.agent.transfer import MAX_HASHES_PER_PULL
from kvcast.serving.agent.transport import parse_peer
from kvcast.serving.http.block_hash import JsonBlockHash
from kvcast.serving.http.tenant_tokens import Tenant

CommandId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[\x21-\x7e]+$")]
Hashes = Annotated[list[JsonBlockHash], Field(min_length=1, max_length=MAX_HASHES_PER_PULL)]


class Request(BaseModel):
    # strict: a JSON type is never converted (``true`` is not 1, ``"5"`` not 5)
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class ReplicateRequest(Request):
    """Pull ``block_hashes`` of ``tenant`` from the agent at ``source`` before ``deadline_s``
    seconds from now. A repeated ``command_id`` moves nothing and returns the first outcome."""

    command_id: CommandId
    source: str = Field(description="the source agent's transfer address, HOST:PORT")
    tenant: Tenant
    block_hashes: Hashes
    deadline_s: float = Field(gt=0, le=3600)
    ttl_s: float | None = Field(None, gt=0, le=86400, description="replica TTL (None: default)")
    state: Literal["speculative", "cached"] = "speculative"

    @field_validator("source")
    @classmethod
    def _peer(cls, value: str) -> str:
        parse_peer(value)
        return value


class BlockRefs(Request):
    """Blocks of one tenant; ``command_id`` (optional) makes a retried command a no-op."""

    command_id: CommandId | None = None
    tenant: Tenant
    block_hashes: Hashes


class HoldRequest(Request):
    """Hold speculative replicas of one tenant for a request routed to this node
    (``claim_id``, e.g. its request id), until released or for ``hold_s`` seconds at most.
    Holding again under the same id renews the hold; it is never counted twice."""

    claim_id: CommandId
    tenant: Tenant
    block_hashes: Hashes
    hold_s: float = Field(gt=0, le=3600, description="the longest the hold may last")


class ReleaseRequest(Request):
    """End the holds of ``claim_id`` on these blocks of one tenant (a repeat is a no-op)."""

    claim_id: CommandId
    tenant: Tenant
    block_hashes: Hashes


class EngineStats(Request):
    """What an engine on this node reports about its load."""

    engine_id: str = Field("engine-0", min_length=1, max_length=128)
    queue_depth: int = Field(ge=0, le=10**9, description="requests waiting to be scheduled")
    running: int | None = Field(None, ge=0, le=10**9)
    kv_usage: float | None = Field(None, ge=0, le=1, description="fraction of KV cache in use")


class HeldFor(BaseModel):
    """One routed request's hold on a replica (``POST /v1/hold``)."""

    claim_id: str
    seconds_left: float = Field(description="until the hold runs out by itself (its hold_s)")


class BlockEntry(BaseModel):
    tenant: str
    block_hash: JsonBlockHash
    state: BlockState
    nbytes: int
    checksum: int = Field(description="xxh3-64 of the block's bytes")
    pins: int
    ttl_remaining_s: float | None = None
    holds: int = Field(0, description="routed requests holding this replica")
    claims: list[HeldFor] = Field(
        default_factory=list, description="those requests' holds (``holds`` of them): a "
        "restarted sidecar takes its claims back from them"
    )  # fmt: skip


class ReplicateResult(BaseModel):
    node_id: str
    command_id: str
    duplicate: bool = Field(description="this command id was seen before: nothing moved now")
    source: str
    tenant: str
    status: PullStatus
    committed: list[JsonBlockHash]
    already_present: list[JsonBlockHash]
    missing: list[JsonBlockHash]
    incomplete: list[JsonBlockHash]
    corrupt: list[JsonBlockHash]
    rejected: list[JsonBlockHash]
    bytes_committed: int
    attempts: int
    elapsed_s: float
    error: str


class EvictResult(BaseModel):
    evicted: list[JsonBlockHash]
    absent: list[JsonBlockHash]
    pinned: list[JsonBlockHash] = Field(description="active blocks, refused")
    held: list[JsonBlockHash] = Field(
        default_factory=list, description="replicas held for a routed request, refused"
    )


class HoldResult(BaseModel):
    held: list[JsonBlockHash] = Field(description="speculative replicas now held")
    not_speculative: list[JsonBlockHash] = Field(
        description="absent, cached or active blocks: nothing to hold"
    )


class ReleaseResult(BaseModel):
    released: list[JsonBlockHash]
    not_held: list[JsonBlockHash] = Field(description="no hold of this claim on them")


class PinResult(BaseModel):
    blocks: list[BlockEntry] = Field(description="the blocks pinned or unpinned, after it")
    absent: list[JsonBlockHash]
    not_pinned: list[JsonBlockHash] = Field(default_factory=list, description="unpin only")


class Inventory(BaseModel):
    node_id: str
    transfer_address: str
    checksum_algorithm: str
    blocks: list[BlockEntry]


class RemovedBlock(BaseModel):
    seq: int
    tenant: str
    block_hash: JsonBlockHash
    # expired, evicted_speculative, evicted_cached or evicted_by_tenant: a plain string, so
    # that a reader (the sidecar) takes a reason an agent newer than itself adds
    reason: str


class Removals(BaseModel):
    """Blocks the agent removed without the shared token's command (on its own, or on a tenant
    token's), oldest first."""

    node_id: str
    blocks: list[RemovedBlock]
    next: int = Field(description="the ``since`` to ask for next")
    missed: int = Field(description="removals from ``since`` on that the log no longer holds")


class StateTotals(BaseModel):
    active: int
    cached: int
    speculative: int


class EngineReport(BaseModel):
    engine_id: str
    queue_depth: int
    running: int | None
    kv_usage: float | None
    age_s: float


class Telemetry(BaseModel):
    node_id: str
    capacity_bytes: int
    used_bytes: int
    free_bytes: int
    speculative_quota_bytes: int
    speculative_free_bytes: int
    bytes: StateTotals
    blocks: StateTotals
    peak_used_bytes: int
    peak_speculative_bytes: int
    replications_in_flight: int
    queue_depth: int | None = Field(description="sum over engines' reports (None: none yet)")
    engines: list[EngineReport]
    device: str = Field(default="host", description="where blocks live: host, cuda:N")
    removals_next: int = Field(
        default=0, description="the number the next removal on the agent's own will get "
        "(``GET /v1/removals``): more than last time means blocks left"
    )  # fmt: skip
    incarnation: str = Field(
        default="", description="a random id drawn each time the agent starts: another than "
        "last time means it restarted, its store (and its removal numbers) new"
    )  # fmt: skip


class Health(BaseModel):
    status: str
    node_id: str


class Readiness(BaseModel):
    ready: bool
    transfer_address: str
