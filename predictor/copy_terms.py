"""What copying each chain to each node costs before the tick's state moves: one numpy pass
over chains x target nodes x cuts.

For the chains a tick weighs, everything in the inequality of :mod:`kvcast.predictor.costs`
that depends only on the view and on where each chain's prefix lives: the cuts (the depth a
copy would reach), the fastest source per target, the blocks moved, transfer and wire time,
the recompute a copy saves, the transfer, tier and congestion costs, the tenant rule and the
time gates. What moves during a tick (predicted queues, hot nodes, bytes in flight, and the
free HBM and room they leave, :meth:`TickTerms.memory`, kept node by node) is applied per
chain by :func:`kvcast.predictor.costs.replication_option`; a chain whose prefix placement
changed meanwhile (a copy of a shared prefix on its way) is recomputed alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvcast.predictor.cluster_view import ClusterView
from kvcast.predictor.decider_config import DeciderConfig


@dataclass
class TickTerms:
    """What the inequality reads from the view and the config that holds for a whole tick."""

    nodes: np.ndarray  # [n] 0..n-1
    free_bytes: list[float]  # [n] ``view.free_bytes``
    unpinned_bytes: list[float]  # [n] capacity - pinned - speculative
    links: np.ndarray  # [5, n * n] per link (source x n + target): bytes per ms, latency,
    # backlog, tier penalty (ms) and the share of the budget window it is committed
    block_ms: float  # the prefill of one block
    no_evictions: bool  # no node evicts (a replica's survival odds are 1)
    serving: dict[str, np.ndarray]  # tenant -> [n] which nodes serve it (filled as asked)
    quota_room: list[float]  # [n] speculative quota minus the resident speculative bytes
    factor: float = 1.0  # P(hit) correction from the copies' outcomes (outcome_feedback)
    _memory: _Memory | None = None

    @classmethod
    def of(cls, view: ClusterView, cfg: DeciderConfig, factor: float = 1.0) -> TickTerms:
        rate = view.evict_blocks_per_ms
        quota = cfg.budgets.quota_bytes
        capacity, spec = view.capacity_bytes.tolist(), view.spec_bytes.tolist()
        return cls(
            np.arange(view.n),
            view.free_bytes.tolist(),
            (view.capacity_bytes - view.pinned_bytes - view.spec_bytes).tolist(),
            link_terms(view, cfg).reshape(5, view.n * view.n),
            view.prefill.span_ms(0, view.block_tokens),
            rate is None or not np.any(rate),
            {},
            [quota(float(c)) - float(x) for c, x in zip(capacity, spec, strict=True)],
            factor,
        )

    def memory(
        self, in_flight_bytes: list[float], hot: list[bool], block_bytes: int, margin: float
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """``[n, 1]`` free HBM (blocks), room for a replica (blocks, keeping ``margin`` bytes;
        -inf on a ``hot`` node) and the least free HBM (NaN if any is), given the bytes in
        flight to each node (the arrays are read only, and valid until the next call). Kept
        between calls: only the nodes whose bytes in flight or hotness changed are recomputed
        (numpy's float semantics: a zero block size gives inf, not an error)."""
        last = self._memory
        if last is not None and last.moving is in_flight_bytes and last.hot is hot:
            return last.free_col, last.room_col, last.least
        if last is None or (last.block_bytes, last.margin) != (block_bytes, margin):
            last = self._memory = _Memory(block_bytes, margin, len(self.free_bytes))
        last.update(self.free_bytes, self.unpinned_bytes, in_flight_bytes, hot)
        return last.free_col, last.room_col, last.least

    def serves(self, view: ClusterView, tenant: str) -> np.ndarray:
        out = self.serving.get(tenant)
        if out is None:
            out = np.array([view.serves(t, tenant) for t in range(view.n)], dtype=bool)
            self.serving[tenant] = out
        return out


def link_terms(view: ClusterView, cfg: DeciderConfig) -> np.ndarray:
    """``[5, n, n]`` floats per link (source x target): bytes per ms, latency, backlog, tier
    penalty (ms) and the share of the budget window it is committed (what
    :class:`TickTerms` keeps, flattened, for the copy terms)."""
    links = view.links
    with np.errstate(invalid="ignore", divide="ignore"):
        util = np.clip(links.backlog_ms / cfg.budgets.budget_window_ms, 0.0, 1.0)
    tier_ms = np.asarray(cfg.targets.tier_penalty_ms)[links.tier]
    per_link = (links.bytes_per_ms, links.latency_ms, links.backlog_ms, tier_ms, util)
    return np.array(per_link, dtype=float)


class _Memory:
    """Free HBM and room per node for some bytes in flight and hot nodes (see
    :meth:`TickTerms.memory`), updated node by node in place."""

    def __init__(self, block_bytes: int, margin: float, n: int) -> None:
        self.block_bytes, self.margin = block_bytes, margin
        self.moving: list[float] = []  # the lists last asked (identity)
        self.hot: list[bool] = []
        self._seen: list[tuple[float, bool] | None] = [None] * n  # per node, as last computed
        self._free = [0.0] * n
        self._nan = [False] * n  # per node, whether its free HBM is NaN
        self.free_col = np.zeros((n, 1))
        self.room_col = np.zeros((n, 1))
        self.least = math.inf

    def update(
        self,
        free_bytes: list[float],
        unpinned_bytes: list[float],
        in_flight_bytes: list[float],
        hot: list[bool],
    ) -> None:
        bb = np.float64(self.block_bytes)
        seen, free = self._seen, self._free
        changed = False
        for node, key in enumerate(zip(in_flight_bytes, hot, strict=True)):
            if key == seen[node]:
                continue
            moving, is_hot = key
            blocks = float((free_bytes[node] - moving) / bb)
            free[node] = self.free_col[node, 0] = 0.0 if blocks < 0.0 else blocks  # NaN: NaN
            self._nan[node] = blocks != blocks
            self.room_col[node, 0] = (
                -math.inf if is_hot else (unpinned_bytes[node] - moving - self.margin) / bb
            )
            seen[node] = key
            changed = True
        if changed:  # as numpy's min: NaN if any is
            self.least = math.nan if any(self._nan) else min(free, default=math.inf)
        self.moving, self.hot = in_flight_bytes, hot


@dataclass(frozen=True)
class CopyTerms:
    """Per chain (first axis), target node and cut; a chain's cuts are ``ends[i, :cuts[i]]``
    (beyond: padding, never admissible). Per-chain scalars are plain lists (read one at a
    time, chain by chain)."""

    depth: np.ndarray  # [R] the deepest prefix held in HBM (the sources hold it)
    cuts: list[int]  # [R] the cuts weighed (0: no copy possible)
    ends: np.ndarray  # [R, K] the depth a copy reaches
    src: np.ndarray  # [R, n] per target, the fastest source
    start: np.ndarray  # [R, n] the target's prefix (the copy starts there): ``held``
    real: np.ndarray  # [R, n] the prefix each node holds in HBM
    nblk: np.ndarray  # [R, n, K] blocks moved
    nblk_f: np.ndarray  # [R, n, K] the same, as floats
    transfer: np.ndarray  # [R, n, K] ms until the copy lands
    gate: np.ndarray  # [R, n, K] queue_gate_factor x transfer; +inf where the cut or target
    # is barred whatever the queues (no block to move, tenant rule, time gates)
    fetch: np.ndarray  # [R, n] without a copy, the cost of the held prefix's missing blocks
    residual: np.ndarray  # [R, n, K] with the copy, the blocks beyond the cut still missing
    cost_transfer: np.ndarray  # [R, n, K] weighted transfer + tier penalty
    congestion: np.ndarray  # [R, n, K]
    p_hit: np.ndarray  # [R, K] the chain's P at each cut, corrected by the copies' outcomes
    # (the same for every target)
    p_model: np.ndarray  # [R, K] the same before the correction (the scorer's)
    reclaim: np.ndarray  # [R, n, K] (1 - P) x blocks x reclaim_ms_per_block at p_hit
    time_left_ms: np.ndarray  # [R] until the predicted first use (the window when unknown)
    any_ok: list[bool]  # [R] some cut and target pass the gates that need no queue
    most: list[int]  # [R] the most blocks a copy at one of the chain's own cuts moves (not
    # the batch's padding: the same whichever chains share the batch)
    no_congestion: list[bool]  # [R] the congestion term is 0 everywhere
    no_reclaim: list[bool]  # [R] the reclaim term at p_hit is 0 everywhere
    tokens: list[int]  # [R] the request's tokens


def _cuts(lo: np.ndarray, depth: np.ndarray, max_cuts: int) -> tuple[np.ndarray, np.ndarray]:
    """[R, K] the depths weighed per chain (``lo..depth``, or a coarse grid that always ends
    with the whole prefix; beyond a chain's own: 0) and [R] how many.

    The grid of a chain with more depths than ``max_cuts`` is
    ``np.unique(np.linspace(lo, depth, max_cuts).round())``, made for all such chains in one
    linspace (row by row the scalar call's arithmetic: their steps are all positive; a call
    per chain was most of a tick's copy terms when long chains were weighed). Its step,
    ``(depth - lo) / (max_cuts - 1)``, is above one block, so rounding repeats no depth and
    ``np.unique`` keeps every one (linspace's rounding errors, a few ulps of ``depth``, are
    far below the step's excess ``1 / (max_cuts - 1)``)."""
    count = np.maximum(depth - lo + 1, 0)
    k = int(count.max(initial=0))
    if k <= max_cuts:
        return lo[:, None] + np.arange(k), count
    long = count > max_cuts
    count[long] = max_cuts
    width = np.arange(max_cuts)
    out = np.where(width < count[:, None], lo[:, None] + width, 0)
    out[long] = np.linspace(lo[long], depth[long], max_cuts, axis=1).round()
    return out, count


@np.errstate(invalid="ignore", divide="ignore", over="ignore")
def copy_terms(
    view: ClusterView,
    cfg: DeciderConfig,
    terms: TickTerms,
    *,
    held: np.ndarray,
    real: np.ndarray,
    p: np.ndarray,
    lens: np.ndarray,
    tail_tokens: np.ndarray,
    tenants: list[str],
    public_blocks: np.ndarray,
    time_left_ms: np.ndarray,
    known: np.ndarray,
) -> CopyTerms:
    """The terms for chains with prefixes ``held`` (in HBM or on their way) and ``real`` (in
    HBM), both ``[R, n]``, and effective probabilities ``p`` ``[R, >= max lens]``."""
    c, links, pf = cfg.costs, view.links, view.prefill
    bb, bt = view.block_bytes, view.block_tokens
    r = len(held)
    depth = real.max(axis=1, initial=0)
    lo = held.min(axis=1) + 1
    ends, cuts = _cuts(lo, depth, c.max_cuts)
    cuts[depth == 0] = 0
    k = ends.shape[1]
    is_src = real == depth[:, None]  # [R, n]
    # per target, the fastest source (the first one on a tie, as argmin over the sources)
    full = np.maximum(depth[:, None] - held, 0) * bb  # [R, n] by target
    eta = links.backlog_ms[None] + links.latency_ms[None] + full[:, None, :] / links.bytes_per_ms
    masked = np.where(is_src[:, :, None], eta, np.inf)
    src = masked.argmin(axis=1)  # [R, n]
    # (some eta is not finite, and a target's sources all have infinite ones: the first)
    if not np.isfinite(eta).all() and np.isinf(masked.min(axis=1)).any():
        lost = ~is_src[np.arange(r)[:, None], src]
        src = np.where(lost, is_src.argmax(axis=1)[:, None], src)
    # per chain and target, its link from the source: [R, n, 1] each
    bw, latency, backlog, tier_ms, util = terms.links[:, src * view.n + terms.nodes, None]
    nblk = ends[:, None, :] - held[:, :, None]  # [R, n, K]
    valid = nblk > 0
    wire = latency + nblk * bb / bw
    transfer = backlog + wire
    # what a request still has to do to have the whole held prefix (``depth`` blocks) in
    # HBM: without a copy, from each node's own prefix; with one, from the cut on
    td = (depth * bt)[:, None]
    fetch = pf.spans_ms(held * bt, td)  # [R, n]
    residual = pf.spans_ms((ends * bt)[:, None, :], td[:, :, None])  # [R, 1, K]
    if view.reactive_pull:  # the router would pull the missing blocks on the critical path
        fetch = np.minimum(fetch, latency[:, :, 0] + full / bw[:, :, 0])
        rest = (depth[:, None, None] - ends[:, None, :]) * bb
        residual = np.minimum(residual, np.where(rest > 0, latency + rest / bw, 0.0))
    fetch = np.where(depth[:, None] > held, fetch, 0.0)  # [R, n]
    residual = np.where(valid, np.maximum(residual, 0.0), 0.0)  # [R, n, K]
    cost_transfer = c.transfer_weight * transfer + tier_ms
    congestion = c.congestion_weight * wire * util
    own = (np.arange(k) < cuts[:, None])[:, None, :]  # [R, 1, K] the chain's own cuts
    ok = valid & own
    if view.node_tenants:  # tenant rule: only the public prefix crosses
        serves = np.array([terms.serves(view, t) for t in tenants], dtype=bool).reshape(r, view.n)
        cap = np.where(serves, depth[:, None], public_blocks[:, None])
        ok &= ends[:, None, :] <= cap[:, :, None]
    left = time_left_ms[:, None, None]
    ok &= left > transfer
    if known.any():  # a known first use: the replica lands at most lead_ms before it
        ok &= ~known[:, None, None] | (left - transfer <= c.lead_ms)
    p_model = p[np.arange(r)[:, None], np.minimum(np.maximum(ends - 1, 0), p.shape[1] - 1)]
    p_hit = p_model
    if terms.factor != 1.0:  # as often as this decider's copies turned out to be used
        p_hit = np.minimum(p_model * terms.factor, 1.0)
    reclaim = (1.0 - p_hit[:, None, :]) * nblk * c.reclaim_ms_per_block
    gate = np.where(ok, c.queue_gate_factor * transfer, np.inf)  # barred: never passed
    return CopyTerms(
        depth, cuts.tolist(), ends, src, held, real, nblk, nblk.astype(float), transfer,
        gate, fetch, residual, cost_transfer, congestion, p_hit, p_model, reclaim, time_left_ms,
        ok.any(axis=(1, 2)).tolist(),
        np.where(own, nblk, 0).max(axis=(1, 2), initial=0).tolist(),
        (~congestion.any(axis=(1, 2))).tolist(),
        (~reclaim.any(axis=(1, 2))).tolist(), (lens * bt + tail_tokens).tolist(),
    )  # fmt: skip
