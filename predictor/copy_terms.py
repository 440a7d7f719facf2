"""What copying each chain to each node costs before the tick's state moves: one numpy pass
over chains x target nodes x cuts.

For the chains a tick weighs, everything in the inequality of :mod:`kvcast.predictor.costs`
that depends only on the view and on where each chain's prefix lives: the cuts (the depth a
copy would reach), the fastest source per target, the blocks moved, transfer and wire time,
the recompute a copy saves, the transfer, tier and congestion costs, the tenant rule and the
time gates. What moves during a tick (predicted queues, hot nodes, bytes in flight) is
applied per chain by :func:`kvcast.predictor.costs.replication_option`; a chain whose prefix
placement changed meanwhile (a copy of a shared prefix on its way) is recomputed alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvcast.predictor.cluster_view import ClusterView
from kvcast.predictor.decider_config import DeciderConfig


@dataclass
class TickTerms:
    """What the inequality reads from the view and the config that holds for a whole tick."""

    nodes: np.ndarray  # [n] 0..n-1
    free_bytes: np.ndarray  # [n] ``view.free_bytes``
    unpinned_bytes: np.ndarray  # [n] capacity - pinned - speculative
    tier_ms: np.ndarray  # [n, n] the tier penalty of each link
    util: np.ndarray  # [n, n] the share of the budget window each link is committed
    block_ms: float  # the prefill of one block
    no_evictions: bool  # no node evicts (a replica's survival odds are 1)
    serving: dict[str, np.ndarray]  # tenant -> [n] which nodes serve it (filled as asked)
    _memory: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float] | None = None

    @classmethod
    def of(cls, view: ClusterView, cfg: DeciderConfig) -> TickTerms:
        links = view.links
        with np.errstate(invalid="ignore", divide="ignore"):
            util = np.clip(links.backlog_ms / cfg.budgets.budget_window_ms, 0.0, 1.0)
        rate = view.evict_blocks_per_ms
        return cls(
            np.arange(view.n),
            view.free_bytes,
            view.capacity_bytes - view.pinned_bytes - view.spec_bytes,
            np.asarray(cfg.targets.tier_penalty_ms)[links.tier],
            util,
            view.prefill.span_ms(0, view.block_tokens),
            rate is None or not np.any(rate),
            {},
        )

    def memory(
        self, in_flight_bytes: np.ndarray, hot: np.ndarray, block_bytes: int, margin: float
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """``[n, 1]`` free HBM (blocks), room for a replica (blocks, keeping ``margin`` bytes;
        -inf on a ``hot`` node) and the least free HBM, given the bytes in flight to each
        node (the answer for the last arrays asked is kept)."""
        last = self._memory
        if last is not None and last[0] is in_flight_bytes and last[1] is hot:
            return last[2], last[3], last[4]
        free = (self.free_bytes - in_flight_bytes) / block_bytes
        np.maximum(free, 0.0, out=free)
        room = (self.unpinned_bytes - in_flight_bytes - margin) / block_bytes
        room[hot] = -np.inf
        least = float(free.min()) if len(free) else float("inf")
        free_col, room_col = free[:, None], room[:, None]
        self._memory = (in_flight_bytes, hot, free_col, room_col, least)
        return free_col, room_col, least

    def serves(self, view: ClusterView, tenant: str) -> np.ndarray:
        out = self.serving.get(tenant)
        if out is None:
            out = np.array([view.serves(t, tenant) for t in range(view.n)], dtype=bool)
            self.serving[tenant] = out
        return out


@dataclass(frozen=True)
class CopyTerms:
    """Per chain (first axis), target node and cut; a chain's cuts are ``ends[i, :cuts[i]]``
    (beyond: padding, never admissible)."""

    depth: np.ndarray  # [R] the deepest prefix held in HBM (the sources hold it)
    cuts: np.ndarray  # [R] the cuts weighed (0: no copy possible)
    ends: np.ndarray  # [R, K] the depth a copy reaches
    src: np.ndarray  # [R, n] per target, the fastest source
    start: np.ndarray  # [R, n] the target's prefix (the copy starts there): ``held``
    real: np.ndarray  # [R, n] the prefix each node holds in HBM
    nblk: np.ndarray  # [R, n, K] blocks moved
    nblk_f: np.ndarray  # [R, n, K] the same, as floats
    transfer: np.ndarray  # [R, n, K] ms until the copy lands
    gate: np.ndarray  # [R, n, K] queue_gate_factor x transfer; +inf where not ``static_ok``
    fetch: np.ndarray  # [R, n, K] without the copy, the cost of the missing blocks there
    cost_transfer: np.ndarray  # [R, n, K] weighted transfer + tier penalty
    congestion: np.ndarray  # [R, n, K]
    p_hit: np.ndarray  # [R, K]
    p: np.ndarray  # [R, n, K] p_hit for every target
    reclaim: np.ndarray  # [R, n, K] (1 - P) x blocks x reclaim_ms_per_block at p_hit
    static_ok: np.ndarray  # [R, n, K] cut and target admissible whatever the queues
    any_ok: np.ndarray  # [R] bool: some cut and target pass ``static_ok``
    most: np.ndarray  # [R] the most blocks any copy moves
    no_congestion: np.ndarray  # [R] bool: the congestion term is 0 everywhere
    no_reclaim: np.ndarray  # [R] bool: the reclaim term at p_hit is 0 everywhere
    tokens: np.ndarray  # [R] the request's tokens


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
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return _terms(
            view, cfg, terms, held, real, p, lens, tail_tokens, tenants, public_blocks,
            time_left_ms, known,
        )  # fmt: skip


def _cuts(lo: np.ndarray, depth: np.ndarray, max_cuts: int) -> tuple[np.ndarray, np.ndarray]:
    """[R, K] the depths weighed per chain (``lo..depth``, or a coarse grid that always ends
    with the whole prefix) and [R] how many."""
    count = np.maximum(depth - lo + 1, 0)
    if not (count > max_cuts).any():
        k = int(count.max(initial=0))
        return lo[:, None] + np.arange(k), count
    rows = []
    for a, b in zip(lo.tolist(), depth.tolist(), strict=True):
        if b - a + 1 > max_cuts:
            rows.append(np.unique(np.linspace(a, b, max_cuts).round().astype(np.int64)))
        else:
            rows.append(np.arange(a, max(b + 1, a)))
    count = np.array([len(r) for r in rows], dtype=np.int64)
    out = np.zeros((len(rows), int(count.max(initial=0))), np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out, count


def _terms(
    view: ClusterView,
    cfg: DeciderConfig,
    terms: TickTerms,
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
    if np.isinf(masked.min(axis=1)).any():  # only infinite etas: the first source
        lost = ~is_src[np.arange(r)[:, None], src]
        src = np.where(lost, is_src.argmax(axis=1)[:, None], src)
    nodes = terms.nodes
    nblk = ends[:, None, :] - held[:, :, None]  # [R, n, K]
    valid = nblk > 0
    bw = links.bytes_per_ms[src, nodes][:, :, None]
    wire = links.latency_ms[src, nodes][:, :, None] + nblk * bb / bw
    transfer = links.backlog_ms[src, nodes][:, :, None] + wire
    te, th = (ends * bt)[:, None, :], (held * bt)[:, :, None]
    fetch = pf.b_ms_per_token * (te - th) + pf.c_ms_per_token2 * (te**2 - th**2)
    if view.reactive_pull:  # the router would pull the missing blocks on the critical path
        fetch = np.minimum(fetch, wire)
    fetch[~valid] = 0.0
    cost_transfer = c.transfer_weight * transfer + terms.tier_ms[src, nodes][:, :, None]
    congestion = c.congestion_weight * wire * terms.util[src, nodes][:, :, None]
    ok = valid & (np.arange(k) < cuts[:, None])[:, None, :]
    if view.node_tenants:  # tenant rule: only the public prefix crosses
        serves = np.array([terms.serves(view, t) for t in tenants], dtype=bool).reshape(r, view.n)
        cap = np.where(serves, depth[:, None], public_blocks[:, None])
        ok &= ends[:, None, :] <= cap[:, :, None]
    left = time_left_ms[:, None, None]
    ok &= left > transfer
    ok &= ~known[:, None, None] | (left - transfer <= c.lead_ms)
    p_hit = p[np.arange(r)[:, None], np.clip(ends - 1, 0, p.shape[1] - 1)]
    p_all = np.repeat(p_hit[:, None, :], len(nodes), axis=1)
    reclaim = (1.0 - p_all) * nblk * c.reclaim_ms_per_block
    gate = np.where(ok, c.queue_gate_factor * transfer, np.inf)  # barred: never passed
    return CopyTerms(
        depth, cuts, ends, src, held, real, nblk, nblk.astype(float), transfer,
        gate, fetch, cost_transfer, congestion, p_hit, p_all, reclaim,
        ok, ok.any(axis=(1, 2)), nblk.max(axis=(1, 2), initial=0), ~congestion.any(axis=(1, 2)),
        ~reclaim.any(axis=(1, 2)), lens * bt + tail_tokens,
    )  # fmt: skip
