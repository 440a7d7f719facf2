"""The event stream every signal is computed from.

The simulator emits these as it replays a trace; the live sidecar builds the same objects from
router posts and vLLM KV events. Features are pure functions of this stream, so the offline and
online paths cannot drift apart. Times are milliseconds on the stream's own clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Medium = Literal["GPU", "CPU", "DISK", "REMOTE"]


@dataclass(frozen=True, slots=True)
class RequestArrived:
    """A request reached the router and was sent to ``node``."""

    ts_ms: float
    request_id: str
    node: int
    tenant: str
    session: str | None
    input_tokens: int
    output_tokens: int
    block_hashes: tuple[int, ...]
    public_blocks: int = 0  # leading blocks marked public (shareable across tenants)


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Blocks became resident on ``node`` (vLLM ``BlockStored``); chained root-first."""

    ts_ms: float
    node: int
    block_hashes: tuple[int, ...]
    parent_block_hash: int | None
    block_size: int
    medium: Medium = "GPU"
    speculative: bool = False


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Blocks left ``node``'s ``medium`` (evicted, demoted or dropped)."""

    ts_ms: float
    node: int
    block_hashes: tuple[int, ...]
    medium: Medium = "GPU"


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The engine on ``node`` dropped its whole prefix cache."""

    ts_ms: float
    node: int


@dataclass(frozen=True, slots=True)
class TelemetrySample:
    """One node's load and memory watermark at ``ts_ms``."""

    ts_ms: float
    node: int
    queue_len: int
    queued_prefill_tokens: int
    running_decodes: int
    active_tokens: int
    capacity_bytes: int
    used_bytes: int
    cached_bytes: int
    speculative_bytes: int
    evictions_total: int
    est_queue_ms: float
    transfers_in_flight: int = 0
    pending_replication_bytes: int = 0  # bytes of replications on their way to this node


@dataclass(frozen=True, slots=True)
class ReplicationDone:
    """A replication (or promotion) finished: blocks now resident on ``target``."""

    ts_ms: float
    source: int
    target: int
    block_hashes: tuple[int, ...]
    ok: bool
    reason: str = ""


Event = (
    RequestArrived
    | BlockStored
    | BlockRemoved
    | AllBlocksCleared
    | TelemetrySample
    | ReplicationDone
)
