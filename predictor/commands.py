"""Typed actions a replication policy (the decider, the oracle) asks the cluster to take."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReplicateCommand:
    """Copy a prefix chain (root first) from ``source``'s HBM to ``target`` as speculative."""

    source: int
    target: int
    block_hashes: tuple[int, ...]
    ttl_ms: float
    reason: str = ""


@dataclass(frozen=True, slots=True)
class PromoteCommand:
    """Load blocks from ``node``'s DRAM / NVMe into its HBM ahead of use (speculative)."""

    node: int
    block_hashes: tuple[int, ...]
    ttl_ms: float
    reason: str = ""


@dataclass(frozen=True, slots=True)
class EvictCommand:
    """Drop speculative replicas from ``node`` (never touches active or cached blocks)."""

    node: int
    block_hashes: tuple[int, ...]
    reason: str = ""


Command = ReplicateCommand | PromoteCommand | EvictCommand
