"""The cost terms of ``P(hit) x saved_critical_path_ms > transfer_ms + congestion_cost +
memory_pressure_cost + misprediction_reclaim_cost`` and the gates, for one action.

All in milliseconds, for moving blocks ``[start, end)`` of a chain to a node:

- ``saved``: the request's TTFT without the action minus with it. Without it, the request
  goes to the node x the router would pick now (asked through the view's probe; without a
  probe, the x that minimises ``queue_x + fetch_x``) and pays ``queue_x + fetch_x``, where
  ``fetch_x`` is 0 on a node holding the prefix, else the prefill of the blocks it lacks
  (or, when the router pulls missing KV on the critical path, Mooncake-style, the pull's
  wire time if shorter). With it, it runs on the target with the blocks in HBM:
  ``saved = max(0, queue_x + fetch_x - queue_target)``. A replica on the node the router
  picks anyway saves that node's recompute; one elsewhere saves the queue it avoids. The
  router must also pick the target once the copy is there (asked likewise), else the
  option is dropped. Queues are the predicted ones of :mod:`kvcast.predictor.targets`.
- ``transfer``: ``transfer_weight x`` the time until the copy lands (link backlog + latency
  + bytes / bandwidth of the link's tier), plus the tier's fixed penalty. The copy is off
  the critical path, so the default weight is below 1: what link time costs beyond that is
  its opportunity cost, the congestion term.
- ``congestion``: ``congestion_weight x`` wire time ``x`` the share of the budget window the
  two NICs are already committed: the delay the copy may add to critical-path pulls.
- ``memory``: cached blocks the replica displaces (beyond the target's free HBM)
  ``x displaced_reuse_prob x`` the prefill of one block. Memory pressure also decides
  whether the replica lives to be used: it is evicted before any cached block, so the
  target's expected evictions until the first use (its recent eviction rate x (time left +
  its queue)) beyond its free HBM would take it. ``P`` is multiplied by the chance of none,
  ``exp(-excess)``.
- ``reclaim``: ``(1 - P) x blocks x reclaim_ms_per_block``: the work of taking back a
  replica that was not used.

Gates: the delay without the copy (``queue_x + fetch_x``: the holder's queue when the router
would wait for the holder) ``> queue_gate_factor x transfer``; the predicted first use
``> transfer`` (the replica lands in time; and when the first use is known, no more than
``lead_ms`` before it: a replica waiting in HBM is the first thing evicted); the target keeps
``safety_margin`` of HBM beyond the replica (counting evictable cached blocks, never pinned
or speculative ones). Never a hot target; beyond its public prefix, never a node of another
tenant.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvcast.predictor.chains import ChainPlan
from kvcast.predictor.cluster_view import ClusterView
from kvcast.predictor.commands import DecisionReason
from kvcast.predictor.decider_config import GIB, DeciderConfig


@dataclass(frozen=True, slots=True)
class Option:
    """One admissible action: move ``[start, end)`` of a chain from ``source`` to ``target``
    (``source == target``: promote from the node's lower tiers)."""

    source: int
    target: int
    start: int
    end: int
    transfer_ms: float  # unweighted time until it lands
    reason: DecisionReason

    @property
    def net_ms(self) -> float:
        return self.reason.net_ms


def replication_option(
    plan: ChainPlan,
    view: ClusterView,
    cfg: DeciderConfig,
    *,
    real: list[int],
    queue: np.ndarray,
    hot: np.ndarray,
    in_flight_bytes: np.ndarray,
) -> Option | None:
    """The best (target, cut) for copying this chain, over every node and depth, or None.

    ``real``: per node, the prefix it holds in HBM now (sources hold the deepest);
    ``plan.held`` also counts replicas on their way. Vectorised: rows are target nodes,
    columns the depth ``end`` the copy would reach.
    """
    depth = max(real)
    if depth == 0:
        return None
    c, links, pf = cfg.costs, view.links, view.prefill
    n, bb, bt = view.n, view.block_bytes, view.block_tokens
    nodes = np.arange(n)
    held = np.asarray(plan.held)
    lo = int(held.min()) + 1
    if lo > depth:
        return None
    ends = np.arange(lo, depth + 1)
    if len(ends) > c.max_cuts:  # a coarse grid of cuts (always the whole chain), for speed
        ends = np.unique(np.linspace(lo, depth, c.max_cuts).round().astype(np.int64))
    sources = np.flatnonzero(np.asarray(real) == depth)
    full = np.maximum(depth - held, 0) * bb
    eta = links.backlog_ms[sources] + links.latency_ms[sources] + full / links.bytes_per_ms[sources]
    src = sources[np.argmin(eta, axis=0)]  # per target, the fastest source
    backlog = links.backlog_ms[src, nodes][:, None]
    nblk = ends[None, :] - held[:, None]
    valid = nblk > 0
    bw = links.bytes_per_ms[src, nodes][:, None]
    wire = links.latency_ms[src, nodes][:, None] + nblk * bb / bw
    transfer = backlog + wire
    te, th = (ends * bt)[None, :], (held * bt)[:, None]
    recompute = pf.b_ms_per_token * (te - th) + pf.c_ms_per_token2 * (te**2 - th**2)
    fetch = np.where(valid, recompute, 0.0)
    if view.reactive_pull:  # the router would pull the missing blocks on the critical path
        fetch = np.minimum(fetch, np.where(valid, wire, 0.0))
    tokens = len(plan.blocks) * bt + plan.tail_tokens
    if view.would_route is not None:  # where the router would send it without the copy
        home = view.would_route(plan.blocks, tokens, plan.held)
        without = queue[home] + fetch[home]
    else:  # a router that picks the least TTFT
        without = (queue[:, None] + fetch).min(axis=0)
    saved = np.clip(without[None, :] - queue[:, None], 0.0, None)
    p_hit = plan.p[ends - 1][None, :]
    free_now = np.clip((view.free_bytes - in_flight_bytes) / bb, 0.0, None)[:, None]
    if view.evict_blocks_per_ms is not None:
        until_use = plan.time_left_ms + queue
        evictions = (view.evict_blocks_per_ms * until_use)[:, None]
        excess = np.clip(evictions - np.clip(free_now - nblk, 0.0, None), 0.0, None)
        p = p_hit * np.exp(-excess)
    else:
        p = p_hit * np.ones_like(transfer)
    util = np.clip(backlog / cfg.budgets.budget_window_ms, 0.0, 1.0)
    memory = np.clip(nblk - free_now, 0, None) * c.displaced_reuse_prob * pf.span_ms(0, bt)
    reclaim = (1.0 - p) * nblk * c.reclaim_ms_per_block
    tier = np.asarray(cfg.targets.tier_penalty_ms)[links.tier[src, nodes]][:, None]
    cost_transfer = c.transfer_weight * transfer + tier
    congestion = c.congestion_weight * wire * util
    net = p * saved - cost_transfer - congestion - memory - reclaim
    margin = c.safety_margin_gib * GIB
    room = view.capacity_bytes - view.pinned_bytes - view.spec_bytes - in_flight_bytes - margin
    cap = np.array([depth if view.serves(t, plan.tenant) else plan.public_blocks for t in nodes])
    ok = (
        valid
        & (ends[None, :] <= cap[:, None])  # tenant rule: only the public prefix crosses
        & ~hot[:, None]
        & (without[None, :] > c.queue_gate_factor * transfer)
        & (plan.time_left_ms > transfer)
        & (~plan.known_first_use | (plan.time_left_ms - transfer <= c.lead_ms))
        & (nblk <= (room / bb)[:, None])
        & (net > 0)
    )
    if not ok.any():
        return None
    t, k = _routed_choice(plan, view, cfg, np.where(ok, net, -np.inf), ends, tokens)
    if t < 0:
        return None
    reason = DecisionReason(
        float(p[t, k]),
        float(saved[t, k]),
        float(cost_transfer[t, k]),
        float(congestion[t, k]),
        float(memory[t, k]),
        float(reclaim[t, k]),
        float(without[k]),
        float(queue[t]),
        int(nblk[t, k]),
    )
    return Option(int(src[t]), int(t), int(held[t]), int(ends[k]), float(transfer[t, k]), reason)


def _routed_choice(
    plan: ChainPlan,
    view: ClusterView,
    cfg: DeciderConfig,
    net: np.ndarray,
    ends: np.ndarray,
    tokens: int,
) -> tuple[int, int]:
    """The best admissible (target, depth index) that the router would actually use: a
    replica on a node the router would not send the request to saves nothing."""
    order = np.argsort(net, axis=None)[::-1]
    tried: set[int] = set()
    for flat in order:
        t, k = (int(i) for i in np.unravel_index(int(flat), net.shape))
        if not np.isfinite(net[t, k]) or len(tried) >= cfg.targets.route_checks:
            break
        if view.would_route is None:
            return t, k
        if t in tried:
            continue  # this target's best depth was already refused by the router
        tried.add(t)
        match = list(plan.held)
        match[t] = max(match[t], int(ends[k]))
        if view.would_route(plan.blocks, tokens, match) == t:
            return t, k
    return -1, -1
