"""Promotion: load a chain's blocks from a node's own DRAM / NVMe into its HBM ahead of use.

The same inequality as replication (:mod:`kvcast.predictor.costs`). Without the action the
request either waits at a node holding the prefix in HBM, recomputes it, or runs on this node
and loads the blocks from the lower tier on its critical path; with it, it runs on this node
with the blocks in HBM. ``saved = max(0, min(holder_q - q, recompute, load))``. The load is
the node's own PCIe / NVMe time, weighed by ``promote_transfer_weight`` (it delays no other
node's transfers, so no congestion term). Gates: the load finishes before the predicted first
use, the node keeps its safety margin of HBM.
"""

from __future__ import annotations

import math

import numpy as np

from kvcast.predictor.chains import ChainPlan
from kvcast.predictor.cluster_view import ClusterView
from kvcast.predictor.commands import DecisionReason
from kvcast.predictor.costs import Option
from kvcast.predictor.decider_config import GIB, DeciderConfig


def promotion_option(
    plan: ChainPlan,
    view: ClusterView,
    cfg: DeciderConfig,
    *,
    node: int,
    queue: np.ndarray,
    in_flight_bytes: float,
) -> Option | None:
    """Promote the run of blocks after ``node``'s HBM prefix found in its lower tiers."""
    if not view.lower or not view.lower[node]:
        return None
    c = cfg.costs
    start = plan.held[node]
    bb, bt = view.block_bytes, view.block_tokens
    load = 0.0
    end = start
    for b in plan.blocks[start:]:
        bw = next((bw for blocks, bw in view.lower[node] if b in blocks), 0.0)
        if not 0.0 < bw < math.inf:  # not there, or a tier whose speed is unknown
            break
        load += bb / bw
        end += 1
    if end == start:
        return None
    nblk = end - start
    p = float(plan.p[end - 1])
    others = [h if i != node else -1 for i, h in enumerate(plan.held)]
    holder_q = min((float(queue[i]) for i, h in enumerate(others) if h >= end), default=np.inf)
    recompute = view.prefill.span_ms(start * bt, end * bt)
    target_q = float(queue[node])
    saved = max(0.0, min(holder_q - target_q, recompute, load))
    free_blocks = max((view.free_bytes[node] - in_flight_bytes) / bb, 0.0)
    memory = max(nblk - free_blocks, 0.0) * c.displaced_reuse_prob * view.prefill.span_ms(0, bt)
    reclaim = (1.0 - p) * nblk * c.reclaim_ms_per_block
    cost_transfer = c.promote_transfer_weight * load
    reason = DecisionReason(p, saved, cost_transfer, 0.0, memory, reclaim, holder_q, target_q, nblk)
    room = view.capacity_bytes[node] - view.pinned_bytes[node] - view.spec_bytes[node]
    room = (room - in_flight_bytes - c.safety_margin_gib * GIB) / bb
    # written so that a NaN anywhere refuses the promotion (NaN passes no comparison)
    if not (reason.net_ms > 0 and plan.time_left_ms > load and nblk <= room):
        return None
    return Option(node, node, start, end, load, reason)
