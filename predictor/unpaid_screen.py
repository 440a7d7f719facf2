"""Which chains no copy could pay for, told before their copy terms are made: a bound of
:func:`kvcast.predictor.costs.cannot_pay` from ``[chains, nodes]`` arrays alone.

``cannot_pay`` weighs every chain the decider may copy over targets x cuts, and needs the
chains' copy terms first (:func:`kvcast.predictor.copy_terms.copy_terms`: some sixty numpy
passes over ``[chains, nodes, cuts]``). Where nodes evict faster than a copy would wait for
its use, no copy survives to it, and a tick pays for those terms to rule every chain out.
Here each of ``cannot_pay``'s terms is bounded without the cuts, in the direction that
raises the net value, with the same arithmetic (each operation monotone in its operands,
so the rounded bound stays a bound):

- P(hit) at most the chain's P at its shallowest cut (``p`` never rises with depth),
  corrected as the copy terms correct it;
- survival at most ``exp(-excess)`` for a copy of one block into the target's whole free HBM
  (no bytes in flight), raised past ``exp``'s rounding by twice ``cannot_pay``'s slack;
- the queue a copy saves at most the least queue among the nodes that hold the whole prefix
  (a router that picks the least TTFT waits no longer) less the target's queue, no residual;
- the transfer and congestion costs at least those of one block over the cheapest link
  into the target from another node (a copy moves at least one block; time grows with the
  blocks wherever the bandwidth is not negative);
- the memory and reclaim terms at least 0 (the reclaim's ``1 - P`` only where the bound of P
  is below 1).

Where the bound's net value is at most 0 on every target, ``cannot_pay`` finds none above 0,
so the chain is ruled out as the tick starts. Anything not a number (NaN), a router probe, a
block prefill that is negative or infinite or a block size that is not positive rules nothing
out (:func:`screens`); nor does a cluster where no node evicts (there the bound seldom rules a
chain out: a tick would pay for it and still make the terms).
"""

from __future__ import annotations

import math

import numpy as np

from kvcast.predictor.chains import PlanBatch
from kvcast.predictor.cluster_view import ClusterView
from kvcast.predictor.copy_terms import link_terms
from kvcast.predictor.costs import EXP_FLOOR, EXP_SLACK, eviction_survival
from kvcast.predictor.decider_config import DeciderConfig

# the copy terms count a copy's bytes as int64 blocks x block size: at or past 2**40 bytes a
# block, a chain of 2**23 blocks would wrap (and bounds no longer bound)
MAX_BLOCK_BYTES = 1 << 40


def surely_unpaid(
    plans: PlanBatch,
    rows: np.ndarray,
    queues: np.ndarray,
    view: ClusterView,
    cfg: DeciderConfig,
    factor: float,
) -> list[bool]:
    """Per chain of ``plans``' ``rows`` (``queues`` ``[len(rows), n]``: their
    :meth:`~kvcast.predictor.targets.LoadForecast.queues_without`), whether
    :func:`~kvcast.predictor.costs.cannot_pay` would rule it out, told without copy terms.
    ``factor``: the outcome correction the tick's copy terms use. For chains with no copy on
    their way (their prefix in HBM is their ``held``). Only where some node evicts: elsewhere
    the bound seldom rules a chain out, and ``cannot_pay`` will."""
    if not screens(view) or not len(rows) or not plans.p.shape[1]:
        return [False] * len(rows)
    held, p, left = plans.held[rows], plans.p[rows], plans.time_left_ms[rows]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return _unpaid(held, p, left, queues, view, cfg, factor).tolist()


def screens(view: ClusterView) -> bool:
    """Whether :func:`surely_unpaid` may rule a chain out in this view: some node evicts, no
    router probe, a block prefill that is finite and not negative (with an infinite one the
    memory term is 0 x inf, not a number: the bound makes no argument for it), a positive
    block size below ``MAX_BLOCK_BYTES`` (a copy's time grows with its blocks)."""
    rate = view.evict_blocks_per_ms
    return (
        rate is not None
        and bool(np.any(rate))
        and view.would_route is None
        and 0.0 <= view.prefill.span_ms(0, view.block_tokens) < math.inf
        and 0 < view.block_bytes < MAX_BLOCK_BYTES
    )


def _unpaid(
    held: np.ndarray,
    p: np.ndarray,
    time_left_ms: np.ndarray,
    queues: np.ndarray,
    view: ClusterView,
    cfg: DeciderConfig,
    factor: float,
) -> np.ndarray:
    """[R] where the bound's net value is at most 0 on every target (see the module doc)."""
    r, n = held.shape
    c = cfg.costs
    # one block over each link, as the copy terms price a copy (from the same per-link floats)
    bw, latency, backlog, tier_ms, util = link_terms(view, cfg)
    wire = latency + view.block_bytes / bw
    cost = c.transfer_weight * (backlog + wire) + tier_ms
    congestion = c.congestion_weight * wire * util
    other = ~np.eye(n, dtype=bool)  # a source is never its own target
    bounded = ~(bw < 0.0)  # else no bound (NaN: it propagates)
    cost = np.where(other, np.where(bounded, cost, -np.inf), np.inf).min(axis=0)  # [n]
    congestion = np.where(other, np.where(bounded, congestion, -np.inf), np.inf).min(axis=0)
    # P(hit) at the shallowest cut, times the survival of a one-block copy into the whole free
    # HBM (``eviction_survival`` with no bytes in flight)
    p_hit = p[np.arange(r), np.minimum(held.min(axis=1), p.shape[1] - 1)]
    if factor != 1.0:
        p_hit = np.minimum(p_hit * factor, 1.0)
    free = np.maximum(view.free_bytes / np.float64(view.block_bytes), 0.0)[:, None]
    survival = eviction_survival(time_left_ms[:, None] + queues, view, free, 1.0)[:, :, 0]
    survival *= EXP_SLACK * EXP_SLACK
    survival += 2.0 * EXP_FLOOR
    p_max = p_hit[:, None] * survival
    depth = held.max(axis=1)
    without = np.where(held >= depth[:, None], queues, np.inf).min(axis=1)
    saved = np.maximum(without[:, None] - queues, 0.0)
    net = p_max * saved - cost - congestion
    return ((net <= 0.0) & (p_max < 1.0)).all(axis=1)  # (P below 1: the reclaim is not negative)
