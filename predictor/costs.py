"""The cost terms of ``P(hit) x saved_critical_path_ms > transfer_ms + congestion_cost +
memory_pressure_cost + misprediction_reclaim_cost`` and the gates, for one action.

All in milliseconds, for moving blocks ``[start, end)`` of a chain to a node; ``P(hit)`` is
the scorer's probability that the cut's deepest block is requested within the window,
corrected by how often this decider's copies turned out to be used: requested in their life
and routed to their node (:mod:`kvcast.predictor.outcome_feedback`):

- ``saved``: the request's TTFT without the action minus with it, to the point where it
  has the chain's whole held prefix (the ``depth`` blocks its sources hold) in HBM; what
  comes after is the same wherever it runs. Without the action the request goes to the node
  x the router would pick now (asked through the view's probe; without a probe, the x that
  minimises ``queue_x + fetch_x``) and pays ``queue_x + fetch_x``, where ``fetch_x`` is the
  prefill of the prefix blocks x lacks (0 on a holder; when the router pulls missing KV on
  the critical path, Mooncake-style, the pull's wire time if shorter). With it, it runs on
  the target and pays ``queue_target + residual``, where ``residual`` is what the cut leaves
  missing (the blocks from ``end`` to ``depth``, priced the same way; 0 for a whole copy):
  ``saved = max(0, queue_x + fetch_x - queue_target - residual)``. A replica on the node
  the router picks anyway saves that node's recompute; one elsewhere saves the queue it
  avoids, less what it still has to compute. The router must also pick the target once the
  copy is there (asked likewise), else the option is dropped. Queues are the predicted ones
  of :mod:`kvcast.predictor.targets`.
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

import math
from dataclasses import dataclass

import numpy as np

from kvcast.predictor.chains import ChainPlan
from kvcast.predictor.cluster_view import ClusterView
from kvcast.predictor.commands import DecisionReason
from kvcast.predictor.copy_terms import CopyTerms, TickTerms, copy_terms
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
    p_model: float | None = None  # P(hit) before the outcome correction (None: not corrected)

    @property
    def net_ms(self) -> float:
        return self.reason.net_ms


def replication_option(
    plan: ChainPlan,
    view: ClusterView,
    cfg: DeciderConfig,
    *,
    real: list[int],
    queue: list[float],
    hot: list[bool],
    in_flight_bytes: list[float],
    terms: TickTerms | None = None,
    copy: tuple[CopyTerms, int] | None = None,
) -> Option | None:
    """The best (target, cut) for copying this chain, over every node and depth, or None.

    ``real``: per node, the prefix it holds in HBM now (sources hold the deepest);
    ``plan.held`` also counts replicas on their way. ``queue``, ``hot``, ``in_flight_bytes``:
    per node, the tick's state as the decisions before this one left it (plain lists).
    Vectorised: rows are target nodes, columns the depth ``end`` the copy would reach.
    ``copy``: the chain's row of terms computed for this placement by
    :func:`~kvcast.predictor.copy_terms.copy_terms` (else computed here). Call it under
    ``np.errstate(invalid="ignore", divide="ignore", over="ignore")`` (the decider does, once
    per tick): NaN and infinite terms are expected, and never pass a gate.
    """
    if terms is None:
        terms = TickTerms.of(view, cfg)
    if copy is None:
        copy = (_copy_terms(plan, view, cfg, terms, real), 0)
    ct, i = copy
    k = int(ct.cuts[i])
    if k == 0 or not ct.any_ok[i]:  # no cut and target admissible whatever the queues
        return None
    return _best(plan, view, cfg, ct, i, k, queue, hot, in_flight_bytes, terms)


def cannot_pay(
    ct: CopyTerms,
    queues: np.ndarray,
    view: ClusterView,
    cfg: DeciderConfig,
    terms: TickTerms,
    free: np.ndarray,
    room: np.ndarray,
) -> list[bool]:
    """Per chain of ``ct`` (its rows), whether :func:`_best` would find no admissible
    (target, cut) given ``queues`` ``[R, n]`` (each chain's :meth:`queue_without`, as the
    tick starts) and ``free`` and ``room`` ``[n, 1]`` (:meth:`TickTerms.memory` then), for a
    view without a router probe: all chains in one numpy pass, for the decider to skip those
    until a command moves something.

    Exact, never a guess: the net value here is an upper bound of ``_best``'s, term by term
    the same arithmetic without the memory term (never negative) and with P at or above
    ``_best``'s (its eviction odds bounded by :func:`_survival_at_most`; so the reclaim term
    is no larger: rounding is monotone), so where no cell passes here none passes there. A
    prefill model whose block cost is negative rules nothing out. The eviction odds are
    bounded rather than left out: where nodes evict faster than a copy's life, few copies
    survive to their use, and every chain let through for that alone was weighed one by one
    to be refused (``bench_tick_trace.py``'s state: up to 11 chains a tick, a third of the
    slowest ticks' decider time)."""
    if not terms.block_ms >= 0.0:
        return [False] * len(queues)
    w = (ct.fetch + queues).min(axis=1)[:, None, None]  # as ``_best`` adds them, chain by chain
    saved = (w - queues[:, :, None]) - ct.residual
    np.maximum(saved, 0.0, out=saved)
    if terms.no_evictions:  # as ``_best``: P(hit) and the reclaim term at it
        p, reclaim = ct.p_hit[:, None, :], ct.reclaim
    else:
        p = ct.p_hit[:, None, :] * _survival_at_most(ct, queues, view, free)
        reclaim = (1.0 - p) * ct.nblk_f * cfg.costs.reclaim_ms_per_block
    net = p * saved
    net -= ct.cost_transfer
    net -= ct.congestion  # (0 where ``_best`` skips it: x - 0.0 is x but for a zero's sign)
    net -= reclaim  # at P no lower than ``_best``'s: no more than its term (0: skipped)
    ok = (w > ct.gate) & (ct.nblk_f <= room) & (net > 0.0)
    return (~ok.any(axis=(1, 2))).tolist()


# ``exp``'s last bits are its implementation's (numpy's SIMD loop or the C library's, by CPU
# and array layout), so a bound of ``_best``'s survival is raised past them: a relative slack
# and a floor far beyond any implementation's error, subnormal results included
EXP_SLACK, EXP_FLOOR = 1.0 + 2.0**-20, 2.0**-1000


def _survival_at_most(
    ct: CopyTerms, queues: np.ndarray, view: ClusterView, free: np.ndarray
) -> np.ndarray:
    """``[R, n, K]`` at least the chance that no eviction takes the copy before its use, as
    :func:`_best` computes it per chain, target and cut (:func:`eviction_survival` for every
    chain at once; then raised past ``exp``'s rounding)."""
    survival = eviction_survival(ct.time_left_ms[:, None] + queues, view, free, ct.nblk_f)
    survival *= EXP_SLACK
    survival += EXP_FLOOR
    return survival


def eviction_survival(
    until_use: np.ndarray, view: ClusterView, free: np.ndarray, nblk: np.ndarray | float
) -> np.ndarray:
    """The chance that no eviction takes a copy of ``nblk`` blocks before its use, ``until_use``
    ms away (per target, last axis; ``free``: the targets' free HBM in blocks): the target's
    expected evictions until then beyond its free HBM, ``excess``, give ``exp(-excess)``."""
    evictions = (view.evict_blocks_per_ms * until_use)[..., None]  # type: ignore[operator]
    excess = evictions - np.maximum(free - nblk, 0.0)
    np.maximum(excess, 0.0, out=excess)
    return np.exp(-excess)


def _copy_terms(
    plan: ChainPlan, view: ClusterView, cfg: DeciderConfig, terms: TickTerms, real: list[int]
) -> CopyTerms:
    return copy_terms(
        view,
        cfg,
        terms,
        held=np.asarray([plan.held]),
        real=np.asarray([real]),
        p=plan.p[None, :],
        lens=np.array([len(plan.blocks)]),
        tail_tokens=np.array([plan.tail_tokens]),
        tenants=[plan.tenant],
        public_blocks=np.array([plan.public_blocks]),
        time_left_ms=np.array([plan.time_left_ms]),
        known=np.array([plan.known_first_use]),
    )


def _best(
    plan: ChainPlan,
    view: ClusterView,
    cfg: DeciderConfig,
    ct: CopyTerms,
    i: int,
    k: int,
    queue: list[float],
    hot: list[bool],
    in_flight_bytes: list[float],
    terms: TickTerms,
) -> Option | None:
    """The inequality and the gates over targets x cuts (``ct`` holds what the tick's state
    does not change; the arithmetic is the one of the module doc, term by term and in this
    order, so that the values, ties included, never depend on how they are batched)."""
    c = cfg.costs
    fetch, nblk = ct.fetch[i], ct.nblk_f[i, :, :k]
    q = np.array(queue)
    qcol = q[:, None]
    tokens = 0
    if view.would_route is not None:  # where the router would send it without the copy
        tokens = ct.tokens[i]
        home = view.would_route(plan.blocks, tokens, plan.held)
        without = queue[home] + fetch.item(home)
    else:  # a router that picks the least TTFT
        without = (fetch + q).min().item()
    saved = (without - qcol) - ct.residual[i, :, :k]
    np.maximum(saved, 0.0, out=saved)
    margin = c.safety_margin_gib * GIB
    free_now, room, least = terms.memory(in_flight_bytes, hot, view.block_bytes, margin)
    p_hit = ct.p_hit[i, :k]
    survival = None  # per target and cut, the chance no eviction takes the copy before use
    if terms.no_evictions:  # P(hit) is the same on every target
        p, reclaim = p_hit, ct.reclaim[i, :, :k]
    else:
        survival = eviction_survival(plan.time_left_ms + q, view, free_now, nblk)
        p = p_hit * survival
        reclaim = (1.0 - p) * nblk * c.reclaim_ms_per_block
    cost_transfer, congestion = ct.cost_transfer[i, :, :k], ct.congestion[i, :, :k]
    net = p * saved
    net -= cost_transfer
    if not ct.no_congestion[i]:  # (x - 0.0 is x: a term that is 0 everywhere is skipped)
        net -= congestion
    memory = None
    if not least >= ct.most[i]:  # else every copy fits in free HBM: nothing displaced
        memory = nblk - free_now
        np.maximum(memory, 0.0, out=memory)
        memory *= c.displaced_reuse_prob
        memory *= terms.block_ms
        net -= memory
    if not (terms.no_evictions and ct.no_reclaim[i]):
        net -= reclaim
    # the gates: +inf where the cut or target is barred; the safety margin (never a hot node)
    ok = (without > ct.gate[i, :, :k]) & (nblk <= room) & (net > 0.0)
    t, j = _routed_choice(plan, view, cfg, np.where(ok, net, -np.inf), ct, i, tokens)
    if t < 0:
        return None
    reason = DecisionReason(
        p.item(j) if p.ndim == 1 else p.item(t, j),
        saved.item(t, j),
        cost_transfer.item(t, j),
        congestion.item(t, j),
        0.0 if memory is None else memory.item(t, j),
        reclaim.item(t, j),
        without,
        float(queue[t]),
        ct.nblk.item(i, t, j),
    )
    start, src = ct.start.item(i, t), ct.src.item(i, t)
    p_model = ct.p_model.item(i, j)  # P(hit) as the scorer gave it, before the correction
    if survival is not None:
        p_model *= survival.item(t, j)
    end, transfer = ct.ends.item(i, j), ct.transfer.item(i, t, j)
    return Option(src, t, start, end, transfer, reason, p_model)


def _routed_choice(
    plan: ChainPlan,
    view: ClusterView,
    cfg: DeciderConfig,
    net: np.ndarray,
    ct: CopyTerms,
    i: int,
    tokens: int,
) -> tuple[int, int]:
    """The best admissible (target, cut) that the router would actually use: a replica on a
    node the router would not send the request to saves nothing. Candidates go best first
    (``net``: targets x cuts, -inf where not admissible); equal values go lowest target
    first, then shallowest cut, on every machine (a stable order: numpy's default sort
    orders ties differently on CPUs with and without AVX-512, and identical idle nodes tie
    all the time)."""
    flat_net = net.ravel()
    width = net.shape[1]
    if view.would_route is None:  # the best, as the router follows the replicas
        flat = int(flat_net.argmax())  # the first of the equal best
        return divmod(flat, width) if math.isfinite(flat_net.item(flat)) else (-1, -1)
    values = flat_net.tolist()
    tried: set[int] = set()
    for flat in np.argsort(-flat_net, kind="stable").tolist():
        t, j = divmod(flat, width)
        if not math.isfinite(values[flat]) or len(tried) >= cfg.targets.route_checks:
            break
        if t in tried:
            continue  # this target's best depth was already refused by the router
        tried.add(t)
        match = list(plan.held)
        match[t] = max(match[t], ct.ends.item(i, j))
        if view.would_route(plan.blocks, tokens, match) == t:
            return t, j
    return -1, -1
