"""One decision as the sidecar records it: the decider's command, its numbers, its fate.

Built on the decision thread from a :mod:`kvcast.predictor.commands` command and the tick's
candidates (which supply the chain's tenant and the scorer's per-block probabilities).
``status`` starts as ``shadow`` (logged only) or ``pending`` (active mode) and the executor
moves it to ``issued``, then ``done``, ``failed``, ``retried`` or ``dropped`` (``detail`` says
why). :class:`RecentDecisions` keeps the last ones for ``GET /v1/decisions``.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.predictor.commands import (
    Command,
    DecisionReason,
    EvictCommand,
    PromoteCommand,
    ReplicateCommand,
)

NO_NODE = -1


@dataclass(slots=True)
class Decision:
    id: str
    tick: int
    ts_ms: float
    mode: str
    kind: str  # replicate | promote | evict
    source: int
    target: int
    tenant: str
    block_hashes: tuple[int, ...]
    nbytes: int
    priority: int
    ttl_ms: float
    deadline_ms: float  # NaN: none
    p_blocks: tuple[float, ...]  # the scorer's probability of each block (NaN: unknown)
    reason: DecisionReason | None
    text: str  # the reason as one line
    model: str  # digest of the model that scored it ("" for evictions)
    status: str
    detail: str = ""
    moved_bytes: int = 0
    attempts: int = 0
    history: list[str] = field(default_factory=list)

    def move(self, status: str, detail: str = "") -> None:
        self.status, self.detail = status, detail
        self.history.append(status)


def chain_of(cands: ChainCandidates, blocks: tuple[int, ...], tenant: str = "") -> int:
    """The index of the candidate chain of ``tenant`` (any tenant when "") that ``blocks`` is
    a prefix of (-1: none)."""
    k, tenants = len(blocks), cands.tenants
    for i, chain in enumerate(cands.chains):
        ours = not tenant or not tenants or tenants[i] == tenant
        if ours and len(chain) >= k and chain[0] == blocks[0] and chain[:k] == blocks:
            return i
    return -1


def make_decision(
    cmd: Command, *, ident: str, tick: int, now_ms: float, mode: str, block_bytes: int,
    cands: ChainCandidates, probs: np.ndarray, model: str,
) -> Decision:  # fmt: skip
    status = "shadow" if mode == "shadow" else "pending"
    if isinstance(cmd, EvictCommand):
        return Decision(
            ident, tick, now_ms, mode, "evict", NO_NODE, cmd.node, "", cmd.block_hashes,
            len(cmd.block_hashes) * block_bytes, 0, 0.0, math.nan,
            (math.nan,) * len(cmd.block_hashes), None, cmd.reason, "", status,
        )  # fmt: skip
    i = chain_of(cands, cmd.block_hashes, cmd.tenant)  # the decider says whose chain it is
    tenant = cmd.tenant or (cands.tenants[i] if i >= 0 and cands.tenants else "")
    if i >= 0:
        start = int(cands.offsets[i])
        p_blocks = tuple(float(p) for p in probs[start : start + len(cmd.block_hashes)])
    else:
        p_blocks = (math.nan,) * len(cmd.block_hashes)
    structured = cmd.reason if isinstance(cmd.reason, DecisionReason) else None
    moved = structured.blocks_moved if structured else len(cmd.block_hashes)
    if isinstance(cmd, ReplicateCommand):
        kind, source, target = "replicate", cmd.source, cmd.target
    else:
        assert isinstance(cmd, PromoteCommand)
        kind, source, target = "promote", cmd.node, cmd.node
    deadline = math.nan if cmd.deadline_ms is None else float(cmd.deadline_ms)
    return Decision(
        ident, tick, now_ms, mode, kind, source, target, tenant, cmd.block_hashes,
        moved * block_bytes, cmd.priority, cmd.ttl_ms, deadline, p_blocks, structured,
        str(cmd.reason), model, status,
    )  # fmt: skip


class RecentDecisions:
    """The last ``limit`` decisions, newest last; thread-safe."""

    def __init__(self, limit: int) -> None:
        self._items: deque[Decision] = deque(maxlen=limit)
        self._lock = threading.Lock()
        self.total = 0

    def add(self, decisions: list[Decision]) -> None:
        with self._lock:
            self._items.extend(decisions)
            self.total += len(decisions)

    def latest(self, limit: int, kind: str | None = None) -> list[Decision]:
        with self._lock:
            items = [d for d in self._items if kind is None or d.kind == kind]
        return items[-limit:][::-1]
