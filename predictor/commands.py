"""Typed actions a replication policy (the decider, the oracle) asks the cluster to take.

Fields keep their original positional order (``source, target, block_hashes, ttl_ms,
reason``); ``priority`` and ``deadline_ms`` were added after them with defaults. ``reason`` is
either free text or a :class:`DecisionReason` carrying the numbers of the decider's
inequality, so that shadow mode can log and replay every decision.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DecisionReason:
    """The numbers behind one replicate / promote decision (all times in ms).

    The decider acted because ``p_hit x saved_ms > cost_ms`` where ``cost_ms`` is the sum of
    ``transfer_ms`` (weighted), ``congestion_ms``, ``memory_ms`` and ``reclaim_ms``, and the
    gates held: ``holder_queue_ms > transfer_ms`` (replication only), free memory at the
    target, and ``deadline - now > transfer_ms``.
    """

    p_hit: float
    saved_ms: float
    transfer_ms: float
    congestion_ms: float
    memory_ms: float
    reclaim_ms: float
    holder_queue_ms: float = 0.0
    target_queue_ms: float = 0.0
    # blocks the costs were charged for: the span past the target's prefix (blocks the target
    # already holds past a gap are charged too, an upper bound; the command moves only the rest)
    blocks_moved: int = 0

    @property
    def benefit_ms(self) -> float:
        return self.p_hit * self.saved_ms

    @property
    def cost_ms(self) -> float:
        return self.transfer_ms + self.congestion_ms + self.memory_ms + self.reclaim_ms

    @property
    def net_ms(self) -> float:
        return self.benefit_ms - self.cost_ms

    def __str__(self) -> str:
        return (
            f"p={self.p_hit:.3f} x saved={self.saved_ms:.1f} > transfer={self.transfer_ms:.1f}"
            f" + congestion={self.congestion_ms:.1f} + memory={self.memory_ms:.1f}"
            f" + reclaim={self.reclaim_ms:.1f}; queue holder={self.holder_queue_ms:.1f}"
            f" target={self.target_queue_ms:.1f}; blocks={self.blocks_moved}"
        )


@dataclass(frozen=True, slots=True)
class ReplicateCommand:
    """Copy a prefix chain (root first) from ``source``'s HBM to ``target`` as speculative.

    ``block_hashes`` is the chain from its root; the executor moves only the blocks the
    target lacks, and only up to the first block the source does not hold. ``priority``: 0
    is the most valuable command of its batch. ``deadline_ms``: the replica is useless if it
    lands later (the predicted first use); None when unknown. ``tenant``: whose chain it is
    (two tenants' chains may share hashes; "" when unknown).
    """

    source: int
    target: int
    block_hashes: tuple[int, ...]
    ttl_ms: float
    reason: str | DecisionReason = ""
    priority: int = 0
    deadline_ms: float | None = None
    tenant: str = ""


@dataclass(frozen=True, slots=True)
class PromoteCommand:
    """Load blocks from ``node``'s DRAM / NVMe into its HBM ahead of use (speculative)."""

    node: int
    block_hashes: tuple[int, ...]
    ttl_ms: float
    reason: str | DecisionReason = ""
    priority: int = 0
    deadline_ms: float | None = None
    tenant: str = ""  # whose chain it is ("" when unknown)


@dataclass(frozen=True, slots=True)
class EvictCommand:
    """Drop speculative replicas from ``node`` (never touches active or cached blocks)."""

    node: int
    block_hashes: tuple[int, ...]
    reason: str = ""


Command = ReplicateCommand | PromoteCommand | EvictCommand
